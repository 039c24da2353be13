"""Cluster files and node checks without nodes: validation (one sentence per problem, naming the
file and key), the example file, the SSH/docker argv builders, command errors, and check_nodes
against fake command results."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tierbench.kinds import registry
from tierbench import transport
from tierbench.placement import nodes
from tierbench.placement.clusterfile import ClusterError, load_cluster, parse_cluster
from tierbench.placement.nodes import ClockReading, NodeError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "cluster.example.yml"

GOOD: dict[str, Any] = {
    "version": 1,
    "nodes": [
        {"name": "node1", "address": "198.18.16.11",
         "interfaces": [{"name": "eth0", "address": "198.18.16.11/24"}]},
        {"name": "node2", "address": "node2.example.org", "user": "bench", "port": 2222,
         "interfaces": [{"name": "ens1f0", "address": "10.20.0.2/24"},
                        {"name": "ens1f1", "address": "10.20.1.2"}]},
    ],
    "roles": {"loadgen": "node1", "proxy": "node2", "web": "node2", "pfs_io": ["node1", "node2"]},
}


def problems_of(data: Any, where: str = "c.yml") -> list[str]:
    with pytest.raises(ClusterError) as info:
        parse_cluster(data, registry.roles(), where)
    return info.value.problems


def test_good_cluster_parses() -> None:
    c = parse_cluster(copy.deepcopy(GOOD), registry.roles(), "c.yml")
    assert [n.name for n in c.nodes] == ["node1", "node2"]
    assert c.node("node2").user == "bench" and c.node("node2").port == 2222
    assert c.node("node1").user == "root" and c.node("node1").port == 22
    assert c.node("node1").docker_context == "tierbench-node1"
    assert c.node("node2").interface().name == "ens1f0"
    assert c.node("node2").interface("ens1f1").address == "10.20.1.2"
    assert c.node("node2").interface("ens1f0").ip == "10.20.0.2"
    assert c.clock_bound_ms == 50
    assert c.placement() == {"loadgen": ["node1"], "proxy": ["node2"], "web": ["node2"],
                             "pfs_io": ["node1", "node2"]}
    assert [n.name for n in c.nodes_for("pfs_io")] == ["node1", "node2"]
    assert c.nodes_for("db") == []
    with pytest.raises(ClusterError) as info:
        c.require_roles("loadgen", "db", "pfs_meta")
    assert info.value.problems == [
        "c.yml: roles.db: not placed, and this needs the database tier on a node",
        "c.yml: roles.pfs_meta: not placed, and this needs the OrangeFS metadata server on a "
        "node"]
    c.require_roles("loadgen", "proxy", "web")


def mutate(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the key at ``path`` (dots, [i] for list items) set to value, or deleted when
    value is DELETE."""
    data = copy.deepcopy(GOOD)
    parts = [int(p) if p.isdigit() else p
             for p in path.replace("[", ".").replace("]", "").split(".")]
    target = data
    for part in parts[:-1]:
        target = target[part]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return data


DELETE = object()

