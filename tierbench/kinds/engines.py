"""The load engines: Locust (users, think time, open loop, processes) and wrk (native, high rate),
both replaying the same trace files inside the loadgen container and giving the same LoadResult."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from tierbench.config.errors import TierbenchError
from tierbench.config.files import ROOT, results_root
from tierbench.kinds import webmetrics as metrics
from tierbench.placement.compose import TAG, Container, docker_cmd, parse_cpuset
from workloads import target as target_guard

LOCUSTFILE = "/app/workloads/locust/trace_replay.py"
WRK_SCRIPT = "/app/workloads/wrk/replay.lua"
TARGET = "http://proxy"
ENGINES = ("locust", "wrk")
THINK_KINDS = ("fixed", "exponential")
OWN_HOSTS, OWN_NETWORK = target_guard.OWN_HOSTS, target_guard.OWN_NETWORK
LATE_MS = 10.0  # open loop: a request that left more than this after its schedule is late


class LoadgenError(TierbenchError):
    """The load generator did not produce a usable run, or was asked for something it refuses."""


@dataclass
class LoadSpec:
    """How to load the stack for one point (from the experiment)."""

    engine: str
    users: int
    warmup_s: float
    measure_s: float
    processes: int = 1
    think: dict | None = None
    rate: float | None = None
    target: str = TARGET
    allow_foreign_target: bool = False
    workers: int = 0  # Locust worker containers on this host (each runs `processes` processes)
    remote_workers: int = 0  # Locust worker processes on other nodes, started by their users
    worker_wait_s: float = 60.0  # how long the master waits for every worker to connect
    master: str = "loadgen"  # where workers reach the master: its service name, or its node
    own: tuple[str, ...] = ()  # the testbed's own addresses beyond 198.18.0.0/15 (a cluster's)
    # brings the files an engine run wrote back from the loadgen's node (a cluster placement's
    # pull; on one host the results folder is mounted and there is nothing to fetch)
    fetch: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    # A request-count run (000 §5.2.1, 004 §3.2): after the warm-up every client sends the first
    # N requests of its sequence and stops; the window runs until the last client has finished
    # and measure_s is only its time limit. None: a timed window of measure_s.
    requests_per_client: int | None = None
    dynamic: bool = False  # the trace has dynamic requests: wrk counts their answers by kind


@dataclass
class LoadResult:
    """What one load run measured, in the same form for every engine."""

    engine: str
    started: float
    window: tuple[float, float]
    requests: metrics.RequestLog | None
    aggregate: dict | None
    allowance_cores: float
    extra: dict = field(default_factory=dict)


def check_target(target: str, allow_foreign: bool, own: tuple[str, ...] = ()) -> None:
    """Refuse a target that is not one of the testbed's own services, unless explicitly allowed."""
    why = target_guard.refusal(target, allow_foreign, own)
    if why:
        raise LoadgenError(why)


def check_spec(spec: LoadSpec) -> None:
    """Refuse a LoadSpec an engine cannot honour, with one sentence naming the setting."""
    if spec.engine not in ENGINES:
        raise LoadgenError(f"engine {spec.engine!r} is unknown (expected locust or wrk)")
    if spec.users < 1 or spec.processes < 1:
        raise LoadgenError(f"users and processes must be >= 1, got {spec.users} and "
                           f"{spec.processes}")
    if spec.workers < 0 or spec.remote_workers < 0:
        raise LoadgenError(f"workers and remote_workers must be >= 0, got {spec.workers} and "
                           f"{spec.remote_workers}")
    if spec.engine == "wrk" and (spec.workers or spec.remote_workers):
        raise LoadgenError("workers and remote_workers need engine: locust (wrk runs in the "
                           "loadgen container only)")
    if spec.measure_s <= 0 or spec.warmup_s < 0:
        raise LoadgenError("measure_s must be > 0 and warmup_s >= 0")
    if spec.engine == "wrk" and (spec.think or spec.rate):
        raise LoadgenError("think time and open-loop rate need engine: locust "
                           "(wrk replays closed loop only)")
    if spec.think is not None:
        if spec.think.get("kind") not in THINK_KINDS or float(spec.think.get("mean_ms", -1)) < 0:
            raise LoadgenError(f"think must be {{kind: fixed|exponential, mean_ms: >= 0}}, "
                               f"got {spec.think!r}")
    if spec.rate is not None and spec.rate <= 0:
        raise LoadgenError(f"rate must be > 0 requests/s, got {spec.rate!r}")
    if spec.requests_per_client is not None:
        if spec.requests_per_client < 1:
            raise LoadgenError(f"requests_per_client must be >= 1, got "
                               f"{spec.requests_per_client!r}")
        if spec.rate:
            raise LoadgenError("requests_per_client needs closed-loop clients: an open-loop run "
                               "(rate) sends at a fixed rate for a fixed time")
    check_target(spec.target, spec.allow_foreign_target, spec.own)


