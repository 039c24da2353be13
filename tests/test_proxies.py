"""stack.proxies without a stack: the overlay of proxy2.. (copies of the stack's resolved proxy
at their own addresses, read with `docker compose config`, which needs no engine), the settings
it is refused with, the plan's topology, each client's proxy (wrk threads, Locust users against
two real in-process HTTP servers), the proxy tier found and summed, the proxies' cache logs
summed, one application server per web server admitting only its web server, and the roles a
cluster runs them on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.kinds.contract import Experiment, PointContext, RunEnds
from tierbench.kinds.web import stack as webstack
from tierbench.kinds.web import roles as web_roles
from tierbench.kinds.web import services, sizes, steps, wrk
from tierbench.kinds.web.load import LoadgenError, LoadSpec, check_spec
from tierbench.kinds.web.settings import StackSettings
from tierbench.measure.sampler import CgroupGroup
from tierbench.placement import access, cluster, local
from tierbench import space
from tierbench.placement.clusterfile import parse_cluster
from tierbench.placement.model import Container
from workloads import filesets, traces

ROOT = Path(__file__).resolve().parent.parent
LOCUST = Path(os.environ.get("LOCUST", ROOT / ".venv" / "bin" / "locust"))


def resolved(*files: str, interpolate: bool = False, **env: str) -> dict:
    argv = ["docker", "compose", *(a for f in files for a in ("-f", str(ROOT / f)
                                                               if not f.startswith("/") else f)),
            "config", *([] if interpolate else ["--no-interpolate"]), "--format", "json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TIERBENCH_TAG": "0.1.0", **env})
    return json.loads(done.stdout)


# --- the overlay -----------------------------------------------------------------------------


@pytest.mark.parametrize("files", [
    ("docker-compose.yml", "compose/web-servers.yml"),
    ("docker-compose.yml", "compose/haproxy.yml"),
    # a docroot on OrangeFS (its services in the profile pfs: DC-hybrid)
    ("docker-compose.yml", "compose/web-servers.yml", "compose/pvfs.yml",
     "compose/docroot-pvfs.yml", "compose/web-servers-pvfs.yml"),
])
def test_each_proxy_is_the_stacks_proxy_at_its_own_addresses(files: tuple[str, ...]) -> None:
    config = resolved(*files)
    proxy = config["services"]["proxy"]
    overlay = services.proxies_overlay(config, 4)
    added = overlay["services"]
    assert sorted(added) == ["loadgen", "proxy2", "proxy3", "proxy4"]
    for k, name in enumerate(("proxy2", "proxy3", "proxy4"), 1):
        copy = added[name]
        # the same service (image, environment: the balancer over every web server, caching,
        # its own tmpfs cache, cpuset and cgroup parent) ...
        for key in ("image", "environment", "tmpfs", "cpuset", "cgroup_parent", "depends_on",
                    "cap_add"):
            assert copy.get(key) == proxy.get(key), (name, key)
        # ... at its own address on each network
        assert copy["networks"] == {
            "front": {"ipv4_address": f"198.18.1.{10 + k}"},
            "back": {"ipv4_address": f"198.18.2.{20 + k}"}}
    assert added["loadgen"] == {"depends_on": {
        n: {"condition": "service_healthy"} for n in ("proxy2", "proxy3", "proxy4")}}
    assert sorted(services.proxies_overlay(config, 2)["services"]) == ["loadgen", "proxy2"]
    if "compose/web-servers.yml" in files:
        env = proxy["environment"]
        assert "WEB_SERVERS=3" in env and "BACKEND3=web3:80" in env
    else:
        assert proxy["image"].startswith("tierbench-haproxy:")


def test_the_written_overlay_resolves_with_the_stack(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path))
    files = [str(ROOT / f) for f in ("docker-compose.yml", "compose/web-servers.yml")]
    path = services.write_proxies_overlay(local.LocalPlacer(), files,
                                          {**os.environ, "TIERBENCH_TAG": "0.1.0"}, 3)
    assert path == tmp_path / "proxies" / "compose.yml"
    done = resolved(*files, str(path), interpolate=True)["services"]
    assert {n for n in done if n.startswith("proxy")} == {"proxy", "proxy2", "proxy3"}
    # the variables are read again at `up`: proxy3's cache switch and tag as proxy's
    assert "PROXY_CACHE" in done["proxy3"]["environment"]
    assert done["proxy3"]["environment"] == done["proxy"]["environment"]
    assert done["proxy3"]["image"] == done["proxy"]["image"] == "tierbench-proxy:0.1.0"
    assert done["proxy3"]["networks"]["front"]["ipv4_address"] == "198.18.1.12"
    assert set(done["loadgen"]["depends_on"]) == {"proxy", "proxy2", "proxy3"}


# --- settings and plan ----------------------------------------------------------------------


def experiment(tmp_path: Path, **keys: Any) -> Experiment:
    body = {"name": "p", "kind": "web", "engine": "wrk", "modes": ["offloads-on"],
            "load": {"users": [1, 64], "measure_s": 3, "warmup_s": 0},
            "traces": [{"name": "single-4k", "kind": "single", "size": 4096}],
            "stack": {"web_servers": 3, "proxies": 4}}
    for key, value in keys.items():
        body[key] = {**body[key], **value} if isinstance(body.get(key), dict) else value
    path = tmp_path / "p.yml"
    path.write_text(json.dumps(body))
    return registry.load_experiment(str(path))


@pytest.mark.parametrize("keys, fragment", [
    ({"stack": {"proxies": 5}}, r"stack\.proxies"),
    ({"stack": {"proxies": 0}}, r"stack\.proxies"),
    ({"target": "http://web"}, r"stack\.proxies: 4 proxies share the load only when the clients"),
    ({"load": {"users": [1, 6]}}, r"load\.users: engine wrk binds each thread to one of the 4 "
                                  r"proxies, so users above 4 must be a multiple of 4, got 6"),
])
def test_proxies_the_load_cannot_use_are_refused_in_one_sentence(tmp_path: Path, keys: dict,
                                                                  fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        experiment(tmp_path, **keys)


def test_locust_users_go_round_any_number_of_proxies(tmp_path: Path) -> None:
    exp = experiment(tmp_path, engine="locust", load={"users": [6]})
    assert exp.settings.stack.proxies == 4


def test_the_plan_shows_the_proxies_and_the_topology(tmp_path: Path) -> None:
    lines = runner.plan_lines(experiment(tmp_path))
    [stack] = [line for line in lines if line.startswith("  -- stack:")]
    assert "web_servers=3 proxies=4 " in stack
    assert stack.endswith("[topology: 4 proxies (each wrk thread bound to one, round robin) -> "
                          "3 web servers]")
    dynamic = "\n".join(runner.plan_lines(registry.load_experiment("dc-dynamic")))
    assert "[topology: 4 proxies (each wrk thread bound to one, round robin) -> 3 web servers " \
           "-> 3 application servers -> 1 database]" in dynamic
    # without the key: no proxies in the stack settings, no topology (plans as before)
    one = runner.plan_lines(experiment(tmp_path, stack={"proxies": 1}))
    assert not any("proxies" in line or "topology" in line for line in one)


def test_the_004_data_center_rows_run_four_proxies() -> None:
    for name in ("dc-alpha-cache", "dc-classes", "dc-classes-large", "dc-cpus", "dc-disk-classes",
                 "dc-dynamic", "dc-hybrid", "dc-static", "dc-worldcup"):
        s = registry.load_experiment(name).settings
        assert (s.stack.web_servers, s.stack.proxies) == (3, 4), name


# --- each client's proxy --------------------------------------------------------------------


TARGETS = ("http://proxy", "http://proxy2", "http://proxy3", "http://proxy4")


@pytest.mark.parametrize("users, processes, proxies, threads", [
    (64, 2, 4, 4), (64, 8, 4, 8), (1, 2, 4, 1), (3, 2, 4, 3), (8, 2, 2, 2), (64, 2, 1, 2),
])
def test_wrk_threads_are_a_multiple_of_the_proxies(users: int, processes: int, proxies: int,
                                                   threads: int) -> None:
    got = wrk.wrk_threads(users, processes, proxies)
    assert got == threads and users % got == 0


def test_each_wrk_thread_is_bound_to_one_proxy_round_robin() -> None:
    spec = LoadSpec("wrk", 64, 0, 3, processes=8, targets=TARGETS)
    assert wrk.thread_targets(spec) == ["proxy:80", "proxy2:80", "proxy3:80", "proxy4:80"] * 2
    # every connection of a thread goes to its thread's proxy: users / proxies each
    assert wrk.wrk_argv(spec, 3)[:5] == ["wrk", "-t", "8", "-c", "64"]
    assert wrk.thread_targets(LoadSpec("wrk", 2, 0, 3, targets=TARGETS)) == \
        ["proxy:80", "proxy2:80"]
    assert wrk.thread_targets(LoadSpec("wrk", 64, 0, 3)) == []  # one proxy: wrk's own URL
    with pytest.raises(LoadgenError, match="users above 4 must be a multiple of 4, got 6"):
        check_spec(LoadSpec("wrk", 6, 0, 3, targets=TARGETS))
    with pytest.raises(LoadgenError, match="refusing to send load to example.org"):
        check_spec(LoadSpec("wrk", 4, 0, 3, targets=(TARGETS[0], "http://example.org")))


def test_the_replay_script_binds_threads_by_thread_targets() -> None:
    script = (ROOT / "workloads" / "wrk" / "replay.lua").read_text()
    setup = script[script.index("function setup(thread)"):script.index("function init(")]
    assert 'os.getenv("THREAD_TARGETS")' in setup
    assert "thread.addr = wrk.lookup(host, port)[1]" in setup
    assert "thread_targets[next_tid + 1]" in setup  # thread t: the t-th entry


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Answer)
        self.paths: list[str] = []
        self.lock = threading.Lock()


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.paths.append(self.path)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "8")
        self.end_headers()
        self.wfile.write(b"x" * 8)

    def log_message(self, *args: object) -> None:
        pass


def test_each_locust_user_is_bound_to_one_proxy_round_robin(tmp_path: Path) -> None:
    servers = [Recorder(), Recorder()]
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        trace = tmp_path / "trace.txt"  # client c replays subset c: /a/.., /b/.., /c/.., /d/..
        traces.write(trace, [f"/{c}/{i}" for c in "abcd" for i in range(5)], "four subsets",
                     subset=5)
        urls = [f"http://127.0.0.1:{srv.server_address[1]}" for srv in servers]
        env = {**os.environ, "TRACE": str(trace), "REQUEST_LOG": str(tmp_path / "requests.csv"),
               "USERS": "4", "PYTHONPATH": str(ROOT), "ALLOW_FOREIGN_TARGET": "1",
               "TARGETS": ",".join(urls)}
        argv = [str(LOCUST), "-f", str(ROOT / "workloads/locust/trace_replay.py"), "--headless",
                "--host", urls[0], "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "2",
                "--only-summary", "--exit-code-on-error", "0", "TraceUser"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90,
                              check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
    first, second = ({p.split("/")[1] for p in srv.paths} for srv in servers)
    # clients 0 and 2 on the first URL, 1 and 3 on the second, each only there
    assert first == {"a", "c"} and second == {"b", "d"}
    assert min(len(srv.paths) for srv in servers) > 20


# --- the proxy tier ---------------------------------------------------------------------------


def box(service: str, pid: int) -> Container:
    return Container(service, f"id-{service}", f"tierbench-{service}-1", pid, "img", "sha", "1")


class FakePlacer(local.LocalPlacer):
    """The stack's containers without Docker: counters and endpoints by name, commands
    answered by `answers` (container name -> stdout)."""

    def __init__(self, services: list[str], answers: dict[str, str] | None = None) -> None:
        super().__init__()
        self.boxes = [box(s, 100 + i) for i, s in enumerate(services)]
        self.answers = answers or {}
        self.ran: list[tuple[str, list[str]]] = []

    def replicas(self) -> list[Container]:
        return self.boxes

    def counter(self, container: Container) -> Any:
        return container.name

    def endpoints(self, label: str, container: Container) -> list:
        return []

    def exec(self, container: Container, argv: list[str], **_: Any) -> Any:
        self.ran.append((container.name, argv))
        return subprocess.CompletedProcess(argv, 0, self.answers.get(container.name, ""), "")


def test_the_proxy_tier_is_its_proxies_counted_as_one() -> None:
    where = FakePlacer(["loadgen", "proxy", "proxy2", "proxy3", "proxy4", "web", "web2", "web3",
                        "app", "app2", "app3", "db"])
    dep = webstack.discover(where, None, StackSettings({"proxies": 4, "web_servers": 3,
                                                        "db_rows": 10}), 0)
    for tier, names in (("proxy", services.PROXY_SERVICES), ("web", services.WEB_SERVICES),
                        ("app", services.APP_SERVICES)):
        counter = dep.counters[tier]
        assert isinstance(counter, CgroupGroup)
        # the tier's CPU is the sum of its servers', each one in the samples' parts
        assert counter.parts == {n: f"tierbench-{n}-1" for n in names}
        assert [c.name for c in dep.tiers[tier].containers] == [f"tierbench-{n}-1" for n in names]
    assert dep.counters["db"] == "tierbench-db-1"
    dep.probes.clear()  # the database probe's psql session is never opened here


def test_the_proxies_cache_hits_are_summed(tmp_path: Path) -> None:
    where = FakePlacer(["loadgen", "proxy", "proxy2", "web"],
                       {"tierbench-proxy-1": "30 10\n", "tierbench-proxy2-1": "20 40\n"})
    dep = webstack.discover(where, None, StackSettings({"proxies": 2}), 0)
    ctx = PointContext.__new__(PointContext)
    ctx.deployment = dep  # type: ignore[misc]
    step = steps.ProxyCache()
    step.before(ctx)  # type: ignore[arg-type]
    emptied = [name for name, argv in where.ran if "cache.log" in argv[-1]]
    assert emptied == ["tierbench-proxy-1", "tierbench-proxy2-1"]  # each its own cache
    row = step.after(ctx, steps.Measured(None, {"t": 10.0}, {"t": 20.0}, []))  # type: ignore
    assert row == {"proxy_cache_hits": 50, "proxy_cache_misses": 50, "proxy_hit_ratio": 0.5}


def test_a_stopped_extra_proxy_ends_the_run() -> None:
    where = FakePlacer(["loadgen", "proxy", "proxy2", "web"])
    dep = webstack.discover(where, None, StackSettings({"proxies": 3}), 0)
    with pytest.raises(RunEnds, match="the proxy3 tier stopped during p001"):
        webstack.after_point(SimpleNamespace(id="p001"), {}, dep)  # type: ignore[arg-type]


# --- one application server per web server ---------------------------------------------------


def test_each_web_server_has_its_application_server_which_admits_only_it() -> None:
    files = ("docker-compose.yml", "compose/web-servers.yml", "compose/app-db.yml",
             "compose/web-servers-app.yml")
    config = resolved(*files, interpolate=True)
    svc = config["services"]
    assert {n: svc[n]["environment"]["APP_BACKEND"] for n in ("web2", "web3")} == \
        {"web2": "app2:9000", "web3": "app3:9000"}
    assert "APP_BACKEND" in svc["web"]["environment"] and \
        svc["web"]["environment"]["APP_BACKEND"] == "app:9000"
    for name, address in (("app", "198.18.2.30"), ("app2", "198.18.2.31"),
                          ("app3", "198.18.2.32")):
        assert svc[name]["environment"]["APP_LISTEN"] == address
        assert svc[name]["networks"]["back"]["ipv4_address"] == address
        assert svc[name]["image"] == svc["app"]["image"]
    assert access.host_admitted(config, web_roles.ADMISSIONS) == {
        "APP_CLIENTS": ["198.18.2.10"], "APP2_CLIENTS": ["198.18.2.11"],
        "APP3_CLIENTS": ["198.18.2.12"],
        "DB_CLIENTS": ["198.18.2.30", "198.18.2.31", "198.18.2.32", "198.18.2.41"]}
    # each application server reads its own list at `up`
    up = resolved(*files, interpolate=True,
                  **access.env(access.host_admitted(config, web_roles.ADMISSIONS)))["services"]
    assert [up[n]["environment"]["APP_CLIENTS"] for n in ("app", "app2", "app3")] == \
        ["198.18.2.10", "198.18.2.11", "198.18.2.12"]
    assert up["db"]["environment"]["DB_CLIENTS"] == "198.18.2.30,198.18.2.31,198.18.2.32,198.18.2.41"


# --- the proxies' caches against memory ------------------------------------------------------


def cache_needs(exp: Experiment) -> list[space.Need]:
    """What the web kind declares for its proxies' caches (the tmpfs of PROXY_CACHE_SIZE)."""
    return [n for n in registry.kind("web").needs(exp, runner.points_of(exp))
            if "PROXY_CACHE_SIZE" in n.what + n.where]