BAD = [
    ("version", 2, "c.yml: version: must be 1 (the only version of the cluster file), got 2"),
    ("colour", "blue", "c.yml: colour: unknown key (allowed: allow_management_changes, "
     "clock_bound_ms, nodes, roles, rollback_timeout_s, ssh_config, version, workdir)"),
    ("clock_bound_ms", 0, "c.yml: clock_bound_ms: must be greater than 0, got 0"),
    ("clock_bound_ms", "fast", "c.yml: clock_bound_ms: must be a number, got 'fast'"),
    ("nodes", DELETE, "c.yml: nodes: is required"),
    ("nodes", [], "c.yml: nodes: must not be empty"),
    ("nodes", "node1", "c.yml: nodes: must be a list, got 'node1'"),
    ("nodes[0]", "node1", "c.yml: nodes[0]: must be a mapping of keys, got 'node1'"),
    ("nodes[0].name", DELETE, "c.yml: nodes[0].name: is required"),
    ("nodes[0].name", "Node_1", "c.yml: nodes[0].name: 'Node_1' is not a node name (lower case "
     "letters, digits and '-', at most 32, starting and ending with a letter or digit)"),
    ("nodes[0].name", 7, "c.yml: nodes[0].name: must be text, got 7"),
    ("nodes[0].address", "not a host!", "c.yml: nodes[0].address: 'not a host!' is neither an "
     "IP address nor a host name"),
    ("nodes[0].address", DELETE, "c.yml: nodes[0].address: is required"),
    ("nodes[0].port", 0, "c.yml: nodes[0].port: must be greater than or equal to 1, got 0"),
    ("nodes[0].port", 70000, "c.yml: nodes[0].port: must be less than or equal to 65535, got "
     "70000"),
    ("nodes[0].port", "22", "c.yml: nodes[0].port: must be a whole number, got '22'"),
    ("nodes[0].user", "Root User", "c.yml: nodes[0].user: 'Root User' is not a user name"),
    ("nodes[0].context", "bad context", "c.yml: nodes[0].context: 'bad context' is not a Docker "
     "context name"),
    ("nodes[0].disk", 3, "c.yml: nodes[0].disk: unknown key (allowed: address, context, "
     "interfaces, name, port, ssh_config, user)"),
    ("nodes[0].interfaces", [], "c.yml: nodes[0].interfaces: must not be empty"),
    ("nodes[0].interfaces", DELETE, "c.yml: nodes[0].interfaces: is required"),
    ("nodes[0].interfaces", "eth0", "c.yml: nodes[0].interfaces: must be a list, got 'eth0'"),
    ("nodes[0].interfaces[0].name", "eth0/1", "c.yml: nodes[0].interfaces[0].name: 'eth0/1' is "
     "not an interface name (1-15 characters, no spaces or '/')"),
    ("nodes[0].interfaces[0].name", "averyveryverylongname", "c.yml: nodes[0].interfaces[0].name: "
     "'averyveryverylongname' is not an interface name (1-15 characters, no spaces or '/')"),
    ("nodes[0].interfaces[0].address", "300.1.1.1/24", "c.yml: nodes[0].interfaces[0].address: "
     "'300.1.1.1/24' is not an IP address such as 198.18.16.11/24"),
    ("nodes[0].interfaces[0].address", DELETE, "c.yml: nodes[0].interfaces[0].address: is "
     "required"),
    ("nodes[0].interfaces[0].mtu", 9000, "c.yml: nodes[0].interfaces[0].mtu: unknown key "
     "(allowed: address, name)"),
    ("nodes[1].name", "node1", "c.yml: nodes[1].name: node1 is already the name of nodes[0]"),
    ("nodes[1].context", "tierbench-node1", "c.yml: nodes[1].context: tierbench-node1 is "
     "already the Docker context of nodes[0]"),
    ("nodes[1].interfaces[1].name", "ens1f0", "c.yml: nodes[1].interfaces[1].name: ens1f0 is "
     "listed twice on this node"),
    ("nodes[1].interfaces[0].address", "198.18.16.11/24", "c.yml: nodes[1].interfaces[0].address:"
     " 198.18.16.11 is already the address of nodes[0].interfaces[0]"),
    ("roles", "node1", "c.yml: roles: must be a mapping of keys, got 'node1'"),
    ("roles.cache", "node1", "c.yml: roles.cache: unknown key (allowed: app, db, disk, fs_client, "
     "fs_server, loadgen, loadgen_workers, net_client, net_server, pfs_clients, pfs_io, pfs_meta, "
     "proxy, web)"),
    ("roles.proxy", "node9", "c.yml: roles.proxy: no node named 'node9' (nodes: node1, node2)"),
    ("roles.db", ["node2"], "c.yml: roles.db: must be one node name, got ['node2']"),
    ("roles.pfs_io", "node2", "c.yml: roles.pfs_io: must be a list of node names such as "
     "[node2], got 'node2'"),
    ("roles.pfs_io", ["node2", "node2"], "c.yml: roles.pfs_io: node2 is listed twice"),
    ("roles.pfs_clients", ["node1", "node3"], "c.yml: roles.pfs_clients: no node named 'node3' "
     "(nodes: node1, node2)"),
    ("roles.loadgen_workers", [3], "c.yml: roles.loadgen_workers[0]: must be one node name, got 3"),
]


@pytest.mark.parametrize(("path", "value", "sentence"), BAD, ids=[b[0] for b in BAD])
def test_one_sentence_per_problem(path: str, value: Any, sentence: str) -> None:
    assert problems_of(mutate(path, value)) == [sentence]


