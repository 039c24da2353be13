"""The cluster placement without nodes: where each service goes by its role label (the compose
files and host overlays as shipped, read with `docker compose config`, which needs no engine),
dependency order, URLs, the SSH transport of the interfaces layer, and the sampling agents merged
on one clock (real agent processes, started with `sh -c` where ssh would reach a node)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tierbench.interfaces import netif
from tierbench.kinds import registry
from tierbench.measure import agent
from tierbench.kinds.web import services
from tierbench.placement import cluster, clusterfile, hostnet, model
from tierbench.placement.clusterfile import ClusterError, parse_cluster
from tierbench.transport import Transport

ROOT = Path(__file__).resolve().parent.parent

LAB = {
    "version": 1,
    "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
               "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
              for i in range(1, 6)],
    "roles": {"loadgen": "node1", "loadgen_workers": ["node1", "node2"], "proxy": "node2",
              "web": "node3", "pfs_meta": "node4", "pfs_io": ["node4", "node5"],
              "pfs_clients": ["node1"], "net_server": "node3", "net_client": "node1"},
}


def lab(**roles: object) -> clusterfile.Cluster:
    data = copy.deepcopy(LAB)
    data["roles"].update(roles)
    data["roles"] = {k: v for k, v in data["roles"].items() if v is not None}
    return parse_cluster(data, registry.roles(), "lab.yml")


def config(files: list[str], profiles: list[str] = ()) -> dict:
    argv = ["docker", "compose", *(a for f in model.host_files([str(ROOT / f) for f in files])
                                   for a in ("-f", f)),
            *(a for p in profiles for a in ("--profile", p)), "config", "--format", "json"]
    env = {**os.environ, "TIERBENCH_ADDR_WEB": "198.18.16.13", "TIERBENCH_NODE_DIR": "/srv/tb"}
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def test_web_stack_goes_on_its_roles_nodes_in_dependency_order() -> None:
    conf = config(["docker-compose.yml", "compose/loadgen-workers.yml"])
    wanted = ["fileset", "web", "proxy", "loadgen", "loadgen-worker"]
    where = hostnet.place(conf, wanted, {"loadgen-worker": 3}, lab())
    assert where == {"fileset": {"node3": 1}, "web": {"node3": 1}, "proxy": {"node2": 1},
                     "loadgen": {"node1": 1}, "loadgen-worker": {"node1": 2, "node2": 1}}
    deps = {s: list(conf["services"][s].get("depends_on") or {}) for s in wanted}
    assert hostnet.topo_levels(wanted, deps) == [["fileset"], ["web"], ["proxy"], ["loadgen"],
                                                 ["loadgen-worker"]]
    assert hostnet.is_job("fileset", conf, wanted) and not hostnet.is_job("web", conf, wanted)
    # every service of the base file is told where it listens, on its node's address
    env = conf["services"]["web"]["environment"]
    assert env["APACHE_LISTEN"] == "198.18.16.13:8080"
    assert conf["services"]["proxy"]["environment"]["BACKEND"] == "198.18.16.13:8080"
    assert {"source": "/srv/tb/workloads", "target": "/app/workloads"}.items() <= \
        conf["services"]["loadgen"]["volumes"][0].items()
    for name in wanted:
        assert conf["services"][name]["network_mode"] == "host", name
        assert not conf["services"][name].get("networks"), name
        assert not conf["services"][name].get("ports"), name


def test_orangefs_servers_go_round_their_nodes_and_the_config_job_follows() -> None:
    conf = config(["docker-compose.yml", "compose/pvfs.yml"], ["pfs"])
    wanted = ["pvfs-meta", *(f"pvfs-io{i}" for i in range(1, 6)), "pvfs-client", "pvfs-config"]
    where = hostnet.place(conf, wanted, {"pvfs-client": 2}, lab())
    assert where["pvfs-meta"] == {"node4": 1}
    assert [next(iter(where[f"pvfs-io{i}"])) for i in range(1, 6)] == [
        "node4", "node5", "node4", "node5", "node4"]
    assert where["pvfs-client"] == {"node1": 2}
    # the one-shot config job: beside every server and client (they share its volume)
    assert sorted(where["pvfs-config"]) == ["node1", "node4", "node5"]
    for name in wanted:  # server aliases resolve to nodes, no Compose hostname or network
        spec = conf["services"][name]
        assert spec["network_mode"] == "host" and "hostname" not in spec, name
        if name != "pvfs-config":
            assert "pvfs-io3=127.0.0.1" in spec["extra_hosts"], name
    assert conf["services"]["pvfs-config"]["environment"]["PVFS_PORTS"] == "distinct"


def test_a_role_the_cluster_file_leaves_out_is_one_sentence_per_role() -> None:
    conf = config(["docker-compose.yml", "compose/net.yml"], ["net"])
    with pytest.raises(ClusterError) as info:
        hostnet.place(conf, ["net-server", "net-client", "proxy"], {},
                      lab(net_server=None, proxy=None))
    assert info.value.problems == [
        "lab.yml: roles.net_server: not placed, and this needs the server side of the network "
        "micro-benchmarks on a node",
        "lab.yml: roles.proxy: not placed, and this needs the proxy tier (Apache mod_proxy or "
        "HAProxy) on a node"]


def test_every_service_of_every_compose_file_has_a_role_on_a_cluster() -> None:
    """A service a host overlay does not place cannot run on a cluster: new services need a
    host overlay with org.tierbench.role (see compose/README.md)."""
    files = ["docker-compose.yml", *services.OVERLAYS.values(), services.WEB_SERVERS_OVERLAY,
             "compose/net.yml"]
    conf = config(files, ["pfs", "net"])
    for name, spec in conf["services"].items():
        role = (spec.get("labels") or {}).get(hostnet.ROLE_LABEL)
        wanted = list(conf["services"])
        assert spec.get("network_mode") == "host", f"{name} has no host overlay"
        assert role in registry.roles() or (role is None and hostnet.is_job(name, conf, wanted)), \
            f"service {name} has no role ({hostnet.ROLE_LABEL}) in its host overlay"
    # each file that defines services has its overlay beside it, named after it
    assert model.host_overlay("docker-compose.yml") == "compose/host.yml"
    assert model.host_overlay("compose/loadgen-workers.yml") == "compose/host-loadgen-workers.yml"
    assert model.host_overlay("compose/haproxy.yml") is None  # defines no service of its own
    assert model.host_overlay("compose/host-net.yml") is None


def test_urls_name_the_node_and_port_of_the_service() -> None:
    placer = cluster.ClusterPlacer(lab())
    placer.placed = {"proxy": {"node2": 1}, "web": {"node3": 1}, "loadgen": {"node1": 1}}
    placer.ports = {"proxy": "80", "web": "8080"}
    placer.roles = {"proxy": "proxy", "web": "web", "loadgen": "loadgen"}
    assert placer.url("http://proxy") == "http://198.18.16.12:80"
    assert placer.url("http://web/x/y.bin") == "http://198.18.16.13:8080/x/y.bin"
    assert placer.url("http://198.18.1.10") == "http://198.18.1.10"
    assert placer.own_addresses() == [f"198.18.16.{10 + i}" for i in range(1, 6)]
    eps = [netif.Endpoint("node1", "eth0", None, Transport("node1", ("sh", "-c")))]
    assert placer.received(eps) == [("node1:eth0", "rx_bytes")]
    placer.placed["proxy"] = {"node1": 1}  # the client's NIC also carries the proxy's traffic
    assert placer.received(eps) == []


def test_the_node_transport_runs_commands_there_and_travels_with_snapshots() -> None:
    nodex = Transport("nodex", ("sh", "-c"))
    assert netif.run_ns(None, ["echo", "a b"], "nodex:eth0", nodex) == "a b\n"
    with pytest.raises(netif.NetifError, match=r"^nodex:eth0: `false` failed \(exit 1\)"):
        netif.run_ns(None, ["false"], "nodex:eth0", nodex)
    gone = Transport("gone", ("sh", "-c", "echo 'ssh: connect to host x: refused' >&2; exit 255"))
    with pytest.raises(netif.NetifError, match=r"^gone:eth0: cannot reach node gone over SSH to "
                                               r"run `ip link show`: ssh: connect to host x"):
        netif.run_ns(None, ["ip", "link", "show"], "gone:eth0", gone)
    no_ssh = Transport("nowhere", ("no-such-ssh-tierbench",))
    with pytest.raises(netif.NetifError, match="no-such-ssh-tierbench is not installed"):
        netif.run_ns(None, ["true"], "nowhere", no_ssh)
    # a snapshot of a node's interface carries the command that reaches it: `tierbench clean`
    # restores from the state file alone, in a process that knew no node
    snap = netif.snapshot(netif.Endpoint("nodey", "lo", None, Transport("nodey", ("sh", "-c"))))
    assert snap["node"] == "nodey" and snap["ssh"] == ["sh", "-c"] and snap["label"] == "nodey:lo"
    assert snap["features"] and snap["mtu"] == 65536
    fresh = {**snap, "tier": "nodez", "node": "nodez", "label": "nodez:lo"}
    assert netif.endpoint_of(fresh) == netif.Endpoint("nodez", "lo", None,
                                                      Transport("nodez", ("sh", "-c")))
    assert netif.restore_endpoint(fresh) == []


def sample(t: float, k: int, usage: float, boot: str = "a") -> dict:
    return {"k": k, "t": t, "host": {"user": 10 * k, "system": k, "idle": 100},
            "cpu": {"web": {"usage_s": usage, "user_s": usage, "system_s": 0.0}},
            "net": {}}


def test_merge_counts_a_shared_kernel_once_and_sums_a_tiers_parts() -> None:
    parts = {"n1": sample(10.0, 2, 1.0), "n2": sample(10.002, 2, 2.0)}
    parts["n2"]["cpu"] = {"w2": {"usage_s": 2.0, "user_s": 1.5, "system_s": 0.5,
                                 "read_bytes": 7}}
    tiers = {"web": [("n1", "web")], "gen": [("n1", "web"), ("n2", "w2")]}
    shared = agent.merge(parts, tiers, {"n1": "boot-a", "n2": "boot-a"})
    assert shared["host"] == {"user": 20, "system": 2, "idle": 100}
    assert shared["t"] == pytest.approx(10.001)
    assert shared["cpu"]["web"]["usage_s"] == 1.0
    assert shared["cpu"]["gen"] == {"usage_s": 3.0, "user_s": 2.5, "system_s": 0.5,
                                    "parts": {"web": 1.0, "w2": 2.0}}
    assert set(shared["nodes"]) == {"n1", "n2"}
    apart = agent.merge(parts, tiers, {"n1": "boot-a", "n2": "boot-b"})
    assert apart["host"] == {"user": 40, "system": 4, "idle": 200}
    del parts["n2"]
    alone = agent.merge(parts, tiers, {"n1": "boot-a"})
    assert "gen" not in alone["cpu"] and alone["missing_nodes"] == ["n2"]


def test_agents_sample_on_the_controllers_clock(tmp_path: Path) -> None:
    """Two agents (this machine, through `sh -c`), one 250 ms ahead: ticks 1 s apart on the
    controller's clock, every node in each merged sample, a sample on request, a final one."""
    me = os.getpid()
    nodes_spec = {"a": {"via": Transport("a", ("sh", "-c")), "offset": 0.0,
                        "containers": {"me": me}, "ifaces": {"a:lo": "lo"}},
                  "b": {"via": Transport("b", ("sh", "-c")), "offset": 0.25,
                        "containers": {"me2": me}, "ifaces": {"b:lo": "lo"}}}
    s = agent.MergedSampler(tmp_path / "s.jsonl", nodes_spec,
                            {"tier": [("a", "me")], "pair": [("a", "me"), ("b", "me2")]})
    s.start()
    spent = time.process_time()
    while time.process_time() - spent < 0.2:  # some CPU for the counters to see
        pass
    now = s.now()
    assert set(now["nodes"]) == {"a", "b"} and now["cpu"]["pair"]["parts"].keys() == {"me", "me2"}
    time.sleep(2.1)
    samples = s.stop()
    assert s.error is None
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert lines == samples and len(samples) >= 4
    ticks = [x["t"] - s.t0 for x in samples[:-1]]
    assert ticks == pytest.approx(list(range(len(ticks))), abs=0.15)
    for x in samples[:-1]:
        # node b's ticks are stamped on the controller's clock: by its own clock (250 ms ahead
        # of the controller's, as far as it was told) it sampled 250 ms later
        assert abs(x["nodes"]["a"]["t"] - x["nodes"]["b"]["t"]) < 0.1
        assert x["net"]["a:lo"]["rx_bytes"] >= 0 and "b:lo" in x["net"]
    assert samples[-1]["cpu"]["tier"]["usage_s"] >= now["cpu"]["tier"]["usage_s"]
    assert all(p.proc.poll() is not None for p in s.streams.values())