def container_path(path: Path) -> str:
    """The path under /results that the loadgen container sees for a host results path."""
    return "/results/" + str(path.resolve().relative_to(results_root()))


def _user() -> str:
    """The user an engine runs as in the container: the invoking user, so results are theirs."""
    return f"{os.getuid()}:{os.getgid()}"


def cpuset_cores(loadgen: Container) -> int:
    """Cores in the loadgen container's cpuset (all of the host's when it has none)."""
    try:
        return len(parse_cpuset(loadgen.cpuset)) if loadgen.cpuset else (os.cpu_count() or 1)
    except ValueError:
        return os.cpu_count() or 1


def wrk_threads(users: int, processes: int) -> int:
    """wrk threads: the largest count <= processes that divides the connections evenly."""
    return max(t for t in range(1, min(users, processes) + 1) if users % t == 0)


def run(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path,
        workers: list[Container] | None = None) -> LoadResult:
    """Load the stack as spec says; raw engine output goes into point_dir. `workers` are the
    Locust worker containers on this host (spec.workers of them) when the spec asks for any."""
    check_spec(spec)
    if spec.engine == "wrk":
        return _run_wrk(spec, loadgen, point_dir, trace)
    if spec.workers or spec.remote_workers:
        return _run_locust_distributed(spec, loadgen, workers or [], point_dir, trace)
    return _run_locust(spec, loadgen, point_dir, trace)


def _exec_cmd(argv: list[str], env: dict[str, str], container: Container) -> list[str]:
    cmd = [*docker_cmd(container), "exec"]
    for key, value in env.items():
        cmd += ["-e", f"{key}={value}"]
    return cmd + ["-u", _user(), container.id, *argv]


def exec_engine(argv: list[str], env: dict[str, str], loadgen: Container, log_path: Path,
          timeout: float, what: str, also: list[Container] = (),
          fetch: Callable[[], None] | None = None) -> int:
    """docker exec argv in the loadgen container, output to log_path; stops it on any exit
    (and any engine in the `also` containers); then ``fetch`` brings back what it wrote."""
    code = _exec_engine(argv, env, loadgen, log_path, timeout, what, also)
    if fetch is not None:
        fetch()
    return code


def _exec_engine(argv: list[str], env: dict[str, str], loadgen: Container, log_path: Path,
                 timeout: float, what: str, also: list[Container] = ()) -> int:
    with log_path.open("w") as log:
        # Own session: a Ctrl-C reaches tierbench, which stops the engine itself (see stop()).
        proc = subprocess.Popen(_exec_cmd(argv, env, loadgen), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for c in (loadgen, *also):
                stop(c)
            proc.kill()
            raise LoadgenError(f"{what} did not finish within {timeout:.0f} s; "
                               f"see {log_path}") from None
        except BaseException:
            for c in (loadgen, *also):
                stop(c)
            proc.kill()
            raise


def _tail(path: Path) -> str:
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:])


# --- Locust --------------------------------------------------------------------------------


def locust_argv(spec: LoadSpec, point_dir: Path, duration_s: float) -> list[str]:
    """The locust command line for a spec (headless, CSV statistics every second)."""
    user_class = "OpenLoopUser" if spec.rate else "TraceUser"
    argv = ["locust", "-f", LOCUSTFILE, "--headless", "--host", spec.target,
            "-u", str(spec.users), "-r", str(spec.users), "-t", f"{duration_s:g}s",
            "--stop-timeout", "5", "--only-summary", "--exit-code-on-error", "0",
            "--csv", container_path(point_dir / "locust"), "--csv-full-history"]
    if spec.processes > 1:
        argv += ["--processes", str(spec.processes)]
    return argv + [user_class]


def _run_locust(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path) -> LoadResult:
    request_log = point_dir / "requests.csv"
    env = {"TRACE": container_path(trace), "REQUEST_LOG": container_path(request_log),
           "USERS": str(spec.users), "PROCESSES": str(spec.processes), "PYTHONPATH": "/app"}
    if spec.think:
        env.update({"THINK_KIND": spec.think["kind"], "THINK_MS": str(spec.think["mean_ms"])})
    if spec.rate:
        env["RATE"] = str(spec.rate)
    if spec.allow_foreign_target:
        env["ALLOW_FOREIGN_TARGET"] = "1"  # --processes workers check the target themselves
    env.update(count_env(spec, point_dir))
    duration = spec.warmup_s + spec.measure_s
    log = point_dir / "locust.log"
    started = time.time()
    code = exec_engine(locust_argv(spec, point_dir, duration), env, loadgen, log,
                       duration + 60, "Locust", fetch=spec.fetch)
    requests = metrics.convert_request_logs(point_dir)
    if code != 0 or requests is None:
        raise LoadgenError(f"Locust exited with code {code} and wrote no request log: {_tail(log)}")
    check_clients_finished(spec, point_dir)
    window = locust_window(started, requests, spec)
    extra: dict = {"processes": spec.processes, **count_extra(spec)}
    if spec.think:
        extra["think"] = dict(spec.think)
    if spec.rate:
        extra.update(open_loop_figures(requests, window, spec.rate))
    # One Locust process is one Python interpreter: it can use at most one core.
    allowance = float(min(spec.processes, cpuset_cores(loadgen)))
    return LoadResult("locust", started, window, requests, None, allowance, extra)


