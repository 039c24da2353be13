"""The file-server kind on a cluster without nodes: compose/fs.yml with its host overlay
(read with `docker compose config`, which needs no engine) placed by the role labels, the roles
each server asks for, the space checks on the right nodes, the server's page cache emptied in
its container, and the tiers' interfaces and counters as a cluster placement gives them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.interfaces.netif import Endpoint
from tierbench.kinds import registry
from tierbench.kinds.fs import figures, sequence, stack
from tierbench.measure import counters
from tierbench.measure.sampler import CgroupGroup
from tierbench.placement import cluster, clusterfile, hostnet, model, nodes, placer
from tierbench.tiers import diskbuild
from tierbench.placement.model import Container
from tierbench.placement.clusterfile import ClusterError, parse_cluster
from tierbench.transport import Transport

ROOT = Path(__file__).resolve().parent.parent

LAB = {
    "version": 1,
    "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
               "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
              for i in range(1, 5)],
    "roles": {"fs_server": "node2", "fs_client": "node3", "pfs_meta": "node4",
              "pfs_io": ["node4"], "pfs_clients": ["node1"]},
}


def lab(**roles: object) -> clusterfile.Cluster:
    data = copy.deepcopy(LAB)
    data["roles"].update(roles)
    data["roles"] = {k: v for k, v in data["roles"].items() if v is not None}
    return parse_cluster(data, registry.roles(), "lab.yml")


def fs_config(**env: str) -> dict:
    files = model.host_files(stack.fs_paths())
    argv = ["docker", "compose", *(a for f in files for a in ("-f", f)), "--profile", "fs",
            "config", "--format", "json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TIERBENCH_NODE_DIR": "/srv/tb", **env})
    return json.loads(done.stdout)


@pytest.fixture
def on_cluster() -> cluster.ClusterPlacer:
    return cluster.ClusterPlacer(lab())


def test_the_host_overlay_is_registered_for_the_file_server_tier() -> None:
    assert model.host_overlay(stack.OVERLAY) == "compose/host-fs.yml"
    assert "fs_server" in registry.roles().servers
    assert [registry.roles().role(r).nodes for r in ("fs_server", "fs_client")] == [
        "one", "one_or_more"]  # fs.clients go round the fs_client nodes


def test_server_and_hog_go_on_the_server_node_and_the_client_on_its_own() -> None:
    conf = fs_config(TIERBENCH_ADDR_FS_SERVER="198.18.16.12")
    wanted = ["fs-server", "fs-client", "fs-hog"]
    assert hostnet.place(conf, wanted, {}, lab()) == {
        "fs-server": {"node2": 1}, "fs-hog": {"node2": 1}, "fs-client": {"node3": 1}}
    deps = {s: list(conf["services"][s].get("depends_on") or {}) for s in wanted}
    assert hostnet.topo_levels(wanted, deps) == [["fs-hog", "fs-server"], ["fs-client"]]
    server, client, hog = (conf["services"][s] for s in wanted)
    # host networking; the brick named by the server node's address, mounted from there
    for spec in (server, client):
        assert spec["network_mode"] == "host" and not spec.get("networks")
    assert "hostname" not in server
    assert server["environment"]["FS_BRICK_HOST"] == "198.18.16.12"
    assert client["environment"]["FS_SERVER"] == "198.18.16.12"
    # the hog has no network at all, and shares the server's CPUs
    assert hog["network_mode"] == "none" and hog["cpuset"] == server["cpuset"] == "1"
    assert "cpuset" not in client  # the client node's CPUs (FS_CLIENT_CPUS to pin)
    # capabilities and devices as on one host; the workloads from the node's workdir
    assert set(server["cap_add"]) == {"SYS_ADMIN", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}
    assert client["cap_add"] == ["SYS_ADMIN"] and server["cap_drop"] == ["ALL"]
    assert client["devices"][0]["source"] == "/dev/fuse"
    assert {"source": "/srv/tb/workloads", "target": "/app/workloads"}.items() <= \
        client["volumes"][0].items()


def test_several_clients_go_round_the_client_nodes() -> None:
    """fs.clients: 4 over two fs_client nodes: two on each, one after the other (001's client
    machines); with one node, all four there."""
    conf = fs_config(TIERBENCH_ADDR_FS_SERVER="198.18.16.12")
    wanted = ["fs-server", *stack.client_services(4)]
    where = hostnet.place(conf, wanted, {}, lab(fs_client=["node1", "node3"]))
    assert {s: where[s] for s in stack.client_services(4)} == {
        "fs-client": {"node1": 1}, "fs-client2": {"node3": 1}, "fs-client3": {"node1": 1},
        "fs-client4": {"node3": 1}}
    where = hostnet.place(conf, wanted, {}, lab())
    assert {tuple(where[s]) for s in stack.client_services(4)} == {("node3",)}


def test_a_missing_role_is_one_sentence() -> None:
    conf = fs_config()
    with pytest.raises(ClusterError) as info:
        hostnet.place(conf, ["fs-server", "fs-client"], {}, lab(fs_server=None))
    assert info.value.problems == [
        "lab.yml: roles.fs_server: not placed, and this needs the GlusterFS file server of the "
        "file-server benchmarks (and its CPU hog) on a node"]


def test_each_server_asks_for_its_roles(on_cluster) -> None:
    kind = registry.kind("fs")
    for name in ("fs-clients", "fs-randread", "fs-thinktime", "fs-filebench"):
        exp = registry.load_experiment(name, placer=on_cluster)
        assert kind.cluster_roles(exp) == ["fs_server", "fs_client"], name
        lines = runner.cluster_lines(exp)
        assert "  role fs_server: node2 (eth0 198.18.16.12)" in lines
        assert "  role fs_client: node3 (eth0 198.18.16.13)" in lines
        assert lines[-1].startswith("  SSH (management) to each node's address: node1 ")
        assert lines[-1].endswith("a mode changing the interface holding it is refused; nodes "
                                  "restore by themselves 30 s after the controller's last "
                                  "renewal")
    iozone = registry.load_experiment("pfs-iozone", placer=on_cluster)
    assert kind.cluster_roles(iozone) == ["pfs_meta", "pfs_io", "pfs_clients"]
    assert "on their nodes" in "\n".join(runner.plan_lines(iozone))
    without = cluster.ClusterPlacer(lab(fs_client=None))
    with pytest.raises(ClusterError, match="roles.fs_client: not placed"):
        runner.cluster_lines(registry.load_experiment("fs-clients", placer=without))


def test_space_is_checked_on_the_nodes_that_write(tmp_path: Path, on_cluster) -> None:
    kind = registry.kind("fs")
    exp = registry.load_experiment("fs-filebench", placer=on_cluster)
    [share] = kind.needs(exp, runner.points_of(exp))
    assert (share.medium, share.role) == ("disk", "fs_server")
    disk, _ = runner.node_needs(exp, [share])
    assert disk == {"node2": share.bytes}
    exp = registry.load_experiment("fs-thinktime", placer=on_cluster)
    assert {n.role for n in kind.needs(exp, runner.points_of(exp)) if n.medium} == {
        "fs_server", "fs_client"}
    exp = registry.load_experiment("pfs-iozone", placer=on_cluster)
    assert {n.role for n in kind.needs(exp, runner.points_of(exp)) if n.medium} == {"pfs_io"}
    # too big for the nodes is not refused here (the nodes are checked when the run starts)
    big = tmp_path / "big.yml"
    big.write_text("name: big\nkind: fs\nmodes: [offloads-on]\nfs: {test: filebench, "
                   "set_mb: 500000}\n")
    runner.check_space(registry.load_experiment(str(big), placer=on_cluster))
    with pytest.raises(ConfigError, match="lower fs.set_mb"):
        runner.check_space(registry.load_experiment(str(big)))


def test_the_servers_page_cache_is_emptied_or_filled_in_its_container(tmp_path: Path) -> None:
    files = [tmp_path / "set-a", tmp_path / "with space"]
    for f in files:
        f.write_bytes(b"x" * 8192)
    for cache in ("uncached", "cached"):
        script = sequence.server_cache(cache, [str(f) for f in files])
        assert subprocess.run(["sh", "-c", script], capture_output=True,
                              check=False).returncode == 0, cache
    assert "iflag=nocache count=0" in sequence.server_cache("uncached", ["/a"])
    assert sequence.server_cache("uncached", ["/a"]).startswith("sync && ")
    assert "sh -c" not in sequence.server_cache("cached", ["/a"])


class FakeCluster(placer.Placer):
    """What the cluster placement answers, without nodes."""

    name = "cluster lab.yml"
    named_ifaces = cluster.ClusterPlacer.named_ifaces  # each node's NIC once

    def __init__(self, found: list[Container]) -> None:
        self.found = found

    def replicas(self) -> list[Container]:
        return self.found

    def endpoints(self, label: str, container: Container) -> list[Endpoint]:
        return [Endpoint(container.node or "", "eth0", None, Transport(container.node))]

    def counter(self, container: Container) -> Any:
        return cluster.NodeCgroup(container.node or "", container.pid)

    def ifaces(self, endpoints: list[Endpoint]) -> dict[str, str]:
        return {ep.label: ep.ifname for ep in endpoints if ep.node}


def box(service: str, node: str, pid: int) -> Container:
    return Container(service, f"id-{service}-{pid}", f"tierbench-{service}-1", pid,
                     "tierbench-fs:0.1.0", "sha256:x", "", node, f"tierbench-{node}")


def test_the_tiers_are_the_nodes_nics_and_cgroups_there() -> None:
    found = [box("fs-server", "node2", 11), box("fs-hog", "node2", 12),
             box("fs-client", "node3", 13)]
    d = stack.gluster_deployment(FakeCluster(found), ("gluster", "busy"))
    assert d.placer is not None
    assert [ep.label for ep in d.tiers["fs-server"].endpoints] == ["node2:eth0"]
    assert [ep.label for ep in d.tiers["fs-client"].endpoints] == ["node3:eth0"]
    assert d.ifaces == {"node2:eth0": "eth0", "node3:eth0": "eth0"}
    assert d.info.server_net == ["node2:eth0"]
    assert {t: (c.node, c.pid) for t, c in d.counters.items()} == {
        "fs-server": ("node2", 11), "fs-client": ("node3", 13), "fs-hog": ("node2", 12)}
    # the server's network figure from its node's NIC only
    first = {"t": 0.0, "cpu": {}, "host": dict.fromkeys(counters.PROC_STAT_FIELDS, 0),
             "net": {"node2:eth0": {"rx_bytes": 0, "tx_bytes": 0},
                     "node3:eth0": {"rx_bytes": 0, "tx_bytes": 0}}}
    last = copy.deepcopy(first)
    last["t"] = 2.0
    last["net"]["node2:eth0"] = {"rx_bytes": 1_000_000, "tx_bytes": 3_000_000}
    last["net"]["node3:eth0"] = {"rx_bytes": 9_000_000, "tx_bytes": 9_000_000}
    values = figures.cpu_figures(first, last, 0, "", d.info.server_net)
    assert values["server_net_mb_per_s"] == pytest.approx(2.0)
    # on one host: the host-side veths whose labels start with the server tier
    first["net"] = {"fs-server:veth1": {"rx_bytes": 0, "tx_bytes": 0},
                    "fs-client:veth2": {"rx_bytes": 0, "tx_bytes": 0}}
    last["net"] = {"fs-server:veth1": {"rx_bytes": 2_000_000, "tx_bytes": 0},
                   "fs-client:veth2": {"rx_bytes": 9_000_000, "tx_bytes": 0}}
    assert figures.cpu_figures(first, last, 0)["server_net_mb_per_s"] == pytest.approx(1.0)


def test_removing_the_stack_on_the_nodes_removes_whatever_the_project_runs(monkeypatch) -> None:
    """`down` on every node: the project's containers (the file-server tier's among them, with
    whatever overlay and profile brought them up), networks and volumes, found by Compose's
    project label through the node's Docker context."""
    where = cluster.ClusterPlacer(lab())
    calls: list[tuple[str, tuple[str, ...]]] = []
    listed = {"ps": "c1\nc2\n", "network": "n1\n", "volume": "v1\n"}

    def docker(node: clusterfile.Node, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        calls.append((node.name, args))
        out = listed[args[0]] if args[1] in ("-aq", "ls") else ""
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(nodes, "run_docker", docker)
    monkeypatch.setattr(nodes, "run_on_node", lambda *a, **k: None)
    # the disk systems' teardown reads every node's mounts over SSH: the lab's nodes are not up,
    # and waiting out each one's SSH time-out cost this test 160 s (it is about the fs tier)
    torn: list[list[str]] = []
    monkeypatch.setattr(diskbuild, "teardown", lambda env, hosts: torn.append([h.node for h in hosts]))
    where.down()
    assert torn == [[n.name for n in where.cluster.nodes]]
    label = f"label=com.docker.compose.project={model.PROJECT}"
    for node in where.cluster.nodes:
        assert [a for n, a in calls if n == node.name] == [
            ("ps", "-aq", "--filter", label), ("stop", "-t", "10", "c1", "c2"),
            ("rm", "-f", "-v", "c1", "c2"), ("network", "ls", "-q", "--filter", label),
            ("network", "rm", "n1"), ("volume", "ls", "-q", "--filter", label),
            ("volume", "rm", "-f", "v1")]


class Recording(FakeCluster):
    """FakeCluster that records what it is asked to bring up and has those services running."""

    def __init__(self) -> None:
        super().__init__([])
        self.specs: list[Any] = []

    def down(self) -> None:
        self.found = []

    def up(self, spec: Any) -> None:
        self.specs.append(spec)
        node = {"fs-server": "node2", "fs-hog": "node2"}
        self.found = [box(s, node.get(s, "node3"), 20 + k) for k, s in enumerate(spec.services)]


def test_several_clients_are_brought_up_and_counted_as_one_tier(tmp_path: Path) -> None:
    """fs.clients: 12 brings up fs-client .. fs-client12 (the server under its memory cap), all
    on the fs_client node; the client tier's CPU is their sum (a group, in number order), the
    server's figures come from its NIC alone."""
    exp = registry.load_experiment(str(_write(tmp_path, "{test: filebench, clients: 12, "
                                                        "server_memory: 512m}")))
    where = Recording()
    prepared = registry.kind("fs").prepare(exp, tmp_path / "run")
    d = stack.deploy(where, exp.settings.fs, ("gluster", "idle"), prepared, None)
    [spec] = where.specs
    assert spec.services == ["fs-server", "fs-client", *(f"fs-client{i}" for i in range(2, 13))]
    assert spec.env["FS_SERVER_MEMORY"] == "512m"
    assert [c.service for c in d.info.clients] == ["fs-client", *(f"fs-client{i}"
                                                                   for i in range(2, 13))]
    group = d.counters["fs-client"]
    assert isinstance(group, CgroupGroup)
    assert list(group.parts) == [c.service for c in d.info.clients]
    assert not isinstance(d.counters["fs-server"], CgroupGroup)
    assert d.info.server_net == ["node2:eth0"]
    assert [ep.label for ep in d.tiers["fs-client"].endpoints] == ["node3:eth0"]
    # one client: as before, its own counter and no memory cap
    one = registry.load_experiment(str(_write(tmp_path, "{test: filebench}")))
    where = Recording()
    d = stack.deploy(where, one.settings.fs, ("gluster", "busy"), prepared, None)
    assert where.specs[0].services == ["fs-server", "fs-client", "fs-hog"]
    assert where.specs[0].env["FS_SERVER_MEMORY"] == "0"  # none, whatever the shell says
    assert not isinstance(d.counters["fs-client"], CgroupGroup)


def _write(tmp_path: Path, fs: str) -> Path:
    path = tmp_path / f"exp-{abs(hash(fs))}.yml"
    path.write_text(f"name: fs-x\nkind: fs\nmodes: [offloads-on]\nfs: {fs}\n")
    return path


def test_the_servers_memory_cap_its_cache_and_storage_reads_over_a_window() -> None:
    def sample(t: float, cache: int, read: int) -> dict:
        return {"t": t, "cpu": {"fs-server": {"usage_s": t, "file_bytes": cache,
                                              "read_bytes": read,
                                              "mem_limit_bytes": 768 << 20}}}

    samples = [sample(0, 100_000_000, 0), sample(1, 790_000_000, 400_000_000),
               sample(2, 700_000_000, 900_000_000), sample(3, 999_000_000, 950_000_000)]
    out = figures.memory_figures(samples, samples[0], samples[2])
    # the largest cache inside the window (not the later sample's), the reads between its ends
    assert out == {"server_cache_mb": 790.0, "server_memory_mb": (768 << 20) / 1e6,
                   "server_disk_read_mb": 900.0}
    for s in samples:
        del s["cpu"]["fs-server"]["mem_limit_bytes"]
    assert "server_memory_mb" not in figures.memory_figures(samples, samples[0], samples[2])
    assert figures.memory_figures([{"t": 0, "cpu": {}}], {"t": 0, "cpu": {}},
                                  {"t": 1, "cpu": {}}) == {}


def test_each_clients_figures_are_kept_and_the_slowest_one_shown(tmp_path: Path) -> None:
    class Ctx:
        record: dict = {}

    def report(nbytes: int) -> dict:
        return {"read": {"bytes": nbytes, "bytes_per_s": nbytes / 4, "iops": nbytes / 4e6,
                         "clat_mean_ms": 1.0, "clat_p99_ms": 2.0, "ios": 1, "runtime_ms": 4000}}

    clients = [box(s, "node3", 30 + i) for i, s in enumerate(["fs-client", "fs-client2",
                                                              "fs-client3"])]
    ctx = Ctx()
    out = sequence.per_client(ctx, clients, [report(4_000_000), report(8_000_000),
                                             report(0)], "read")  # type: ignore[arg-type]
    assert out == {"clients": 3, "clients_moving": 2, "slowest_client_pct": 0.0}
    assert [(m["client"], m["mb_per_s"]) for m in ctx.record["per_client"]] == [
        ("fs-client", 1.0), ("fs-client2", 2.0), ("fs-client3", 0.0)]
    out = sequence.per_client(ctx, clients, [report(6_000_000), report(6_000_000),
                                             report(3_000_000)], "read")  # type: ignore[arg-type]
    assert out["clients_moving"] == 3 and out["slowest_client_pct"] == pytest.approx(60.0)


def test_the_window_is_where_every_clients_fio_was_timed() -> None:
    """On a busy host the clients' fio start late and apart: the figures' window is the span
    all were in their timed part (each report's end less its timed run time), with the bytes
    in proportion; hardly overlapping parts give the span of them all, said in the record."""
    class Ctx:
        def __init__(self) -> None:
            self.record: dict = {}

    def report(ended: float, runtime_s: float, nbytes: int) -> dict:
        return {"ended_s": ended, "read": {"runtime_ms": runtime_s * 1000, "bytes": nbytes}}

    ctx = Ctx()
    got = sequence.common_window(ctx, [report(108.0, 4, 400), report(108.5, 4, 400),  # type: ignore[arg-type]
                                       report(107.5, 4, 400)], "read", 100.0, 4)
    assert got == (104.5, 107.5, pytest.approx(1200 * 3 / 4))
    assert ctx.record["client_spans"] == [[104.0, 108.0], [104.5, 108.5], [103.5, 107.5]]
    apart = Ctx()
    got = sequence.common_window(apart, [report(104.0, 4, 10), report(107.5, 4, 10)],  # type: ignore[arg-type]
                                 "read", 100.0, 4)
    assert got[:2] == (100.0, 107.5) and apart.record["clients_overlap"] is False
    # a report without its time stamp: fio's common start and ramp, as before
    assert sequence.common_window(Ctx(), [{"ended_s": None, "read": {"runtime_ms": 4000,  # type: ignore[arg-type]
                                                                     "bytes": 5}}],
                                  "read", 100.0, 4) == (100.0, 104.0, 5)