def test_an_agent_that_cannot_start_names_its_node(tmp_path: Path) -> None:
    spec = {"n1": {"via": Transport("n1", ("sh", "-c")), "offset": 0.0, "containers": {},
                   "ifaces": {}},
            "n9": {"via": Transport("n9", ("sh", "-c",
                                           "echo 'python3: not found' >&2; exit 127", "x")),
                   "offset": 0.0, "containers": {}, "ifaces": {}}}
    s = agent.MergedSampler(tmp_path / "s.jsonl", spec, {})
    with pytest.raises(agent.AgentError, match=r"^n9: the sampling agent did not start "
                                               r"\(python3 is needed on every node\): "
                                               r"python3: not found"):
        s.start()
    gone = {"n1": {"via": Transport("n1", ("sh", "-c")), "offset": 0.0,
                   "containers": {"web": 999999999}, "ifaces": {}}}
    with pytest.raises(agent.AgentError, match=r"^n1: the CPU counters of web cannot be read"):
        agent.MergedSampler(tmp_path / "t.jsonl", gone, {"web": [("n1", "web")]}).start()


def test_an_agent_ends_when_its_controller_goes(tmp_path: Path) -> None:
    """The controller killed: the agent's input closes and it exits (nothing stays on a node)."""
    via = Transport("n1", ("sh", "-c"))
    argv = agent.agent_argv(via, {"containers": {}, "ifaces": {}, "interval": 1.0})
    folder = Path(argv[5])  # sh -c RUN_REMOVE sh python3 FOLDER sample CONFIG
    assert (folder / "tierbench-node.pyz").is_file()
    stream = agent.NodeStream("n1", via, argv)
    assert stream.wait_for("ready", time.monotonic() + 20) is not None
    stream.proc.stdin.close()
    assert stream.proc.wait(timeout=10) == 0
    assert not folder.exists()  # the bundle's folder goes with the agent


