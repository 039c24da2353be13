"""The Locust engine: users with think time or an open loop at a fixed rate, one or several
processes, and Locust worker containers (or workers on other nodes) under a master; its
per-request records are the point's figures."""

from __future__ import annotations

import ipaddress
import math
import os
import re
import time
from dataclasses import replace
from pathlib import Path

from tierbench.config.files import ROOT
from tierbench.kinds.web import webmetrics
from tierbench.kinds.web.load import (LoadgenError, LoadResult, LoadSpec, check_clients_finished,
                                      container_path, count_env, count_extra, cpuset_cores,
                                      exec_engine, load_s, log_tail, sent_per_client,
                                      start_engine, stop,
                                      warmup_extra, warmup_found)
from tierbench.measure.steady import Steady
from tierbench.placement.model import TAG, Container, parse_cpuset
from tierbench.transport import DidNotFinish

LOCUSTFILE = "/app/workloads/locust/trace_replay.py"
LATE_MS = 10.0  # open loop: a request that left more than this after its schedule is late
# open loop: a point whose successful requests in the window fall below this share of the offered
# ones, less three standard deviations of a Poisson count of that mean (a Poisson arrival process
# offers that many only on average), did not run at the load asked: the generator or the stack
# could not keep up
RATE_SHORT = 0.95


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


def open_loop_env(spec: LoadSpec) -> dict[str, str]:
    """An open loop's rate and arrival process for trace_replay.py ({} for a closed loop)."""
    return {"RATE": str(spec.rate), "ARRIVAL": spec.arrival} if spec.rate else {}


def run(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path) -> LoadResult:
    request_log = point_dir / "requests.csv"
    env = {"TRACE": container_path(trace), "REQUEST_LOG": container_path(request_log),
           "USERS": str(spec.users), "PROCESSES": str(spec.processes), "PYTHONPATH": "/app"}
    if spec.think:
        env.update({"THINK_KIND": spec.think["kind"], "THINK_MS": str(spec.think["mean_ms"])})
    env.update(open_loop_env(spec))
    if spec.allow_foreign_target:
        env["ALLOW_FOREIGN_TARGET"] = "1"  # --processes workers check the target themselves
    if spec.targets:  # several proxies: each user bound to one, by its client number
        env["TARGETS"] = ",".join(spec.targets)
    env.update(count_env(spec, point_dir))
    duration = load_s(spec)
    log = point_dir / "locust.log"
    started = time.time()
    code = exec_engine(spec.where, locust_argv(spec, point_dir, duration), env, loadgen, log,
                       duration + 60, "Locust", fetch=spec.fetch)
    requests = webmetrics.convert_request_logs(point_dir)
    if code != 0 or requests is None:
        raise LoadgenError(f"Locust exited with code {code} and wrote no request log: "
                           f"{log_tail(log)}")
    check_clients_finished(spec, point_dir)
    window, found = locust_window(started, requests, spec)
    extra: dict = {"processes": spec.processes, **count_extra(spec), **warmup_extra(spec, found)}
    sent = sent_per_client(point_dir) if spec.requests_per_client else None
    if sent is not None and sent != spec.requests_per_client:  # raised by the warm-up's rate
        extra.update(requests_per_client=sent, requests_per_client_asked=spec.requests_per_client)
    if spec.think:
        extra["think"] = dict(spec.think)
    if spec.rate:
        extra.update(open_loop_figures(requests, window, spec.rate))
    # One Locust process is one Python interpreter: it can use at most one core.
    allowance = float(min(spec.processes, cpuset_cores(loadgen)))
    return LoadResult("locust", started, window, requests, None, allowance, extra)



def locust_window(started: float, requests: webmetrics.RequestLog | list[webmetrics.Request],
                  spec: LoadSpec, load_started: float | None = None
                  ) -> tuple[tuple[float, float], Steady | None]:
    """Warm-up then the measured window, counted from the first request sent (or from
    ``load_started``, the master's start of a distributed run): time Locust spends starting
    (and its users opening their traces) is neither warm-up nor measured. A request-count
    run's window ends when its last request ended (the last client finished); a timed one's
    warm-up is the fixed one or the one found by steady state (load.warmup_found, over the
    successful requests per second), with the steady state found."""
    if load_started is None:
        first = webmetrics.first_sent(requests)
        load_started = max(started, started if first is None else first)
    if spec.requests_per_client:
        begin = load_started + spec.warmup_s
        return (begin, max(begin, webmetrics.last_ended(requests) or begin)), None
    origin = load_started
    found = warmup_found(spec, lambda n: webmetrics.served_per_second(requests, origin, n))
    begin = load_started + found.warmup_s
    return (begin, begin + spec.measure_s), found



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