def test_every_problem_at_once() -> None:
    data = mutate("nodes[0].port", "22")
    data["roles"]["proxy"] = "node9"
    data["nodes"][1]["interfaces"][0]["address"] = "banana"
    data["extra"] = 1
    got = problems_of(data)
    assert got == [
        "c.yml: nodes[0].port: must be a whole number, got '22'",
        "c.yml: nodes[1].interfaces[0].address: 'banana' is not an IP address such as "
        "198.18.16.11/24",
        "c.yml: extra: unknown key (allowed: allow_management_changes, clock_bound_ms, nodes, "
        "roles, rollback_timeout_s, ssh_config, version, workdir)",
        "c.yml: roles.proxy: no node named 'node9' (nodes: node1, node2)",
    ]


def test_same_address_twice_only_on_another_port() -> None:
    data = copy.deepcopy(GOOD)
    data["nodes"][1]["address"] = "198.18.16.11"
    parse_cluster(data, registry.roles(), "c.yml")  # port 2222: another sshd on the same machine
    data["nodes"][1]["port"] = 22
    assert problems_of(data) == ["c.yml: nodes[1].address: 198.18.16.11 is already the address "
                                 "of nodes[0] (one entry per machine)"]


@pytest.mark.parametrize("data", [None, [], "nodes", 3])
def test_top_level_must_be_a_mapping(data: Any) -> None:
    got = problems_of(data)
    assert len(got) == 1 and got[0].startswith("c.yml: expected a mapping with nodes and roles")


def test_files(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"nope.yml: no such file"):
        load_cluster(tmp_path / "nope.yml", registry.roles())
    bad = tmp_path / "bad.yml"
    bad.write_text("nodes: [\n")
    with pytest.raises(ClusterError, match=r"bad.yml: not valid YAML"):
        load_cluster(bad, registry.roles())
    # ssh_config paths are relative to the cluster file and must exist
    path = tmp_path / "c.yml"
    path.write_text(json.dumps({**GOOD, "ssh_config": "ssh_config"}))
    with pytest.raises(ClusterError) as info:
        load_cluster(path, registry.roles())
    assert info.value.problems == [f"{path}: ssh_config: no such file {tmp_path / 'ssh_config'}"]
    (tmp_path / "ssh_config").write_text("Host *\n")
    c = load_cluster(path, registry.roles())
    assert c.ssh_config == str(tmp_path / "ssh_config")
    assert {n.ssh_config for n in c.nodes} == {str(tmp_path / "ssh_config")}
    assert c.path == str(path)


def test_example_file_is_valid_and_its_lab_block_too() -> None:
    c = load_cluster(EXAMPLE, registry.roles())
    assert [n.name for n in c.nodes] == ["client1", "proxy1", "web1", "store1"]
    assert set(c.placement()) == set(registry.roles().names)
    text = EXAMPLE.read_text().split("(its shape")[0]
    assert "lab/cluster.yml" in text
    lab_lines = EXAMPLE.read_text().split("# version: 1", 1)[1].splitlines()
    lab = "version: 1\n" + "\n".join(line[2:] for line in lab_lines if line.startswith("# "))
    import yaml
    data = yaml.safe_load(lab)
    data.pop("ssh_config")
    lab_cluster = parse_cluster(data, registry.roles(), "lab block")
    assert [n.address for n in lab_cluster.nodes] == ["198.18.16.11", "198.18.16.12"]


