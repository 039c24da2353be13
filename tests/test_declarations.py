"""What the kinds declare to the placement, which names none of it: the cluster file's roles
(each kind's, merged by the registry), the CPU lists a Services spec carries, and a role a new
kind brings taken by the cluster file with no edit to the placement."""

from __future__ import annotations

import os

import pytest

from tierbench.kinds import registry
from tierbench.tiers import orangefs
from tierbench.placement import compose, model
from tierbench.placement.clusterfile import ClusterError, parse_cluster
from tierbench.placement.model import Role, Roles

# The roles as the placement named them before the kinds declared them: (one node, a list,
# either: web, and proxy and app since several proxies and application servers go round their
# nodes, fs_client since the file-server clients go round theirs), and those whose services
# serve the others.
ONE = {"loadgen", "db", "pfs_meta", "net_server", "net_client", "fs_server", "disk"}
LIST = {"loadgen_workers", "pfs_io", "pfs_clients"}
ONE_OR_MORE = {"web", "proxy", "app", "fs_client"}
SERVERS = {"proxy", "web", "app", "db", "pfs_meta", "pfs_io", "net_server", "fs_server"}
NODE = {"name": "n1", "address": "198.18.16.11",
        "interfaces": [{"name": "eth0", "address": "198.18.16.11/24"}]}


def test_the_kinds_declare_every_role_the_cluster_file_had() -> None:
    roles = registry.roles()
    assert set(roles.names) == ONE | LIST | ONE_OR_MORE
    assert {r.name for r in roles.roles if r.nodes == "one"} == ONE
    assert {r.name for r in roles.roles if r.nodes == "list"} == LIST
    assert {r.name for r in roles.roles if r.nodes == "one_or_more"} == ONE_OR_MORE
    assert set(roles.servers) == SERVERS
    assert roles.role("web").what == "the web tier (Apache httpd)"


def test_a_role_declared_twice_differently_is_refused() -> None:
    one = Role("a", "the a tier")
    assert Roles.merged([one, one]).names == ("a",)  # two kinds naming it alike
    with pytest.raises(ValueError, match="the role a is declared twice, differently"):
        Roles.merged([one, Role("a", "the a tier", nodes="list")])


def test_a_new_kinds_role_is_taken_by_the_cluster_file() -> None:
    roles = Roles((Role("sleeper", "the sleeping tier", server=True),
                   Role("watchers", "the nodes that watch it", nodes="list")))
    cluster = parse_cluster({"version": 1, "nodes": [NODE],
                             "roles": {"sleeper": "n1", "watchers": ["n1"]}}, roles, "c.yml")
    assert cluster.placement() == {"sleeper": ["n1"], "watchers": ["n1"]}
    with pytest.raises(ClusterError) as err:
        parse_cluster({"version": 1, "nodes": [NODE], "roles": {"web": "n1",
                                                                 "watchers": "n1"}},
                      roles, "c.yml")
    assert err.value.problems == [
        "c.yml: roles.watchers: must be a list of node names such as [n1], got 'n1'",
        "c.yml: roles.web: unknown key (allowed: sleeper, watchers)"]
    with pytest.raises(ClusterError, match="roles.sleeper: not placed, and this needs the "
                                           "sleeping tier on a node"):
        parse_cluster({"version": 1, "nodes": [NODE]}, roles, "c.yml").require_roles("sleeper")


def test_the_cpu_lists_checked_are_those_the_spec_declares() -> None:
    beyond = str(os.cpu_count() or 1)
    compose.check_cpusets({"OTHER_CPUS": beyond}, {})  # not declared: not this spec's
    with pytest.raises(model.StackError, match=f"X_CPUS={beyond} names CPU {beyond} but this "
                                                 "host has"):
        compose.check_cpusets({"X_CPUS": beyond}, {"X_CPUS": "0"})
    with pytest.raises(model.StackError, match="X_CPUS='a' is not a CPU list"):
        compose.check_cpusets({}, {"X_CPUS": "a"})


def test_the_orangefs_cluster_declares_its_cpu_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orangefs, "check_image", lambda: None)
    spec = orangefs.cluster_spec(2, 1)
    assert spec.cpusets == {"PVFS_SERVER_CPUS": "1", "PVFS_CLIENT_CPUS": "0"}
