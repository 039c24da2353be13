"""A congestion control per route on cluster nodes (tierbench/modes/congctl.py, the cluster part
of tierbench/modes/sysctls.py): the `ip route` commands built from captured output, the snapshot,
change, read-back and restore on a node faked as a routing table whose /proc/sys is read-only
(as a lab node's), and the refusal before anything starts of a sysctl such a node cannot take.
The kernel's side (a route's congctl read back, a connection over it using the algorithm) is
tests/test_congctl_netns.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_kernel import FakeNode

from tierbench import runner
from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.kinds import registry
from tierbench.modes import apply, congctl, sysctls
from tierbench.modes.model import load_mode
from tierbench.placement import cluster, clusterfile
from tierbench.transport import Transport

# `ip -j route get 198.18.16.12` on a lab node, and with a gateway (iproute2 6.1)
GET_LINK = ('[{"dst":"198.18.16.12","dev":"eth0","prefsrc":"198.18.16.11","flags":[],"uid":0,'
            '"cache":[]}]')
GET_GATEWAY = ('[{"dst":"198.19.4.2","gateway":"198.18.16.1","dev":"eth0",'
               '"prefsrc":"198.18.16.11","flags":[],"uid":0,"cache":[]}]')
GET_LOCAL = ('[{"type":"local","dst":"198.18.16.11","dev":"lo","prefsrc":"198.18.16.11",'
             '"flags":[],"uid":0,"cache":["local"]}]')
# `ip route show table main exact 198.18.16.13/32`: a host route someone set, link down
SHOWN = "198.18.16.13 dev eth0 proto static scope link src 198.18.16.11 mtu 9000 linkdown"
OURS = "198.18.16.12 dev eth0 proto 250 scope link src 198.18.16.11 congctl cubic"


def test_a_peer_without_a_host_route_gets_one_of_ours_on_the_path_it_takes() -> None:
    path = congctl.parse_get(GET_LINK, "198.18.16.12")
    assert congctl.change_argv("198.18.16.12", None, path, "cubic") == [
        "ip", "-4", "route", "replace", "198.18.16.12/32", "dev", "eth0", "src", "198.18.16.11",
        "proto", "250", "congctl", "cubic"]
    via = congctl.parse_get(GET_GATEWAY, "198.19.4.2")
    assert congctl.change_argv("198.19.4.2", None, via, "cubic")[4:8] == [
        "198.19.4.2/32", "via", "198.18.16.1", "dev"]
    assert congctl.change_argv("fd00::2", None, {"dev": "eth1"}, "reno") == [
        "ip", "-6", "route", "replace", "fd00::2/128", "dev", "eth1", "proto", "250",
        "congctl", "reno"]
    with pytest.raises(NetifError, match="198.18.16.11 is an address of the node itself"):
        congctl.parse_get(GET_LOCAL, "198.18.16.11")


def test_an_existing_host_route_is_replaced_by_itself_with_congctl_and_put_back() -> None:
    # every attribute kept, the link state dropped (not an argument), an old congctl replaced
    assert congctl.change_argv("198.18.16.13", SHOWN + " congctl lock reno", {}, "cubic") == [
        "ip", "-4", "route", "replace", "198.18.16.13", "dev", "eth0", "proto", "static",
        "scope", "link", "src", "198.18.16.11", "mtu", "9000", "congctl", "cubic"]
    assert congctl.congctl_of(SHOWN + " congctl lock reno") == "reno"
    assert congctl.congctl_of(OURS) == "cubic" and congctl.congctl_of(SHOWN) is None
    assert congctl.restore_argv("198.18.16.13", SHOWN, SHOWN + " congctl cubic") == [
        "ip", "-4", "route", "replace", "198.18.16.13", "dev", "eth0", "proto", "static",
        "scope", "link", "src", "198.18.16.11", "mtu", "9000"]
    assert congctl.restore_argv("198.18.16.13", SHOWN, SHOWN) is None
    # a route that was not there: ours deleted (by its proto), anyone else's left alone
    assert congctl.restore_argv("198.18.16.12", None, OURS) == [
        "ip", "-4", "route", "del", "198.18.16.12/32", "proto", "250"]
    assert congctl.restore_argv("198.18.16.12", None, OURS.replace("250", "static")) is None
    assert congctl.restore_argv("198.18.16.12", None, None) is None


def test_a_restore_the_node_runs_by_itself_needs_no_reading_first() -> None:
    assert congctl.restore_script({"198.18.16.12": None, "198.18.16.13": SHOWN}) == (
        "ip -4 route del 198.18.16.12/32 proto 250 2>/dev/null; ip -4 route replace 198.18.16.13 "
        "dev eth0 proto static scope link src 198.18.16.11 mtu 9000; true")


def test_the_show_script_output_is_read_per_peer() -> None:
    text = f"== 198.18.16.12\n{OURS}\n== 198.18.16.13\n== 198.18.16.14\n{SHOWN}\n{SHOWN} metric 5\n"
    assert congctl.parse_show(text) == {"198.18.16.12": [OURS], "198.18.16.13": [],
                                        "198.18.16.14": [SHOWN, SHOWN + " metric 5"]}


@pytest.fixture
def lab_nodes(monkeypatch) -> dict[str, FakeNode]:
    """Three lab nodes (198.18.16.11-13), node3 with a host route of its own to node1."""
    fakes = {f"node{i}": FakeNode(f"node{i}", f"198.18.16.{10 + i}", {}) for i in (1, 2, 3)}
    fakes["node3"].routes["198.18.16.11"] = SHOWN.replace("16.13", "16.11").replace(
        "src 198.18.16.11", "src 198.18.16.13")
    monkeypatch.setattr(netif, "run_ns", lambda pid, argv, who, via: fakes[via.name].run(argv))
    sysctls.clear_probes()
    yield fakes
    sysctls.clear_probes()


def endpoints(names: list[str]) -> list[Endpoint]:
    addr = {n: f"198.18.16.{10 + int(n[-1])}" for n in names}
    return [Endpoint(n, "eth0", None, Transport(n, ("ssh", n)),
                     tuple(a for m, a in addr.items() if m != n)) for n in names]


def test_on_a_node_the_congestion_control_goes_on_its_routes_to_the_peers_only(lab_nodes) -> None:
    """The lab's failure (`sysctl -w net.ipv4.tcp_congestion_control=cubic`: permission denied)
    cannot happen: no sysctl is written on a node; the routes to the other nodes carry cubic,
    read back, and every route is as before after the restore, the one node3 had included."""
    mode = load_mode("offloads-off+tcp-cubic")
    eps = endpoints(["node1", "node2", "node3"])
    before = {n: dict(f.routes) for n, f in lab_nodes.items()}
    assert sysctls.problems(mode, eps) == []
    state = {"sysctls": sysctls.snapshot(mode, eps)}
    assert state["sysctls"]["node:node1"] == {
        "pid": None, "netns_ino": None, "node": "node1", "ssh": ["ssh", "node1"], "values": {},
        "routes": {"198.18.16.12": None, "198.18.16.13": None}}
    assert state["sysctls"]["node:node3"]["routes"]["198.18.16.11"] == \
        before["node3"]["198.18.16.11"]
    assert sysctls.mismatches(mode, eps, state) != []  # not set yet
    sysctls.change(mode, state)
    assert lab_nodes["node1"].routes == {
        "198.18.16.12": "198.18.16.12 dev eth0 src 198.18.16.11 proto 250 congctl cubic",
        "198.18.16.13": "198.18.16.13 dev eth0 src 198.18.16.11 proto 250 congctl cubic"}
    assert lab_nodes["node3"].routes["198.18.16.11"] == (
        "198.18.16.11 dev eth0 proto static scope link src 198.18.16.13 mtu 9000 congctl cubic")
    assert not [c for f in lab_nodes.values() for c in f.commands if c[0] == "sysctl"
                and c[1] not in ("-n", "-e")]
    assert sysctls.mismatches(mode, eps, state) == []
    view = apply.state_view({"kind": apply.STATE_KIND, **state})["sysctls"]
    assert view["node:node2"] == {"route 198.18.16.11": None, "route 198.18.16.13": None}
    for target, info in state["sysctls"].items():
        assert sysctls.restore(target, info) == []
    # as before, but for the link's state, which is not the route's (nor an argument)
    assert {n: {p: congctl.canonical(r) for p, r in f.routes.items()}
            for n, f in lab_nodes.items()} == {
        n: {p: congctl.canonical(r) for p, r in routes.items()} for n, routes in before.items()}
    assert lab_nodes["node3"].routes["198.18.16.11"].endswith(" mtu 9000")


def test_a_restore_that_leaves_a_route_changed_says_which(lab_nodes, monkeypatch) -> None:
    mode = load_mode("tcp-cubic")
    eps = endpoints(["node1", "node2"])
    state = {"sysctls": sysctls.snapshot(mode, eps)}
    sysctls.change(mode, state)
    monkeypatch.setattr(netif, "run_ns", lambda pid, argv, who, via: lab_nodes[via.name].run(
        argv) if "del" not in argv[-1] else "")  # a delete that is lost
    assert sysctls.restore("node:node1", state["sysctls"]["node:node1"]) == [
        "node:node1: the route to 198.18.16.12 is '198.18.16.12 dev eth0 src 198.18.16.11 "
        "proto 250 congctl cubic', the snapshot had None"]


def lab_experiment(tmp_path: Path, modes: list[str]) -> object:
    data = {"version": 1,
            "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
                       "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
                      for i in (1, 2, 3)],
            "roles": {"loadgen": "node1", "proxy": "node2", "web": "node3"}}
    placer = cluster.ClusterPlacer(clusterfile.parse_cluster(data, registry.roles(), "lab.yml"))
    text = Path(registry.EXPERIMENTS_DIR / "quick.yml").read_text().replace(
        "modes: [offloads-on+tcp-cubic, offloads-off+tcp-cubic]", f"modes: [{', '.join(modes)}]")
    (tmp_path / "quick.yml").write_text(text)
    return registry.load_experiment(str(tmp_path / "quick.yml"), placer=placer)


def test_a_sysctl_a_read_only_node_cannot_take_is_refused_before_anything_starts(
        lab_nodes, tmp_path) -> None:
    """quick's modes run on nodes whose /proc/sys is read-only (the lab's); a mode with a sysctl
    they cannot take is one sentence naming the mode, the nodes and why, before the run starts."""
    quick = lab_experiment(tmp_path, ["offloads-on+tcp-cubic", "offloads-off+tcp-cubic"])
    assert runner.node_mode_problems(quick) == []
    buffers = lab_experiment(tmp_path, ["offloads-on+tcp-cubic", "big-socket-buffers"])
    assert runner.node_mode_problems(buffers) == [
        "mode big-socket-buffers cannot run on node1, node2 and node3: its /proc/sys is "
        "read-only (a container, such as a lab node), so sysctl net.ipv4.tcp_rmem cannot be set "
        "there; drop the sysctl from the mode or run it on nodes whose /proc/sys is writable",
        "mode big-socket-buffers cannot run on node1, node2 and node3: its /proc/sys is "
        "read-only (a container, such as a lab node), so sysctl net.ipv4.tcp_wmem cannot be set "
        "there; drop the sysctl from the mode or run it on nodes whose /proc/sys is writable"]
    lab_nodes["node2"].sysctls["net.ipv4.tcp_available_congestion_control"] = "reno bbr"
    assert runner.node_mode_problems(quick) == [
        "mode offloads-on+tcp-cubic sets the congestion control 'cubic', which the kernel of "
        "node2 does not have (it has reno, bbr); load its module there (modprobe tcp_cubic) or "
        "change the mode",
        "mode offloads-off+tcp-cubic sets the congestion control 'cubic', which the kernel of "
        "node2 does not have (it has reno, bbr); load its module there (modprobe tcp_cubic) or "
        "change the mode"]
    # a node with no other node in the run: no route to set the algorithm on
    alone = endpoints(["node1"])
    assert sysctls.problems(load_mode("tcp-cubic"), alone) == [
        "mode tcp-cubic sets the congestion control, which tierbench sets on node1's routes to "
        "the run's other nodes, and no other node of the run has a data-plane address (tiers on "
        "one node talk over its local routes)"]