# wrk's own request count and the replay's per-second records may differ by the requests in
# flight when the run stops, and by no more than this share beyond them; past it the point is
# flagged (summary.csv count_mismatch). Locust's TPS comes from its per-request records alone
# (its statistics file counts requests differently: no cross-check).
COUNT_TOLERANCE = 0.02


def count_check(engine_requests: float, records_requests: float, in_flight: int) -> dict:
    """engine_requests, records_requests and count_mismatch for the summary row."""
    apart = abs(engine_requests - records_requests)
    return {"engine_requests": round(engine_requests), "records_requests": round(records_requests),
            "count_mismatch": apart > in_flight + COUNT_TOLERANCE * max(engine_requests,
                                                                          records_requests)}


def locust_window(started: float, requests: metrics.RequestLog | list[metrics.Request],
                  spec: LoadSpec) -> tuple[float, float]:
    """Warm-up then the measured window, counted from the first request sent: time Locust spends
    starting (and its users opening their traces) is neither warm-up nor measured. A
    request-count run's window ends when its last request ended (the last client finished)."""
    first = metrics.first_sent(requests)
    first = started if first is None else first
    begin = max(started, first) + spec.warmup_s
    if spec.requests_per_client:
        return (begin, max(begin, metrics.last_ended(requests) or begin))
    return (begin, begin + spec.measure_s)


FINISHED_FILE = "locust-finished.txt"  # a request-count run: "K M", K of M clients finished


def count_env(spec: LoadSpec, point_dir: Path) -> dict[str, str]:
    """The locustfile's settings of a request-count run ({} for a timed one); an older count
    of finished clients is removed first."""
    (point_dir / FINISHED_FILE).unlink(missing_ok=True)
    if not spec.requests_per_client:
        return {}
    return {"REQUESTS_PER_CLIENT": str(spec.requests_per_client),
            "WARMUP_S": f"{spec.warmup_s:g}"}


def count_extra(spec: LoadSpec) -> dict:
    """What a request-count run adds to the summary row."""
    return {"requests_per_client": spec.requests_per_client} if spec.requests_per_client else {}


def limit_reached(engine: str, spec: LoadSpec, what: str) -> LoadgenError:
    """The one sentence of a request-count run that hit its time limit."""
    return LoadgenError(f"{engine}: {what} within load.measure_s = {spec.measure_s:g} s, the "
                        "time limit of a request-count run: raise load.measure_s or lower "
                        "load.requests_per_client")


MIN_COUNTED_S = 2.0  # a request-count window shorter than this holds too few 1 Hz samples


def check_counted_window(spec: LoadSpec, window: tuple[float, float]) -> None:
    """A request-count window long enough to measure: CPU and bytes come from the samples taken
    every second that bracket it."""
    span = window[1] - window[0]
    if spec.requests_per_client and span < MIN_COUNTED_S:
        raise LoadgenError(f"the clients sent their {spec.requests_per_client:,} requests each in "
                           f"{span:.1f} s, too short to measure (CPU comes from samples taken "
                           f"every second; at least {MIN_COUNTED_S:g} s): raise "
                           "load.requests_per_client")


def check_clients_finished(spec: LoadSpec, point_dir: Path) -> None:
    """A request-count run: every client sent its requests (Locust counts them, FINISHED_FILE)."""
    if not spec.requests_per_client:
        return
    path = point_dir / FINISHED_FILE
    try:
        done, users = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        done, users = 0, spec.users
    if done < users:
        raise limit_reached("Locust", spec, f"{done} of {users} clients had sent their "
                            f"{spec.requests_per_client:,} requests")


MASTER_PORT = 5557
MASTER_HOST = "loadgen"  # the master's Compose service name, as local workers resolve it
FLUSH_TIMEOUT_S = 20.0


def expected_workers(spec: LoadSpec) -> int:
    """Worker processes the master waits for: local containers x processes, plus remote ones."""
    return spec.workers * spec.processes + spec.remote_workers