def test_cpu_settings_of_a_container_on_a_node_are_read_with_the_same_code() -> None:
    """cpu: modes on a cluster: the cgroup code of interfaces/cgroupcpu.py runs on the node
    (here through `sh -c`) from the node bundle, on the node's PID of the container."""
    from tierbench.interfaces import cpu

    nodec = Transport("nodec", ("sh", "-c"))
    me = os.getpid()
    assert cpu.read(me, nodec) == cpu.read_cgroup(me) == cpu.read(me)
    try:
        here: object = cpu.allowed_cpus(me)
    except netif.NetifError as exc:  # this process may have no parent cpuset (not a container)
        here = str(exc)
    try:
        there: object = cpu.allowed(me, nodec)
    except netif.NetifError as exc:
        there = str(exc).removeprefix("nodec: ")
    assert there == here
    with pytest.raises(netif.NetifError, match=r"^nodec: process 999999999 is gone"):
        cpu.read(999999999, nodec)
    # a platform (the parent cgroup) is read with the same code there, by its folders
    there_info, here_info = cpu.platform_of(me, nodec), cpu.platform_info(me)
    assert there_info == here_info and here_info["own"] in here_info["members"]
    try:  # this process may be in the root cgroup (not a container): no parent to read
        here = cpu.read_dirs(here_info["dirs"])
    except netif.NetifError as exc:
        here = str(exc)
    try:
        there = cpu.read_platform(here_info["dirs"], nodec)
    except netif.NetifError as exc:
        there = str(exc).removeprefix("nodec: ")
    assert there == here
    assert cpu.platform_exists(here_info["dirs"], nodec)
    assert not cpu.platform_exists({**here_info["dirs"], "cpu": "/nonexistent"}, nodec)