def test_each_caching_proxys_tmpfs_is_counted_in_memory(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every proxy that caches has its own tmpfs of PROXY_CACHE_SIZE, which may fill: 4 of
    16 MiB are 64 MiB of the proxy nodes' memory; the cache turned on by a mode counts too;
    HAProxy and a proxy that does not cache have none."""
    monkeypatch.setenv("PROXY_CACHE_SIZE", "16m")
    [memory] = [n for n in cache_needs(experiment(tmp_path, stack={"proxy_cache": True}))
                if n.medium == "memory"]
    assert (memory.bytes, memory.role, memory.where) == (4 * (16 << 20), "proxy", space.MEMORY)
    assert "4 proxies" in memory.what and "lower PROXY_CACHE_SIZE" in memory.setting
    by_mode = experiment(tmp_path, modes=["offloads-on", "proxy-cache-on"])
    assert [n.bytes for n in cache_needs(by_mode) if n.medium == "memory"] == [4 * (16 << 20)]
    assert cache_needs(experiment(tmp_path)) == []
    assert cache_needs(experiment(tmp_path, stack={"proxy_cache": True, "proxy": "haproxy",
                                                   "web_servers": 1})) == []


def test_the_room_the_cache_guard_leaves_must_hold_the_responses_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard stops storing at 70 % of the tmpfs; the other 30 % must hold what is being
    stored then, one response per connection to a proxy: the point with the most connections
    per proxy (64 users over 4 proxies) and the largest file of its trace (each response and
    its header file in whole pages); a file above CacheMaxFileSize is not stored."""
    monkeypatch.setenv("PROXY_CACHE_SIZE", "16m")
    big = {"name": "big", "kind": "zipf", "alpha": 0.9, "requests": 100,
           "fileset": {"kind": "uniform-log", "files": 50, "min_size": 1024,
                       "max_size": 3 << 20}}
    exp = experiment(tmp_path, stack={"proxy_cache": True},
                     traces=[{"name": "small", "kind": "single", "size": 4096}, big])
    largest = max(size for fs in traces.filesets_of(big) for _, size in filesets.files(fs))
    [flight] = [n for n in cache_needs(exp) if not n.medium]
    per_response = -(-largest // 4096) * 4096 + 4096
    assert flight.bytes == 16 * per_response
    assert flight.free == (16 << 20) * 30 // 100
    assert "trace big" in flight.what and "16 connections per proxy" in flight.what
    assert "raise PROXY_CACHE_SIZE" in flight.setting
    [problem] = space.problems([flight])
    assert "PROXY_CACHE_SIZE=16.0 MiB" in problem and "4.8 MiB for it" in problem
    huge = experiment(tmp_path, stack={"proxy_cache": True},
                      traces=[{"name": "huge", "kind": "single", "size": 1 << 30}])
    [flight] = [n for n in cache_needs(huge) if not n.medium]
    assert flight.bytes == 16 * ((64 << 20) + 4096)
    # clients that do not load the proxy store nothing in its cache
    web = experiment(tmp_path, target="http://web",
                     stack={"proxy_cache": True, "proxies": 1, "web_servers": 1})
    assert [n.medium for n in cache_needs(web)] == ["memory"]


def test_the_cache_guards_figures_are_the_images(tmp_path: Path) -> None:
    """The guard's limit and Apache's CacheMaxFileSize live in the proxy image, which reads
    them; the control program's copies (kinds/web/sizes.py) must say the same."""
    guard = (ROOT / "images" / "proxy" / "proxy-cache-guard.pl").read_text()
    conf = (ROOT / "images" / "proxy" / "conf" / "tierbench.conf").read_text()
    assert re.search(r"^my \$LIMIT_PCT = (\d+);$", guard, re.M).group(1) == str(
        sizes.CACHE_GUARD_LIMIT_PCT)
    assert re.search(r"^\s*CacheMaxFileSize (\d+)$", conf, re.M).group(1) == str(
        sizes.CACHE_MAX_FILE_BYTES)


# --- on a cluster -----------------------------------------------------------------------------


def test_a_cluster_runs_several_proxies_and_each_web_servers_application_server(
        tmp_path: Path) -> None:
    """stack.proxies and, with dynamic requests, app2 and app3 no longer refused on a cluster
    (tests/test_proxies_cluster.py has their placement, addresses and admissions)."""
    lab = parse_cluster({
        "version": 1,
        "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
                   "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
                  for i in range(1, 4)],
        "roles": {"loadgen": "node1", "proxy": ["node2", "node3"], "web": "node3",
                  "app": "node2", "db": "node1"}}, registry.roles(), "lab.yml")
    exp = experiment(tmp_path)
    exp.placer = cluster.ClusterPlacer(lab)
    assert registry.kind("web").cluster_roles(exp) == ["loadgen", "proxy", "web"]
    dynamic = experiment(tmp_path, traces=[{"name": "dyn", "kind": "single", "size": 4096,
                                            "dynamic": {"share": 1, "query": "point"}}],
                         stack={"db": {"rows": 1000}})
    dynamic.placer = cluster.ClusterPlacer(lab)
    assert registry.kind("web").cluster_roles(dynamic) == ["loadgen", "proxy", "web", "app",
                                                            "db"]