def master_argv(spec: LoadSpec, point_dir: Path, duration_s: float) -> list[str]:
    """The Locust master's command line: headless, same statistics as a single run, waiting at
    most worker_wait_s for every expected worker process. Where workers reach it at an address
    (a cluster node's data-plane address), it listens only there: its protocol admits any
    worker that connects."""
    argv = locust_argv(replace(spec, processes=1), point_dir, duration_s)
    user_class = argv.pop()
    try:
        bind = ["--master-bind-host", str(ipaddress.ip_address(spec.master))]
    except ValueError:  # a service name: on one host, in the loadgen container's own networks
        bind = []
    return argv + ["--master", *bind, "--master-bind-port", str(MASTER_PORT),
                   "--expect-workers", str(expected_workers(spec)),
                   "--expect-workers-max-wait", f"{spec.worker_wait_s:g}", user_class]


def worker_argv(master: str, processes: int = 1, port: int = MASTER_PORT) -> list[str]:
    """A Locust worker's command line: trace, settings and user class come from the master."""
    argv = ["locust", "-f", LOCUSTFILE, "--worker", "--master-host", master,
            "--master-port", str(port)]
    if processes > 1:
        argv += ["--processes", str(processes)]
    return argv


def remote_worker_cmd(master: str, *, processes: int = 1, port: int = MASTER_PORT,
                      cpus: str | None = None, network: str = "host",
                      allow_foreign_target: bool = False, image: str | None = None,
                      workloads: Path | None = None) -> list[str]:
    """`docker run` of Locust workers on another node, connecting to the master at
    master:port; same image and hardening as the stack's loadgen service."""
    cmd = ["docker", "run", "--rm", "--init", "--cap-drop", "ALL", "--security-opt",
           "no-new-privileges:true", "--network", network,
           "-v", f"{workloads or ROOT / 'workloads'}:/app/workloads:ro", "-e", "PYTHONPATH=/app"]
    if cpus:
        cmd += ["--cpuset-cpus", cpus]
    if allow_foreign_target:
        cmd += ["-e", "ALLOW_FOREIGN_TARGET=1"]
    return cmd + [image or f"tierbench-loadgen:{TAG}", *worker_argv(master, processes, port)]


def workers_allowance(spec: LoadSpec, workers: list[Container]) -> float:
    """Cores the local worker processes can use: one per process, at most the cores of the
    worker containers' cpusets together. The master (one coordinating process) gets no
    allowance of its own: its CPU counts towards the generator's, its core does not."""
    cores: set[int] = set()
    for w in workers:
        try:
            cores.update(parse_cpuset(w.cpuset) if w.cpuset else range(os.cpu_count() or 1))
        except ValueError:
            cores.update(range(os.cpu_count() or 1))
    return float(min(len(workers) * spec.processes, len(cores)))