def test_receivers_sharing_a_nodes_ports_are_reached_at_their_own_ports() -> None:
    """Two receivers on one cluster node (host networking): every flow of the second goes to
    its ports, PORT_STRIDE above the first's, for iperf 2, iperf3 and sockperf alike."""
    from tierbench.kinds.net import flows, settings, stack, tools

    addrs = ["198.18.16.13", "198.18.16.13"]
    shift = [0, flows.PORT_STRIDE]
    for tool, base in (("iperf2", tools.IPERF_PORT), ("iperf3", tools.IPERF3_PORT)):
        n = settings.Net(test="stream", tool=tool, connections=[8], receivers=[2])
        plan = flows.flows(n, addrs, 8, 1, shift=shift)
        assert sum(f.streams for f in plan) == 8, tool
        ports = sorted(f.port for f in plan)
        assert ports[0] == base and any(p >= base + flows.PORT_STRIDE for p in ports), tool
        assert all(p < base + 100 or base + flows.PORT_STRIDE <= p < base + 1100
                   for p in ports), (tool, ports)
    env = stack.receiver_env(2, 4, 6, 3)
    assert [e["NET_SOCKPERF_PORT"] for e in env] == [str(tools.SOCKPERF_PORT),
                                                     str(tools.SOCKPERF_PORT + 1000)]
    assert env[1]["NET_IPERF3_SERVERS"] == "6" and env[1]["NET_SOCKPERF_SERVERS"] == "3"


def test_dynamic_requests_place_the_app_and_db_roles() -> None:
    """Dynamic requests need the app and db roles on a cluster (their commands reach the
    containers through their nodes' engines); a static experiment needs neither."""

    exp = registry.load_experiment("dc-dynamic")
    assert registry.kind(exp.kind).cluster_roles(exp) == ["loadgen", "proxy", "web", "app", "db"]
    static = registry.load_experiment("dc-single")
    assert registry.kind("web").cluster_roles(static) == ["loadgen", "proxy", "web"]