def test_argv_builders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_SSH_DIR", str(tmp_path / "ssh"))
    c = parse_cluster(copy.deepcopy(GOOD), registry.roles(), "c.yml")
    n2 = c.node("node2")
    argv = nodes.transport(n2, connect_timeout=3).argv(["ethtool", "-K", "ens1f0", "tso", "off"])
    assert argv[0] == "ssh" and "-F" not in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "bench"
    assert "BatchMode=yes" in argv and "ConnectTimeout=3" in argv
    # one shared connection per node, in a folder only this user may enter
    assert "ControlMaster=auto" in argv and "ControlPersist=60" in argv
    control = Path(next(a for a in argv if a.startswith("ControlPath="))[len("ControlPath="):])
    assert control.parent == tmp_path / "ssh"
    assert oct(control.parent.stat().st_mode)[-3:] == "700"
    assert re.fullmatch(r"[0-9a-f]{12}", control.name)  # a socket per way of reaching a node
    assert control.name != Path(next(a for a in nodes.transport(c.node("node1")).argv("true")
                                     if a.startswith("ControlPath="))).name
    assert nodes.ssh_prefix(n2) + ["true"] == nodes.transport(n2).argv("true")
    assert argv[-2:] == ["node2.example.org", "ethtool -K ens1f0 tso off"]
    assert nodes.transport(n2).argv("echo 'a b'")[-1] == "echo 'a b'"
    n2.ssh_config = "/x/ssh_config"
    assert nodes.transport(n2).argv("true")[1:3] == ["-F", "/x/ssh_config"]
    assert nodes.transport(n2).docker("compose", "ps") == [
        "docker", "--context", "tierbench-node2", "compose", "ps"]
    # a container on the node: docker exec through the node's context
    assert nodes.transport(n2).exec_argv("cid", ["ls", "/"], env={"A": "1"}, user="u") == [
        "docker", "--context", "tierbench-node2", "exec", "-e", "A=1", "-u", "u", "cid", "ls",
        "/"]
    # in a network namespace there: nsenter, quoted for the node's shell
    assert nodes.transport(n2).argv(["ip", "link"], netns=42)[-1] == "nsenter -t 42 -n ip link"