def connected_workers(log: Path) -> int:
    """How many workers the master's log says had connected (0 when it says nothing)."""
    found = re.findall(r"(\d+) workers connected", log.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def _run_locust_distributed(spec: LoadSpec, loadgen: Container, workers: list[Container],
                            point_dir: Path, trace: Path) -> LoadResult:
    if len(workers) != spec.workers:
        raise LoadgenError(f"load.workers is {spec.workers} but {len(workers)} worker "
                           "container(s) are running: the stack was not brought up for it")
    env = {"TRACE": container_path(trace), "REQUEST_LOG": container_path(point_dir / "requests.csv"),
           "USERS": str(spec.users), "PYTHONPATH": "/app",
           "FLUSH_TIMEOUT_S": f"{FLUSH_TIMEOUT_S:g}"}
    if spec.think:
        env.update({"THINK_KIND": spec.think["kind"], "THINK_MS": str(spec.think["mean_ms"])})
    if spec.rate:
        env["RATE"] = str(spec.rate)
    if spec.remote_workers or spec.master != MASTER_HOST:
        # workers on other nodes (remote ones, or a cluster's loadgen_workers nodes, which reach
        # the master at its node) cannot open the trace file
        env["SHIP_TRACE"] = "1"
    env.update(count_env(spec, point_dir))
    worker_env = {"PYTHONPATH": "/app"}
    if spec.own:
        worker_env["OWN_ADDRESSES"] = ",".join(spec.own)
    if spec.allow_foreign_target:
        env["ALLOW_FOREIGN_TARGET"] = worker_env["ALLOW_FOREIGN_TARGET"] = "1"
    # One second more than warm-up + measure: the window ends before the master stops the users.
    duration = spec.warmup_s + spec.measure_s + 1
    procs = []
    try:
        for n, w in enumerate(workers, 1):
            log = (point_dir / f"locust-worker-{n}.log").open("w")
            procs.append(subprocess.Popen(
                _exec_cmd(worker_argv(spec.master, spec.processes), worker_env, w),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
        log = point_dir / "locust.log"
        code = exec_engine(master_argv(spec, point_dir, duration), env, loadgen, log,
                     spec.worker_wait_s + duration + FLUSH_TIMEOUT_S + 60, "Locust master",
                     also=workers, fetch=spec.fetch)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if any(p.poll() is None for p in procs):
            for w in workers:
                stop(w)
        for p in procs:
            if p.poll() is None:
                p.kill()
    started_file = point_dir / "locust-start.txt"
    if not started_file.exists():
        want = expected_workers(spec)
        raise LoadgenError(f"Locust master: {connected_workers(log)} of {want} worker processes "
                           f"connected within {spec.worker_wait_s:g} s ({spec.workers} local "
                           f"container(s) x {spec.processes}, {spec.remote_workers} remote); "
                           f"see {log}")
    refused = re.search(r"worker \d+ refused the target: (.*)", log.read_text(errors="replace"))
    if refused:
        raise LoadgenError(f"a Locust worker refused the target: {refused.group(1)}")
    logs = metrics.convert_request_logs(point_dir)
    if code != 0 or logs is None:
        raise LoadgenError(f"Locust master exited with code {code} and wrote no request log: "
                           f"{_tail(log)}")
    check_clients_finished(spec, point_dir)
    started = float(started_file.read_text())
    if spec.requests_per_client:  # each worker counts its warm-up from its own first request
        window = locust_window(started, logs, spec)
    else:
        begin = started + spec.warmup_s
        window = (begin, begin + spec.measure_s)
    extra: dict = {"processes": spec.processes, "workers": spec.workers,
                   "remote_workers": spec.remote_workers,
                   "worker_logs": workers_logged(logs), **count_extra(spec)}
    if spec.remote_workers:
        extra["generator_cpu_scope"] = ("local containers only: remote workers on other nodes "
                                        "are not sampled")
    if spec.think:
        extra["think"] = dict(spec.think)
    if spec.rate:
        extra.update(open_loop_figures(logs, window, spec.rate))
    allowance = workers_allowance(spec, workers) if workers else 1.0
    return LoadResult("locust", started, window, logs, None, allowance, extra)


def workers_logged(requests: metrics.RequestLog) -> int:
    """How many workers' records the point's request log holds."""
    found: set[int] = set()
    for batch in requests.batches(("worker",)):
        found.update(batch.column("worker").unique().to_pylist())
    return len(found - {-1})


def open_loop_figures(requests: metrics.RequestLog, window: tuple[float, float],
                      rate: float) -> dict:
    """Open loop: achieved against target rate over the window, and requests sent late."""
    ok, late = metrics.open_loop_counts(requests, window, LATE_MS)
    span = window[1] - window[0]
    return {"target_rate": rate, "achieved_rate": ok / span if span > 0 else 0.0,
            "late_requests": late, "late_threshold_ms": LATE_MS}


def wrk_url(target: str) -> str:
    """wrk needs an explicit port: http://proxy -> http://proxy:80/."""
    parts = urlsplit(target)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{parts.scheme}://{host}:{port}/"


def wrk_argv(spec: LoadSpec, duration_s: int, script: bool = True) -> list[str]:
    """The wrk command line: connections = users, threads as wrk_threads(), latency printed."""
    threads = wrk_threads(spec.users, spec.processes)
    argv = ["wrk", "-t", str(threads), "-c", str(spec.users), "-d", f"{duration_s}s",
            "--timeout", "10s", "--latency"]
    if script:
        argv += ["-s", WRK_SCRIPT]
    return argv + [wrk_url(spec.target)]


def _wrk_once(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path, name: str,
              duration_s: int, per_client: int | None = None) -> dict:
    """One wrk run (with per_client, a request-count run that ends when every client has sent
    that many requests and had them answered, duration_s being its limit); returns the JSON
    summary the replay script wrote (wrk-NAME.json)."""
    out = point_dir / f"wrk-{name}.json"
    env = {"TRACE": container_path(trace), "CONNECTIONS": str(spec.users),
           "THREADS": str(wrk_threads(spec.users, spec.processes)), "WRK_OUT": container_path(out)}
    if per_client:
        env["REQUESTS_PER_CLIENT"] = str(per_client)
    if spec.dynamic:
        env["DYNAMIC"] = "1"
    log = point_dir / f"wrk-{name}.txt"
    code = exec_engine(wrk_argv(spec, duration_s), env, loadgen, log, duration_s + 60, "wrk",
                       fetch=spec.fetch)
    if code != 0 or not out.exists():
        raise LoadgenError(f"wrk ({name}) exited with code {code} and no summary: {_tail(log)}")
    return json.loads(out.read_text())


def requests_in(per_second: list[dict], window: tuple[float, float],
                active: tuple[float, float]) -> float:
    """Requests the replay counted per wall-clock second that fall inside the window. A
    second's requests are spread over the part of it in which the load ran (`active`: from the
    first thread's start to the end of the run), so that the seconds the run starts and ends in
    are not counted short."""
    lo, hi = window
    total = 0.0
    for p in per_second:
        a, b = max(p["t"], active[0]), min(p["t"] + 1, active[1])
        if b <= a:  # the load ran for no measurable part of this second
            total += p["requests"] if lo <= p["t"] + 0.5 < hi else 0
            continue
        total += p["requests"] * max(0.0, min(b, hi) - max(a, lo)) / (b - a)
    return total


def served_between(result: LoadResult, lo: float, hi: float) -> float:
    """Successful requests that completed in (lo, hi], e.g. between the samples bracketing the
    window: from the request records (Locust), or from the replay's per-second counts (wrk),
    each second's spread over the part of it the load ran in, less the failed share."""
    if result.requests is not None:
        return float(sum(int(((a["end_s"] > lo) & (a["end_s"] <= hi) & (a["status"] >= 200)
                              & (a["status"] < 400)).sum())
                         for a in result.requests.arrays(("end_s", "status"))))
    agg = result.aggregate or {}
    counted = requests_in(agg.get("per_second", []), (lo, hi), agg.get("active", (lo, hi)))
    return counted * agg.get("ok_share", 1.0)


def wrk_uncorrected(histogram: list[list[int]], duration_us: int, requests: int,
                    connections: int) -> dict[int, int] | None:
    """wrk's latency histogram ({microseconds: count}) without its coordinated-omission
    correction, or None when the histogram does not invert to the answers wrk counted.

    After its run wrk adds, for every recorded latency v of at least 2e (e = the run's
    microseconds / (answers / connections), integer division as in its C), one synthetic sample
    at each of v - e, v - 2e, ... while above e (wrk's stats_correct). So a recorded value v > e
    holds its own count plus the counts of v + e, v + 2e, ...: taken from the top down, each
    value's own count is what is left after those above it in steps of e."""
    if not histogram or connections <= 0 or requests // connections <= 0:
        return None
    e = duration_us // (requests // connections)
    corrected = {int(v): int(c) for v, c in histogram}
    own: dict[int, int] = {}
    chain: dict[int, int] = {}  # v -> own counts of v, v + e, v + 2e, ...
    for v in sorted(corrected, reverse=True):
        above = chain.get(v + e, 0)
        own[v] = corrected[v] - (above if v > e else 0)
        chain[v] = own[v] + above
    total = sum(own.values())
    if any(c < 0 for c in own.values()) or not 0 < total <= requests:
        return None
    return {v: c for v, c in own.items() if c}


def latency_of(histogram: dict[int, int]) -> dict:
    """min, max, mean, stdev and percentiles (ms) of a {microseconds: count} histogram, each
    percentile the value at rank round(p / 100 * n + 0.5) as wrk computes it (C's round)."""
    values = sorted(histogram)
    n = sum(histogram.values())
    mean = sum(v * c for v, c in histogram.items()) / n
    var = sum(c * (v - mean) ** 2 for v, c in histogram.items()) / max(1, n - 1)
    pct = {}
    for p in (50, 75, 90, 99, 99.9, 99.99):
        rank, seen = math.floor(p / 100 * n + 0.5 + 0.5), 0  # C's round(), half up
        for v in values:
            seen += histogram[v]
            if seen >= rank:
                break
        pct[str(p) if p != int(p) else str(int(p))] = v / 1000
    return {"min": values[0] / 1000, "max": values[-1] / 1000, "mean": mean / 1000,
            "stdev": math.sqrt(var) / 1000, "percentiles": pct}


def aggregate_of(summary: dict, connections: int = 0) -> dict:
    """The LoadResult aggregate of a measured wrk run: counts over exactly its measured window.

    wrk's clock starts when its last thread has read the trace; earlier threads are already
    sending. The window runs from there for wrk's duration, or in a request-count run until the
    last thread's clients had all their requests answered (`finished_last`). When the threads
    started apart (more than 1 % of the window), the requests, errors and bytes are those the
    replay counted inside the window (per second, prorated); wrk's own count and latency
    histogram also cover the earlier requests, which the count check then flags."""
    errors = summary["errors"]
    failed = sum(errors.values())
    last = max(summary["started"], summary.get("started_last") or summary["started"])
    apart = last - summary["started"]
    end = summary["finished_last"] if summary.get("requests_per_client") else \
        last + summary["duration_s"]
    window = (last, end)
    in_window = requests_in(summary["per_second"], window, (summary["started"], window[1]))
    counted = summary["requests"] - errors["status"]
    share = in_window / summary["requests"] if summary["requests"] else 0.0
    late = apart > 0.01 * (end - last)
    own = wrk_uncorrected(summary.get("histogram_us") or [], summary.get("duration_us", 0),
                          summary["requests"], connections)
    if own is not None:
        latency = {**latency_of(own), "uncorrected": True,
                   "source": "wrk's histogram without its coordinated-"
                   "omission correction", "wrk_corrected": summary["latency_ms"]}
    else:
        latency = {**summary["latency_ms"], "uncorrected": False,
                   "source": "wrk's own, corrected for coordinated "
                   "omission (its histogram was not available or did not invert)"}
    return {
        "window": window,
        "active": (summary["started"], window[1]),
        "ok_share": 1 - errors["status"] / summary["requests"] if summary["requests"] else 0.0,
        "threads_apart_s": round(apart, 3) if late else 0.0,
        "counts": count_check(counted, in_window * (1 - errors["status"] / summary["requests"])
                              if summary["requests"] else 0.0, connections),
        "requests": round(in_window * (1 - errors["status"] / summary["requests"]))
        if late and summary["requests"] else counted,
        "errors": round(failed * share) if late else failed,
        "bytes": round(summary["bytes"] * share) if late else summary["bytes"],
        "p50_ms": latency["percentiles"]["50"],
        "p99_ms": latency["percentiles"]["99"],
        "latency_ms": latency,
        "error_kinds": errors,
        "per_second": summary["per_second"],
    }


def _run_wrk(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path) -> LoadResult:
    # Warm-up and measurement are two wrk runs: the second's counts and latency histogram cover
    # exactly the measured window, and no per-request Lua bookkeeping slows the replay.
    # A request-count run warms up the same way (a timed run), then its measured run replays
    # every client's sequence from its start until each has sent its requests.
    started = time.time()
    warm: dict = {}
    if spec.warmup_s > 0:
        warm = _wrk_once(spec, loadgen, point_dir, trace, "warmup",
                         max(1, math.ceil(spec.warmup_s)))
    summary = _wrk_once(spec, loadgen, point_dir, trace, "measure",
                        max(1, math.ceil(spec.measure_s)), spec.requests_per_client)
    threads = wrk_threads(spec.users, spec.processes)
    if spec.requests_per_client and summary.get("threads_finished", 0) < threads:
        want = spec.requests_per_client * spec.users
        raise limit_reached("wrk", spec, f"{threads - summary.get('threads_finished', 0)} of "
                            f"{threads} threads had not had their clients' "
                            f"{spec.requests_per_client:,} requests each answered "
                            f"({summary.get('sent', 0):,} of {want:,} sent)")
    agg = aggregate_of(summary, spec.users)
    allowance = float(min(threads, cpuset_cores(loadgen)))
    extra = {"threads": threads, "connections": spec.users, "wrk_duration_s": summary["duration_s"],
             **agg["counts"], **count_extra(spec)}
    if agg["threads_apart_s"] > 0:
        extra["threads_apart_s"] = agg["threads_apart_s"]
    # Dynamic requests answered in the measured run, and write requests answered in both runs
    # (the rows they inserted are counted after the point: the write check).
    extra["dynamic_ok"] = summary.get("dynamic_ok", 0)
    extra["writes_ok"] = summary.get("writes_ok", 0) + warm.get("writes_ok", 0)
    extra["runs"] = 2 if warm else 1
    return LoadResult("wrk", started, agg["window"], None, agg, allowance, extra)


def stop(loadgen: Container, wait_s: float = 15) -> None:
    """Stop any Locust or wrk run in the loadgen container and wait until it has exited."""
    patterns = ("bin/locust -f", "wrk -t")

    def running() -> bool:
        for pattern in patterns:
            done = subprocess.run([*docker_cmd(loadgen), "exec", "-u", _user(), loadgen.id,
                                   "pgrep", "-f", pattern], capture_output=True, timeout=30,
                                  check=False)
            if done.returncode == 0:
                return True
        return False

    # Same uid as the run: the container has no CAP_KILL to signal another user's process.
    for pattern in patterns:
        subprocess.run([*docker_cmd(loadgen), "exec", "-u", _user(), loadgen.id, "pkill",
                        "-TERM", "-f", pattern], capture_output=True, timeout=30, check=False)
    deadline = time.monotonic() + wait_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.5)


def version(loadgen: Container) -> str:
    """Locust's version as the image reports it."""
    done = subprocess.run([*docker_cmd(loadgen), "exec", loadgen.id, "locust", "--version"],
                          capture_output=True, text=True, timeout=60, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "unknown"


def wrk_version(loadgen: Container) -> str:
    """wrk's version as the image reports it (first line of `wrk -v`)."""
    done = subprocess.run([*docker_cmd(loadgen), "exec", loadgen.id, "wrk", "-v"],
                          capture_output=True, text=True, timeout=60, check=False)
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text and text[0].startswith("wrk") else "unknown"


# --- results in the runner's schema -----------------------------------------------------------


def summary_row(samples: list[dict], result: LoadResult, *, generator: str,
                bytes_label: str | list[str]) -> dict:
    """The point's summary row (webmetrics.SUMMARY_COLUMNS) for either engine's result.

    With per-request records (Locust) this is metrics.summarize over the result's window. With
    an aggregate (wrk) CPU, host and byte figures come from the samples bracketing the window
    exactly as for Locust, and requests, errors, TPS and latency from the engine's own counts
    over exactly its measured run."""
    start, end = result.window
    if result.requests is not None:
        row = metrics.summarize(samples, result.requests, start=start, end=end,
                                generator=generator, generator_allowance=result.allowance_cores,
                                bytes_label=bytes_label)
    else:
        agg = result.aggregate or {}
        if agg.get("requests", 0) <= 0:
            raise metrics.MetricsError("no successful request completed in the measured window")
        _, last = metrics.window(samples, start, end)
        # One stand-in request inside the window lets summarize() compute the sample-based
        # columns; every request-based column is then replaced by the engine's counts.
        stand_in = [metrics.Request(last["t"], 0.0, agg["bytes"], 200)]
        row = metrics.summarize(samples, stand_in, start=start, end=end, generator=generator,
                                generator_allowance=result.allowance_cores,
                                bytes_label=bytes_label)
        n = agg["requests"]
        # The mean of wrk's histogram without its coordinated-omission correction (aggregate_of).
        # Where that could not be had, wrk's own mean overstates uneven latencies (seen: 331
        # answers in 4.04 s on one connection, wrk's mean 44 ms); a closed loop without think
        # time keeps every connection busy, so connections / TPS bounds it from above.
        conns = result.extra.get("connections")
        latency = agg.get("latency_ms") or {}
        mean = latency["mean"] if latency.get("uncorrected") else \
            1000.0 * conns * (end - start) / n if conns else None
        row.update({"requests": n, "tps": n / (end - start), "p50_ms": agg["p50_ms"],
                    "p99_ms": agg["p99_ms"], "mean_ms": mean,
                    "errors": agg["errors"],
                    # CPU is counted between the bracketing samples, requests over wrk's own
                    # run: normalise as rates so that both cover the same time.
                    "server_cpu_us_per_req": row["cpu_s_servers"] / row["window_s"] * 1e6
                    / (n / (end - start))})
    row["engine"] = result.engine
    row["generator_allowance_cores"] = result.allowance_cores
    for key in ("target_rate", "achieved_rate", "late_requests", "workers", "remote_workers",
                "generator_cpu_scope", "engine_requests", "records_requests", "count_mismatch",
                "threads_apart_s", "requests_per_client"):
        if key in result.extra:
            row[key] = result.extra[key]
    if row.get("client_bound"):
        row["client_bound_advice"] = client_bound_advice(result, row["generator_cpu_pct"])
    return row


def per_second_rows(samples: list[dict], result: LoadResult) -> list[dict]:
    """per_second.csv rows for either engine (wrk: its per-second counts placed by second),
    between the sampler's 1 Hz ticks (its marks left out)."""
    samples = [s for s in samples if not s.get("mark")]
    if result.requests is not None:
        return metrics.per_second(samples, result.requests)
    rows = metrics.per_second(samples, [])
    counts = {int(p["t"]): p["requests"] for p in (result.aggregate or {}).get("per_second", [])}
    prev = samples[0]["t"] if samples else 0.0
    for row in rows:
        # a wrk second [s, s+1) belongs to the sample interval holding its middle
        n = sum(c for s, c in counts.items() if prev < s + 0.5 <= row["t"])
        row["tps"] = n / (row["t"] - prev) if row["t"] > prev else 0.0
        prev = row["t"]
    return rows


def client_bound_advice(result: LoadResult, cpu_pct: float) -> str:
    """What to do about a client-bound point, in one sentence for the report."""
    cores = result.allowance_cores
    if result.engine == "locust":
        return (f"the generator used {cpu_pct:.0f} % of its {cores:g}-core allowance, so this "
                "TPS is Locust's limit, not the servers': raise load.processes (one core each), "
                "add worker containers on more cores (load.workers, WORKER_CPUS) or workers on "
                "other nodes (load.remote_workers), or use engine: wrk for high-rate "
                "closed-loop runs")
    return (f"the generator used {cpu_pct:.0f} % of its {cores:g}-core allowance, so this TPS "
            "is wrk's limit, not the servers': give the loadgen more cores (LOADGEN_CPUS) and "
            "threads (load.processes), or move the generator to another node")