def run_distributed(spec: LoadSpec, loadgen: Container, workers: list[Container],
                            point_dir: Path, trace: Path) -> LoadResult:
    if len(workers) != spec.workers:
        raise LoadgenError(f"load.workers is {spec.workers} but {len(workers)} worker "
                           "container(s) are running: the stack was not brought up for it")
    env = {"TRACE": container_path(trace), "REQUEST_LOG": container_path(point_dir / "requests.csv"),
           "USERS": str(spec.users), "PYTHONPATH": "/app",
           "FLUSH_TIMEOUT_S": f"{FLUSH_TIMEOUT_S:g}"}
    if spec.think:
        env.update({"THINK_KIND": spec.think["kind"], "THINK_MS": str(spec.think["mean_ms"])})
    env.update(open_loop_env(spec))
    if spec.targets:  # sent to the workers with the settings (tb_setup)
        env["TARGETS"] = ",".join(spec.targets)
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
    duration = load_s(spec) + 1
    procs = []
    try:
        for n, w in enumerate(workers, 1):
            worker_log = (point_dir / f"locust-worker-{n}.log").open("w")
            procs.append(start_engine(spec.where, worker_argv(spec.master, spec.processes),
                                      worker_env, w, worker_log))
            worker_log.close()
        log = point_dir / "locust.log"
        code = exec_engine(spec.where, master_argv(spec, point_dir, duration), env, loadgen, log,
                     spec.worker_wait_s + duration + FLUSH_TIMEOUT_S + 60, "Locust master",
                     also=workers, fetch=spec.fetch)
        for p in procs:
            try:
                p.wait(timeout=30)
            except DidNotFinish:
                pass
    finally:
        if any(p.poll() is None for p in procs):
            for w in workers:
                stop(spec.where, w)
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
    logs = webmetrics.convert_request_logs(point_dir)
    if code != 0 or logs is None:
        raise LoadgenError(f"Locust master exited with code {code} and wrote no request log: "
                           f"{log_tail(log)}")
    check_clients_finished(spec, point_dir)
    started = float(started_file.read_text())
    # each worker of a request-count run counts its warm-up from its own first request
    window, found = locust_window(started, logs, spec,
                                  None if spec.requests_per_client else started)
    extra: dict = {"processes": spec.processes, "workers": spec.workers,
                   "remote_workers": spec.remote_workers,
                   "worker_logs": workers_logged(logs), **count_extra(spec),
                   **warmup_extra(spec, found)}
    if spec.remote_workers:
        extra["generator_cpu_scope"] = ("local containers only: remote workers on other nodes "
                                        "are not sampled")
    if spec.think:
        extra["think"] = dict(spec.think)
    if spec.rate:
        extra.update(open_loop_figures(logs, window, spec.rate))
    allowance = workers_allowance(spec, workers) if workers else 1.0
    return LoadResult("locust", started, window, logs, None, allowance, extra)


def workers_logged(requests: webmetrics.RequestLog) -> int:
    """How many workers' records the point's request log holds."""
    found: set[int] = set()
    for batch in requests.batches(("worker",)):
        found.update(batch.column("worker").unique().to_pylist())
    return len(found - {-1})


def open_loop_figures(requests: webmetrics.RequestLog, window: tuple[float, float],
                      rate: float) -> dict:
    """Open loop: achieved against target rate over the window, and requests sent late."""
    ok, late = webmetrics.open_loop_counts(requests, window, LATE_MS)
    span = window[1] - window[0]
    achieved = ok / span if span > 0 else 0.0
    return {"target_rate": rate, "achieved_rate": achieved,
            "late_requests": late, "late_threshold_ms": LATE_MS,
            "rate_short": rate_short(ok, rate * span)}


def rate_short(answered: int, offered: float) -> bool:
    """Whether an open loop answered fewer of its `offered` requests (its rate x the window)
    than it should have had it kept up (RATE_SHORT, less a Poisson count's 3 sd)."""
    return answered < RATE_SHORT * offered - 3 * math.sqrt(offered)
