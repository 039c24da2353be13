"""A platform's CPUs shared by the server tiers it holds (modes with `cpu: {per: platform}`):
what is written where, in which order, what is refused, and what is restored. The cgroups are
an in-memory tree with cgroup v1's rule (a child's cpuset within its parent's), so that an
order that the kernel would refuse fails here too; the real cgroups are test_stack.py's
(`test_a_platform_shares_one_cpu_of_time_among_the_servers`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierbench.config.errors import ConfigError
from tierbench.interfaces import cpu
from tierbench.interfaces.netif import NetifError
from tierbench.kinds import registry
from tierbench.modes import apply
from tierbench.modes.model import load_mode
from tierbench.placement import compose, model
from tierbench.placement.model import StackError
from tierbench.transport import Transport

ROOT = Path(__file__).resolve().parent.parent
NODE = "platform-node"
PLATFORM = "/sys/fs/cgroup/cpu/tierbench-t-servers"


class Cgroups:
    """Cgroup folders by path: {"cpuset", "limit"}; the server containers under PLATFORM, the
    load generator elsewhere; every write logged."""

    def __init__(self, loadgen_inside: bool = False) -> None:
        self.groups = {"/sys/fs/cgroup/cpu": {"cpuset": "0-1", "limit": None},
                       PLATFORM: {"cpuset": "0-1", "limit": None},
                       "/sys/fs/cgroup/cpu/docker": {"cpuset": "0-1", "limit": None}}
        self.pids = {101: f"{PLATFORM}/proxyid", 102: f"{PLATFORM}/webid",
                     200: ("/sys/fs/cgroup/cpu/docker/loadgenid" if not loadgen_inside
                           else f"{PLATFORM}/loadgenid")}
        for path in self.pids.values():
            self.groups[path] = {"cpuset": "1" if "loadgen" not in path else "0", "limit": None}
        self.writes: list[tuple[str, str | None, float | None, bool]] = []

    def children(self, path: str) -> list[str]:
        return [p for p in self.groups if p.rsplit("/", 1)[0] == path]

    def write_path(self, path: str, cpuset: str | None, limit: float | None,
                   set_limit: bool) -> None:
        if path not in self.groups:
            raise NetifError(f"the cgroup {path} is gone")
        if cpuset is not None:
            new = cpu.parse(cpuset)
            parent = self.groups.get(path.rsplit("/", 1)[0])
            if parent is not None and not new <= cpu.parse(parent["cpuset"]):
                raise NetifError(f"{path}: cpuset {cpuset} is not within its parent's")
            for child in self.children(path):
                if not cpu.parse(self.groups[child]["cpuset"]) <= new:
                    raise NetifError(f"{path}: cpuset {cpuset} would leave out {child}'s "
                                     "CPUs (EBUSY)")
            self.groups[path]["cpuset"] = cpuset
        if set_limit:
            self.groups[path]["limit"] = limit
        self.writes.append((path, cpuset, limit, set_limit))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def read(pid: int, node: Transport | None = None) -> dict:
            return dict(self.groups[self.pids[pid]])

        def write(pid: int, cpuset: str | None, limit: float | None, *, set_limit: bool,
                  node: Transport | None = None) -> None:
            self.write_path(self.pids[pid], cpuset, limit, set_limit)

        def platform_of(pid: int, node: Transport | None = None) -> dict:
            parent = self.pids[pid].rsplit("/", 1)[0]
            return {"dirs": {"cpuset": parent, "cpu": parent, "version": "1"},
                    "own": self.pids[pid].rsplit("/", 1)[1],
                    "members": sorted(p.rsplit("/", 1)[1] for p in self.children(parent)
                                      if p in self.pids.values())}

        def read_platform(dirs: dict, node: Transport | None = None) -> dict:
            return dict(self.groups[dirs["cpu"]])

        def write_platform(dirs: dict, cpuset: str | None, limit: float | None, *,
                           set_limit: bool, node: Transport | None = None) -> None:
            self.write_path(dirs["cpu"], cpuset, limit, set_limit)

        def allowed(pid: int, node: Transport | None = None, *, platform: bool = False) -> set[int]:
            above = self.pids[pid].rsplit("/", 2 if platform else 1)[0]
            return cpu.parse(self.groups[above]["cpuset"])

        for name, fn in (("read", read), ("write", write), ("platform_of", platform_of),
                         ("read_platform", read_platform), ("write_platform", write_platform),
                         ("allowed", allowed),
                         ("platform_exists", lambda dirs, node=None: dirs["cpu"] in self.groups)):
            monkeypatch.setattr(cpu, name, fn)


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> Cgroups:
    g = Cgroups()
    g.install(monkeypatch)
    return g


SERVERS = [("proxy", Transport(NODE, ("sh", "-c")), 101),
           ("web", Transport(NODE, ("sh", "-c")), 102)]


def test_a_shared_limit_goes_on_the_platform_and_cpusets_on_every_server(groups: Cgroups) -> None:
    mode = load_mode("servers-2cpus-half")
    state = apply.snapshot_mode(mode, [], SERVERS)
    assert [e["tiers"] for e in state["platform"].values()] == [["proxy", "web"]]
    apply.apply_mode(mode, [], state)
    # the limit once, on the parent; each server its cpuset and no limit of its own
    assert groups.groups[PLATFORM] == {"cpuset": "0-1", "limit": 1.0}
    for pid in (101, 102):
        assert groups.groups[groups.pids[pid]] == {"cpuset": "0-1", "limit": None}
    assert groups.groups[groups.pids[200]] == {"cpuset": "0", "limit": None}  # the load generator
    assert [w for w in groups.writes if w[3] and w[0] != PLATFORM] == []
    view = apply.state_view(apply.snapshot_mode(mode, [], SERVERS))
    assert view["platform"] == {f"platform ({NODE})": {"cpuset": "0-1", "limit": 1.0,
                                                       "tiers": ["proxy", "web"]}}
    assert apply.restore_state(state) == []
    assert groups.groups[PLATFORM] == {"cpuset": "0-1", "limit": None}
    assert groups.groups[groups.pids[101]] == {"cpuset": "1", "limit": None}


def test_a_per_container_limit_goes_on_each_container_and_not_on_the_platform(
        groups: Cgroups, tmp_path: Path) -> None:
    path = tmp_path / "half.yml"
    path.write_text("description: x\nroles: [servers]\ncpu: {cpuset: '0-1', limit: 1.0}\n")
    mode = load_mode(str(path))
    state = apply.snapshot_mode(mode, [], SERVERS)
    assert "platform" not in state
    apply.apply_mode(mode, [], state)
    assert groups.groups[PLATFORM] == {"cpuset": "0-1", "limit": None}
    for pid in (101, 102):
        assert groups.groups[groups.pids[pid]] == {"cpuset": "0-1", "limit": 1.0}


def test_narrowing_a_platform_moves_the_servers_first(groups: Cgroups, tmp_path: Path) -> None:
    """From CPU 1 to CPU 0: the parent cannot leave out its children's CPU (cgroup v1), so it is
    widened, the servers moved, then narrowed; restore goes back the same way."""
    path = tmp_path / "cpu0.yml"
    path.write_text("description: x\nroles: [servers]\ncpu: {cpuset: '0', per: platform}\n")
    mode = load_mode(str(path))
    groups.groups[PLATFORM]["cpuset"] = "1"
    state = apply.snapshot_mode(mode, [], SERVERS)
    apply.apply_mode(mode, [], state)
    assert groups.groups[PLATFORM]["cpuset"] == "0"
    assert {groups.groups[groups.pids[p]]["cpuset"] for p in (101, 102)} == {"0"}
    assert apply.restore_state(state) == []
    assert groups.groups[PLATFORM]["cpuset"] == "1"


def test_a_platform_that_holds_the_load_generator_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    g = Cgroups(loadgen_inside=True)
    g.install(monkeypatch)
    mode = load_mode("servers-2cpus-half")
    state = apply.snapshot_mode(mode, [], SERVERS)
    with pytest.raises(NetifError, match=r"cannot be applied, nothing was changed: mode "
                                         r"servers-2cpus-half sets one platform for the tiers "
                                         r"proxy, web, and their parent cgroup "
                                         rf"{PLATFORM} on {NODE} also holds 1 other container\(s\) "
                                         r"\(loadgenid\)"):
        apply.apply_mode(mode, [], state)
    assert g.writes == []


def test_the_platform_is_restored_after_its_containers_are_gone(
        groups: Cgroups, monkeypatch: pytest.MonkeyPatch) -> None:
    mode = load_mode("servers-2cpus-half")
    state = apply.snapshot_mode(mode, [], SERVERS)
    apply.apply_mode(mode, [], state)
    for pid in (101, 102):  # the stack went down: the containers' cgroups are gone
        del groups.groups[groups.pids[pid]]

    def gone(*args: object, **kwargs: object) -> None:
        raise NetifError("process 101 is gone: its CPU settings cannot be read")
    monkeypatch.setattr(cpu, "write", gone)
    problems = apply.restore_state(state)
    assert all("gone, nothing to restore" in p for p in problems), problems
    assert groups.groups[PLATFORM] == {"cpuset": "0-1", "limit": None}


def test_a_platform_covers_the_server_role_or_named_tiers(tmp_path: Path) -> None:
    """A platform is the server role's or some named tiers'; a mode for the clients, or for
    every tier, has none (the load generator stays outside any platform)."""
    for scope in ("roles: [clients]\n", ""):
        path = tmp_path / "platform.yml"
        path.write_text(f"description: x\n{scope}cpu: {{limit: 1.0, per: platform}}\n")
        with pytest.raises(ConfigError, match=r"cpu.per: platform is the CPUs some tiers share "
                                              r".*give the mode roles: \[servers\] or the tiers"):
            load_mode(str(path))
    path.write_text("description: x\ntiers: [web, app]\ncpu: {limit: 1.0, per: platform}\n")
    assert load_mode(str(path)).platform() == (
        "platform=the stack's cpusets, 1 CPU of time in all, shared by web and app")


def test_the_web_stack_starts_web_and_app_alone_under_their_platform(tmp_path: Path) -> None:
    """webapp-2cpus-half (DC-cpus) is one platform of the web and application tiers: the web
    stack gives them a parent cgroup of their own (WEBAPP_CGROUP), and refuses a platform on
    tiers it cannot start apart (the proxy with the web tier: the servers' platform is the only
    one that holds the proxy)."""
    from tierbench.kinds.web import services

    half = load_mode("webapp-2cpus-half")
    assert half.tiers == ("web", "app") and half.cpu == {"cpuset": "0-1", "limit": 1.0,
                                                          "per": "platform"}
    assert services.own_platforms([half, load_mode("webapp-2cpus")]) == {
        "WEBAPP_CGROUP": "webapp"}
    assert services.own_platforms([load_mode("servers-2cpus-half"),
                                   load_mode("webapp-1cpu")]) == {}
    path = tmp_path / "proxyweb.yml"
    path.write_text("description: x\ntiers: [proxy, web]\ncpu: {limit: 1.0, per: platform}\n")
    with pytest.raises(ConfigError, match=r"mode proxyweb: cpu.per: platform for the tiers "
                                          r"proxy, web: the web stack starts only these under a "
                                          r"platform of their own: app and web"):
        services.own_platforms([load_mode(str(path))])
    spec = model.Services([], {}, platforms={"WEBAPP_CGROUP": "webapp"})
    tag, slice_name = model.TAG.replace(".", "_"), model.PROJECT.replace("-", "_")
    assert spec.cgroup_env("cgroupfs") == {"SERVERS_CGROUP": f"/{model.PROJECT}-{tag}-servers",
                                           "WEBAPP_CGROUP": f"/{model.PROJECT}-{tag}-webapp"}
    assert spec.cgroup_env("systemd", "n1")["WEBAPP_CGROUP"] == f"{slice_name}_{tag}_n1_webapp.slice"


def test_every_servers_mode_is_a_platform_and_says_so() -> None:
    for name, cpuset, limit in (("servers-1cpu", "1", None), ("servers-2cpus", "0-1", None),
                                ("servers-2cpus-half", "0-1", 1.0)):
        mode = load_mode(name)
        assert mode.roles == ("servers",) and mode.cpu.get("per") == "platform", name
        assert mode.cpu.get("cpuset") == cpuset and mode.cpu.get("limit") == limit, name
        assert "platform" in mode.description and "load generator" in mode.description, name
    assert load_mode("servers-2cpus-half").platform() == (
        "platform=CPUs 0-1, 1 CPU of time in all, shared by the server tiers, links tbf 914mbit")
    assert load_mode("platform-700mhz").platform() == (
        "platform=the stack's cpusets, 0.29 CPU of time each (every tier, load generator "
        "included; per container), links tbf 914mbit")


# 004 §3.2 / §6.1 Fig. 14b: Cluster 1 (2 x 2.4 GHz) 1748, Cluster 2 (2 x 1 GHz) 500, Cluster 3
# (4 x 700 MHz) 914 Mb/s; the data center's platforms stand for them by CPU time
FIG_14B = {"platform-2400mhz": "1748mbit", "platform-1000mhz": "500mbit",
           "platform-700mhz": "914mbit", "servers-2cpus": "1748mbit", "servers-1cpu": "500mbit",
           "servers-2cpus-half": "914mbit"}


def test_every_platform_mode_shapes_its_links_at_its_clusters_fig_14b_rate() -> None:
    for name, rate in FIG_14B.items():
        mode = load_mode(name)
        assert mode.knobs.qdisc == {"kind": "tbf", "rate": rate, "latency": "50ms"}, name
        assert mode.platform().endswith(f", links tbf {rate}"), name
        assert f"{rate[:-4]} Mb/s" in " ".join(mode.description.split()), name
    # combined with an offload or cache setting, the platform keeps its link
    assert load_mode("servers-1cpu+servers-offloads-on").knobs.qdisc["rate"] == "500mbit"
    assert load_mode("servers-2cpus+proxy-cache-on").knobs.qdisc["rate"] == "1748mbit"


def test_the_plan_says_in_one_sentence_whether_the_host_could_set_clocks(tmp_path: Path) -> None:
    from tierbench.modes import cpus

    assert "this host has no cpufreq" in cpus.clock_line(tmp_path)
    for n in (0, 1):
        (tmp_path / f"cpu{n}" / "cpufreq").mkdir(parents=True)
        (tmp_path / f"cpu{n}" / "cpufreq" / "scaling_max_freq").write_text("2400000\n")
    line = cpus.clock_line(tmp_path)
    assert "this host has cpufreq (2 CPUs' scaling_max_freq), which tierbench does not write" \
        in line and line.startswith("clock: ")


def test_the_plan_prints_the_platform_of_every_point() -> None:
    from tierbench import runner

    lines = runner.plan_lines(registry.load_experiment("dc-static"))
    points = [ln for ln in lines if ln.startswith("  p")]
    assert len(points) == 96
    want = {m: load_mode(m).platform() for m in ("servers-1cpu", "servers-2cpus-half",
                                                "servers-2cpus")}
    for line in points:
        mode = line.split("mode=")[1].split()[0]
        assert line.endswith("  " + want[mode]), line
    assert sum(ln.startswith("clock: ") for ln in lines) == 1


def test_the_servers_parent_cgroup_is_named_for_the_engine() -> None:
    tag = model.TAG.replace(".", "_")
    assert model.servers_cgroup("cgroupfs") == f"/{model.PROJECT}-{tag}-servers"
    assert model.servers_cgroup("cgroupfs", "web1") == f"/{model.PROJECT}-{tag}-web1-servers"
    slice_name = model.PROJECT.replace("-", "_")  # the checkout's project, no dash
    assert model.servers_cgroup("systemd") == f"{slice_name}_{tag}_servers.slice"
    assert "-" not in model.servers_cgroup("systemd", "web-1")
    with pytest.raises(StackError, match="cgroup driver 'none'"):
        model.servers_cgroup("none")


def test_every_server_tier_and_no_client_starts_under_the_servers_cgroup() -> None:
    """Compose files: each data-center server tier takes SERVERS_CGROUP as its cgroup parent; the
    load generator does not, nor do services that are not the web kind's tiers (an OrangeFS
    docroot's servers, the other kinds' containers)."""
    files = ["docker-compose.yml", "compose/app-db.yml", "compose/web-servers.yml",
             "compose/pvfs.yml", "compose/docroot-pvfs.yml", "compose/fs.yml",
             "compose/net.yml"]
    env = {**os.environ, "SERVERS_CGROUP": "/tierbench-test-servers", "TIERBENCH_TAG": "t"}
    config = compose.config_of([*(a for f in files for a in ("-f", f)), "--profile", "*"], env)
    parents = {name: spec.get("cgroup_parent") for name, spec in config["services"].items()}
    assert {s for s, p in parents.items() if p == "/tierbench-test-servers"} == {
        "web", "web2", "web3", "proxy", "app", "db"}
    assert not parents["loadgen"]
    # with a platform of the web and application tiers, they alone start under it
    env["WEBAPP_CGROUP"] = "/tierbench-test-webapp"
    config = compose.config_of([*(a for f in files for a in ("-f", f)), "--profile", "*"], env)
    parents = {name: spec.get("cgroup_parent") for name, spec in config["services"].items()}
    assert {s for s, p in parents.items() if p == "/tierbench-test-webapp"} == {
        "web", "web2", "web3", "app"}
    assert {s for s, p in parents.items() if p == "/tierbench-test-servers"} == {"proxy", "db"}
