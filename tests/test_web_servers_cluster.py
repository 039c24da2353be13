"""stack.web_servers: 3 on a cluster without nodes: the web role as one node or a list, web,
web2 and web3 going round its nodes (each on its own port, so several may share a node), the
file sets written on every node of the role, and the Apache proxy's balancer members at the
servers' node addresses and ports (compose files read with `docker compose config`, which needs
no engine)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest

from tierbench.kinds import registry
from tierbench.kinds.web import services
from tierbench.placement import hostnet, model
from tierbench.placement.clusterfile import ClusterError, parse_cluster

ROOT = Path(__file__).resolve().parent.parent
FILES = ["docker-compose.yml", services.WEB_SERVERS_OVERLAY]
WANTED = ["fileset", "web", "web2", "web3", "proxy", "loadgen"]
LAB = {
    "version": 1,
    "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
               "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
              for i in range(1, 6)],
    "roles": {"loadgen": "node1", "proxy": "node2", "web": ["node3", "node4", "node5"]},
}


def lab(**roles: object) -> object:
    data = copy.deepcopy(LAB)
    data["roles"].update(roles)
    return parse_cluster(data, registry.roles(), "lab.yml")


def config(env: dict[str, str] | None = None) -> dict:
    argv = ["docker", "compose", *(a for f in model.host_files([str(ROOT / f) for f in FILES])
                                   for a in ("-f", f)), "config", "--format", "json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})})
    return json.loads(done.stdout)


def test_the_web_role_takes_one_node_or_a_list() -> None:
    assert lab().placement()["web"] == ["node3", "node4", "node5"]
    assert lab(web="node3").placement()["web"] == ["node3"]
    with pytest.raises(ClusterError, match=r"roles\.web: node3 is listed twice"):
        lab(web=["node3", "node3"])
    with pytest.raises(ClusterError, match=r"roles\.web: no node named 'node9'"):
        lab(web=["node3", "node9"])
    with pytest.raises(ClusterError, match=r"roles\.loadgen"):
        lab(loadgen=["node1"])  # the single roles still take one node


def test_three_web_servers_go_round_the_web_nodes_and_the_file_sets_follow() -> None:
    assert model.host_overlay(services.WEB_SERVERS_OVERLAY) == "compose/host-web-servers.yml"
    conf = config()
    where = hostnet.place(conf, WANTED, {}, lab())
    assert where == {"web": {"node3": 1}, "web2": {"node4": 1}, "web3": {"node5": 1},
                     "fileset": {"node3": 1, "node4": 1, "node5": 1}, "proxy": {"node2": 1},
                     "loadgen": {"node1": 1}}
    # two web nodes: web3 goes round to the first; one: all three (and the file sets) there
    assert {s: h for s, h in hostnet.place(conf, WANTED, {}, lab(web=["node3", "node4"])).items()
            if s.startswith(("web", "fileset"))} == {
        "web": {"node3": 1}, "web2": {"node4": 1}, "web3": {"node3": 1},
        "fileset": {"node3": 1, "node4": 1}}
    one = hostnet.place(conf, WANTED, {}, lab(web="node3"))
    assert {one[s] == {"node3": 1} for s in ("web", "web2", "web3", "fileset")} == {True}
    # one web server: as before, the file sets beside it
    assert hostnet.place(config(), ["fileset", "web", "proxy", "loadgen"], {}, lab())["fileset"] \
        == {"node3": 1}
    deps = {s: list(conf["services"][s].get("depends_on") or {}) for s in WANTED}
    levels = hostnet.topo_levels(WANTED, deps)
    assert levels[0] == ["fileset"] and levels.index(["proxy"]) > levels.index(
        [s for s in levels if "web" in s][0])


def test_each_server_listens_on_its_own_port_and_the_proxy_balances_to_them() -> None:
    addrs = {"TIERBENCH_ADDR_WEB": "198.18.16.13", "TIERBENCH_ADDR_WEB2": "198.18.16.14",
             "TIERBENCH_ADDR_WEB3": "198.18.16.13", "TIERBENCH_ADDR_PROXY": "198.18.16.12"}
    services = config(addrs)["services"]
    ports = {s: services[s]["labels"][hostnet.PORT_LABEL] for s in ("web", "web2", "web3")}
    assert ports == {"web": "8080", "web2": "8081", "web3": "8082"}
    for s, addr in (("web", "198.18.16.13"), ("web2", "198.18.16.14"), ("web3", "198.18.16.13")):
        assert services[s]["network_mode"] == "host" and not services[s].get("networks")
        assert services[s]["labels"][hostnet.ROLE_LABEL] == "web"
        assert services[s]["environment"]["APACHE_LISTEN"] == f"{addr}:{ports[s]}"
    env = services["proxy"]["environment"]
    assert env["WEB_SERVERS"] == "3"
    assert (env["BACKEND"], env["BACKEND2"], env["BACKEND3"]) == (
        "198.18.16.13:8080", "198.18.16.14:8081", "198.18.16.13:8082")
    # the balancer's members are those variables (one host: web:80, web2:80, web3:80)
    conf = (ROOT / "images" / "proxy" / "conf" / "tierbench.conf").read_text()
    for var in ("BACKEND", "BACKEND2", "BACKEND3"):
        assert f"BalancerMember http://${{{var}}} keepalive=On" in conf
    one_host = subprocess.run(["docker", "compose", *(a for f in FILES for a in ("-f", f)),
                               "config", "--format", "json"], cwd=ROOT, capture_output=True,
                              text=True, check=True)
    env1 = json.loads(one_host.stdout)["services"]["proxy"]["environment"]
    assert (env1["BACKEND"], env1["BACKEND2"], env1["BACKEND3"]) == ("web:80", "web2:80",
                                                                     "web3:80")


def test_three_web_servers_over_orangefs_each_mount_it_and_the_copy_runs_once() -> None:
    files = [*FILES, "compose/pvfs.yml", "compose/docroot-pvfs.yml",
             services.WEB_SERVERS_COMPANIONS["docroot-pvfs"]]
    assert model.host_overlay(files[-1]) == "compose/host-web-servers-pvfs.yml"
    argv = ["docker", "compose", *(a for f in model.host_files([str(ROOT / f) for f in files])
                                   for a in ("-f", f)), "--profile", "pfs", "config",
            "--format", "json"]
    conf = json.loads(subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                                     env={**os.environ, "TIERBENCH_ADDR_PVFS_META": "198.18.16.11"}
                                     ).stdout)
    wanted = [*WANTED, "pvfs-docroot", "pvfs-config", "pvfs-meta", "pvfs-io1", "pvfs-io2"]
    where = hostnet.place(conf, wanted, {}, lab(pfs_meta="node1", pfs_io=["node1", "node2"]))
    # each web server on its node mounts OrangeFS there, reaching the servers at their nodes
    for s, node in (("web", "node3"), ("web2", "node4"), ("web3", "node5")):
        assert where[s] == {node: 1}
        spec = conf["services"][s]
        assert spec["image"].startswith("tierbench-web-pvfs:") and "/dev/fuse" in \
            spec["devices"][0]["source"], s
        assert "pvfs-meta=198.18.16.11" in spec["extra_hosts"], s
        assert spec["depends_on"]["pvfs-docroot"]["condition"] == \
            "service_completed_successfully", s
    # the file sets on every web node, the copy into the one OrangeFS once, on web's node, and
    # the config it reads beside it only
    assert where["fileset"] == {"node3": 1, "node4": 1, "node5": 1}
    assert where["pvfs-docroot"] == {"node3": 1}
    assert sorted(where["pvfs-config"]) == ["node1", "node2", "node3"]
