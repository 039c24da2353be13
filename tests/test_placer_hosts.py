"""The placer's answers a kind asks instead of branching on "here or a node" (Placer.host,
hosts, here, folder, cpu_containers, named_ifaces, network_words, placed_words): this host's
and a cluster's (a ClusterPlacer over the lab's file; no node is reached), and a kind's plan
line taking its words from them."""

from __future__ import annotations

import pytest
from test_cluster import lab

from tierbench.interfaces.netif import Endpoint
from tierbench.kinds import registry
from tierbench.placement import nodes
from tierbench.placement.cluster import ClusterPlacer
from tierbench.placement.clusterfile import ClusterError
from tierbench.placement.local import LocalPlacer
from tierbench.placement.model import PROJECT, Container
from tierbench.transport import LOCAL, Transport


def box(service: str, node: str | None, pid: int) -> Container:
    return Container(service, f"id-{service}", f"tierbench-{service}-1", pid, "img", "sha", "",
                     node, f"tierbench-{node}" if node else None)


def test_one_host_answers_with_this_machine() -> None:
    here = LocalPlacer()
    assert here.host("web") == LOCAL and here.host("web", 2) == LOCAL
    assert here.hosts("net_client") == [LOCAL] and here.here("disk")
    assert here.cpu_containers([("web", box("web", None, 7))]) is None
    assert here.network_words("198.18.12.0/24", "round the nodes") == "198.18.12.0/24"
    assert here.placed_words({"proxy": ["proxy", "proxy2"]}) == ""
    eps = {"fs-client:fs-client2": [Endpoint("fs-client2", "veth1", None),
                                    Endpoint("fs-client2", "eth0", 42)]}
    assert here.named_ifaces(eps) == {"fs-client:fs-client2:veth1": "veth1"}


def test_a_cluster_answers_with_the_roles_nodes() -> None:
    c = ClusterPlacer(lab(web=["node3", "node4"]))
    # a role's services go round its nodes: web on node3, web2 on node4, web3 on node3
    assert [c.host("web", i).name for i in range(3)] == ["node3", "node4", "node3"]
    assert c.host("web") == nodes.transport(c.node("node3")) and c.host("web").remote
    assert [h.name for h in c.hosts("pfs_io")] == ["node4", "node5"]
    assert not c.here("web") and not c.here("net_client")
    assert c.folder("net_client") == f"{c.cluster.workdir.rstrip('/')}/{PROJECT}"
    assert c.cpu_containers([("web", box("web", "node3", 7))]) == [
        ("web", nodes.transport(c.node("node3")), 7)]
    assert c.network_words("198.18.12.0/24") == "their nodes"
    assert c.network_words("198.18.12.0/24", "round them") == "their nodes (round them)"
    assert c.placed_words({"proxy": ["proxy", "proxy2"], "web": ["web", "web2", "web3"],
                           "app": ["app"]}) == \
        "proxy node2, proxy2 node2; web node3, web2 node4, web3 node3; app ?"
    eps = {"fs-server": [Endpoint("node3", "eth0", None, Transport("node3"))],
           "fs-client": [Endpoint("node3", "eth0", None, Transport("node3")),
                         Endpoint("node4", "eth0", None, Transport("node4"))]}
    assert c.named_ifaces(eps) == {"node3:eth0": "eth0", "node4:eth0": "eth0"}  # each NIC once


def test_a_role_the_cluster_file_leaves_out_has_no_host() -> None:
    c = ClusterPlacer(lab(net_client=None))
    assert c.hosts("net_client") == [] and not c.here("net_client")
    with pytest.raises(ClusterError, match="roles.net_client: not placed"):
        c.host("net_client")


def test_a_plan_line_takes_its_words_from_the_placer() -> None:
    """fs' deployment line: the Compose network's subnet here, the nodes on a cluster."""
    kind = registry.kind("fs")
    for placer, words in ((LocalPlacer(), "on 198.18.12.0/24"),
                          (ClusterPlacer(lab(fs_server="node2", fs_client="node3")),
                           "on their nodes")):
        exp = registry.load_experiment("fs-clients", placer=placer)
        point = kind.points(exp, exp.seed)[0]
        assert words in kind.deployment_line(exp, point, True)