def fake_run(results: dict[str, subprocess.CompletedProcess | Exception]):
    """A subprocess.run stand-in: the first key found in the joined argv decides the result."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess:
        calls.append(argv)
        joined = " ".join(argv)
        for key, result in results.items():
            if key in joined:
                if isinstance(result, Exception):
                    raise result
                return subprocess.CompletedProcess(argv, result.returncode, result.stdout,
                                                   result.stderr)
        raise AssertionError(f"unexpected command {joined}")

    return run, calls


def done(rc: int = 0, out: str = "", err: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], rc, out, err)


def test_run_on_node_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    node = parse_cluster(copy.deepcopy(GOOD), registry.roles(), "c.yml").node("node1")
    run, _ = fake_run({"unreachable": done(255, err="ssh: connect to host 198.18.16.11 port 22: "
                                                     "No route to host\n"),
                       "ethtool -K": done(1, err="line 1\nline 2\nCannot change tcp-segmentation"
                                                  "-offload\n"),
                       "sleep": subprocess.TimeoutExpired("ssh", 2),
                       "uname": done(0, out="6.1.0\n")})
    monkeypatch.setattr(transport.subprocess, "run", run)
    assert nodes.run_on_node(node, "uname -r").stdout == "6.1.0\n"
    with pytest.raises(NodeError) as info:
        nodes.run_on_node(node, "unreachable")
    assert str(info.value) == ("node1: cannot reach root@198.18.16.11 over SSH (port 22): ssh: "
                               "connect to host 198.18.16.11 port 22: No route to host")
    with pytest.raises(NodeError) as info:
        nodes.run_on_node(node, ["ethtool", "-K", "eth0", "tso", "off"])
    assert str(info.value) == ("node1: `ethtool -K eth0 tso off` failed with exit code 1: line 1 "
                               "/ line 2 / Cannot change tcp-segmentation-offload")
    with pytest.raises(NodeError, match=r"^node1: `sleep 9` did not finish within 2 s$"):
        nodes.run_on_node(node, "sleep 9", timeout=2)
    assert nodes.run_on_node(node, "unreachable", check=False).returncode == 255


PROBE_OK = ("python 3.11.2\ncompose 2.26.1\ndocker_root /var/lib/docker\ndisk_free 50000000000\n"
            "mem_available 8000000000\n"
            'link eth0 [{"ifname":"eth0","operstate":"UP","mtu":1500,"addr_info":'
            '[{"local":"198.18.16.11","prefixlen":24}]}]\n'
            "sshd_maxsessions 64\nsshd_maxstartups 64:30:128\n")


def test_check_nodes_collects_one_sentence_per_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    data = copy.deepcopy(GOOD)
    data["nodes"].append({"name": "node3", "address": "198.18.16.13",
                          "interfaces": [{"name": "eth0", "address": "198.18.16.13/24"}]})
    cluster = parse_cluster(data, registry.roles(), "c.yml")
    probe_node2 = ("missing ethtool\npython 3.9.2\ncompose \ndocker_root /var/lib/docker\ndisk_free 1000000000\n"
                   "mem_available 500000000\n"
                   'link ens1f0 [{"ifname":"ens1f0","operstate":"UP","mtu":9000,"addr_info":'
                   '[{"local":"10.20.0.99","prefixlen":24}]}]\n'
                   'link ens1f1 Device "ens1f1" does not exist.\n'
                   "sshd_maxsessions 10\nsshd_maxstartups 10:30:100\n")
    run, calls = fake_run({
        "198.18.16.13 true": done(255, err="ssh: connect to host 198.18.16.13 port 22: "
                                           "Connection timed out"),
        "198.18.16.11 true": done(), "node2.example.org true": done(),
        "198.18.16.11 \nfor t in": done(0, PROBE_OK),
        "node2.example.org \nfor t in": done(0, probe_node2),
        "--context tierbench-node1 version": done(0, "20.10.24\n"),
        "--context tierbench-node2 version": done(1, err="context \"tierbench-node2\" not found"),
        "compose version": done(0, "2.26.1\n"),
    })
    monkeypatch.setattr(transport.subprocess, "run", run)
    offsets = {"node1": 0.0004, "node2": -0.2}
    monkeypatch.setattr(nodes, "measure_clock",
                        lambda node, timeout: ClockReading(node.name, offsets[node.name], 0.002, 7))
    report = nodes.check_nodes(cluster, need_disk_bytes={"node2": 2_000_000_000},
                               need_mem_bytes=1_000_000_000)
    assert not report.ok
    assert report.problems == [
        "node2: ethtool is not installed (needed on every node)",
        "node2: its python3 is 3.9.2, older than the 3.10 the programs tierbench runs there need "
        "(the rollback guard's and the sampling agent's)",
        "node2: its sshd admits too few connections at once for Docker's ssh helper "
        "(maxsessions 10, maxstartups 10:30:100): set `MaxStartups 64:30:128` and `MaxSessions "
        "64` in its sshd configuration and reload sshd",
        "node2: Docker Compose v2 does not answer on the node (`docker compose version` gave "
        "nothing): install the docker-compose-plugin package",
        "node2: ens1f0 does not carry 10.20.0.2 (it has 10.20.0.99)",
        'node2: data-plane interface ens1f1 does not exist (Device "ens1f1" does not exist.)',
        "node2: there is no Docker context tierbench-node2: docker context create "
        "tierbench-node2 --docker host=ssh://bench@node2.example.org",
        "node2: its clock is 200.0 ms behind the controller's (+/- 1.0 ms), beyond the bound of "
        "50 ms: synchronise it (chrony, NTP or PTP)",
        "node2: 1.0 GB free in /var/lib/docker, less than the 2.0 GB this needs there",
        "node2: 0.5 GB of memory available, less than the 1.0 GB this needs",
        "node3: cannot reach root@198.18.16.13 over SSH (port 22): ssh: connect to host "
        "198.18.16.13 port 22: Connection timed out",
    ]
    assert set(report.clocks) == {"node1", "node2"}
    assert report.facts["node1"]["interfaces"]["eth0"] == {"state": "UP", "mtu": 1500,
                                                            "addresses": ["198.18.16.11"]}
    assert report.facts["node1"]["docker"] == "20.10.24"
    assert report.facts["node1"]["sshd"] == {"maxsessions": "64", "maxstartups": "64:30:128"}
    # nothing is changed anywhere: every command run is a read-only probe
    remote = [c[-1] for c in calls if c[0] == "ssh"]
    assert all(cmd == "true" or cmd.startswith("\nfor t in docker ethtool ip") for cmd in remote)
    local = [c[3:] for c in calls if c[0] == "docker"]
    assert all(args[0] in ("version", "compose") for args in local)
    # an unreachable node gets one sentence and no further commands
    assert not [c for c in calls if "198.18.16.13" in " ".join(c[:-1]) and c[-1] != "true"]


def test_lab_script_refuses_bad_arguments() -> None:
    script = ROOT / "setup" / "lab.sh"
    out = subprocess.run([str(script), "up", "0"], capture_output=True, text=True, check=False)
    assert out.returncode == 1
    assert out.stderr == "lab: NODES must be a whole number from 1 to 64, got '0'\n"
    out = subprocess.run([str(script), "up", "two"], capture_output=True, text=True, check=False)
    assert out.returncode == 1 and "got 'two'" in out.stderr
    out = subprocess.run([str(script), "sideways"], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and out.stderr.startswith("usage:")
