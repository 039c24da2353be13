"""Loading the stack from the loadgen container, whatever the engine: what to load (a
:class:`LoadSpec`), what one run measured (a :class:`LoadResult`), the checks both engines make,
an engine run in the container and its stop, and the request-count run's checks."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierbench.config.errors import TierbenchError
from tierbench.config.files import results_root
from tierbench.kinds.web import webmetrics
from tierbench.measure import steady
from tierbench.placement.model import Container, parse_cpuset
from tierbench.placement.placer import Placer
from tierbench.transport import DidNotFinish, Process, STDOUT
from workloads import target as target_guard

TARGET = "http://proxy"
ENGINES = ("locust", "wrk")
THINK_KINDS = ("fixed", "exponential")
OWN_HOSTS, OWN_NETWORK = target_guard.OWN_HOSTS, target_guard.OWN_NETWORK


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
    arrival: str = "constant"  # an open loop's arrivals: evenly spaced, or poisson
    target: str = TARGET
    # stack.proxies: N: every proxy's URL (target's first); each client is bound to one of them,
    # round robin (wrk: each thread, its connections with it; Locust: each user). Empty: target.
    targets: tuple[str, ...] = ()
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
    # load.warmup: steady: the warm-up ends where MSER-5 finds steady state, at least warmup_s
    # and at most warmup_max_s (the load runs warmup_max_s + measure_s). None: a fixed warm-up.
    warmup_max_s: float | None = None
    # where the loadgen runs: the engines' commands go through it (docker exec here or on a node)
    where: Placer = field(default_factory=Placer, repr=False, compare=False)


@dataclass
class LoadResult:
    """What one load run measured, in the same form for every engine."""

    engine: str
    started: float
    window: tuple[float, float]
    requests: webmetrics.RequestLog | None
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
    proxies = len(spec.targets)
    if spec.engine == "wrk" and proxies > 1 and spec.users > proxies and spec.users % proxies:
        raise LoadgenError(f"users: engine wrk binds each thread to one of the {proxies} "
                           f"proxies, so users above {proxies} must be a multiple of {proxies}, "
                           f"got {spec.users}")
    for target in (spec.target, *spec.targets):
        check_target(target, spec.allow_foreign_target, spec.own)


def container_path(path: Path) -> str:
    """The path under /results that the loadgen container sees for a host results path."""
    return "/results/" + str(path.resolve().relative_to(results_root()))

def user() -> str:
    """The user an engine runs as in the container: the invoking user, so results are theirs."""
    return f"{os.getuid()}:{os.getgid()}"


def cpuset_cores(loadgen: Container) -> int:
    """Cores in the loadgen container's cpuset (all of the host's when it has none)."""
    try:
        return len(parse_cpuset(loadgen.cpuset)) if loadgen.cpuset else (os.cpu_count() or 1)
    except ValueError:
        return os.cpu_count() or 1


def start_engine(where: Placer, argv: list[str], env: dict[str, str], container: Container,
                 log: Any) -> Process:
    """argv started in a container as the invoking user, with env, its output to ``log``; in
    its own session: a Ctrl-C reaches tierbench, which stops the engine itself (see stop())."""
    return where.popen(container, argv, env=env, user=user(), stdout=log,
                       stderr=STDOUT, start_new_session=True)


def exec_engine(where: Placer, argv: list[str], env: dict[str, str], loadgen: Container,
                log_path: Path, timeout: float, what: str, also: Sequence[Container] = (),
                fetch: Callable[[], None] | None = None) -> int:
    """docker exec argv in the loadgen container, output to log_path; stops it on any exit
    (and any engine in the `also` containers); then ``fetch`` brings back what it wrote."""
    code = _exec_engine(where, argv, env, loadgen, log_path, timeout, what, also)
    if fetch is not None:
        fetch()
    return code


def _exec_engine(where: Placer, argv: list[str], env: dict[str, str], loadgen: Container,
                 log_path: Path, timeout: float, what: str, also: Sequence[Container] = ()) -> int:
    with log_path.open("w") as log:
        proc = start_engine(where, argv, env, loadgen, log)
        try:
            return proc.wait(timeout=timeout)
        except DidNotFinish:
            for c in (loadgen, *also):
                stop(where, c)
            proc.kill()
            raise LoadgenError(f"{what} did not finish within {timeout:.0f} s; "
                               f"see {log_path}") from None
        except BaseException:
            for c in (loadgen, *also):
                stop(where, c)
            proc.kill()
            raise


def log_tail(path: Path) -> str:
    """The last three lines of an engine's log, on one line."""
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:])


FINISHED_FILE = "locust-finished.txt"  # a request-count run: "K M", K of M clients finished


def load_s(spec: LoadSpec) -> float:
    """How long a timed run loads the stack: the longest warm-up, then the measured time."""
    return (spec.warmup_s if spec.warmup_max_s is None else spec.warmup_max_s) + spec.measure_s


def warmup_found(spec: LoadSpec, per_second: Callable[[int], list[float]]) -> steady.Steady:
    """The warm-up of a timed run (tierbench.measure.steady): found in the successful requests
    per second from the load's start (``per_second(n)``: the first n seconds' counts), or the
    fixed one, checked for drift in the window."""
    seconds = int(load_s(spec))
    return steady.detect(per_second(seconds), spec.measure_s, spec.warmup_s, spec.warmup_max_s)


def warmup_extra(spec: LoadSpec, found: steady.Steady | None) -> dict:
    """The summary row's warm-up figures: its length, and the flag of a window that starts
    before steady state was shown (a request-count run: its fixed warm-up, not checked)."""
    if found is None:
        return {"warmup_s": spec.warmup_s}
    out: dict = {"warmup_s": found.warmup_s, "unsteady": not found.steady,
                 "warmup": found.record(spec.warmup_max_s)}
    if found.why:
        out["unsteady_why"] = found.why
    return out


def count_env(spec: LoadSpec, point_dir: Path) -> dict[str, str]:
    """The locustfile's settings of a request-count run ({} for a timed one); an older count
    of finished clients is removed first."""
    (point_dir / FINISHED_FILE).unlink(missing_ok=True)
    if not spec.requests_per_client:
        return {}
    return {"REQUESTS_PER_CLIENT": str(spec.requests_per_client),
            "WARMUP_S": f"{spec.warmup_s:g}", "COUNTED_AIM_S": f"{COUNTED_AIM_S:g}"}


def sent_per_client(point_dir: Path) -> int | None:
    """The requests every client of a Locust request-count run sent at least (the count as
    raised by the warm-up's rate; FINISHED_FILE's third figure), None when not written."""
    try:
        fields = (point_dir / FINISHED_FILE).read_text().split()
        return int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def count_extra(spec: LoadSpec) -> dict:
    """What a request-count run adds to the summary row."""
    return {"requests_per_client": spec.requests_per_client} if spec.requests_per_client else {}


def limit_reached(engine: str, spec: LoadSpec, what: str) -> LoadgenError:
    """The one sentence of a request-count run that hit its time limit."""
    return LoadgenError(f"{engine}: {what} within load.measure_s = {spec.measure_s:g} s, the "
                        "time limit of a request-count run: raise load.measure_s or lower "
                        "load.requests_per_client")


MIN_COUNTED_S = 2.0  # a request-count window shorter than this holds too few 1 Hz samples
COUNTED_AIM_S = 2 * MIN_COUNTED_S  # twice the least: the rate may still rise after the warm-up
# (a count expected to take 2.6 s at the warm-up's rate was answered in 1.9 s); both engines
# raise a request count too small for it by one rule (workloads/counting.py)


def check_counted_window(spec: LoadSpec, window: tuple[float, float],
                         sent: int | None = None) -> None:
    """A request-count window long enough to measure: CPU and bytes come from the samples taken
    every second that bracket it. ``sent``: the requests per client the engine sent, when it
    raised the count asked (wrk.counted_enough)."""
    span = window[1] - window[0]
    if spec.requests_per_client and span < MIN_COUNTED_S:
        raise LoadgenError(f"the clients sent their {sent or spec.requests_per_client:,} "
                           f"requests each in "
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


def stop(where: Placer, loadgen: Container, wait_s: float = 15) -> None:
    """Stop any Locust or wrk run in the loadgen container and wait until it has exited."""
    patterns = ("bin/locust -f", "wrk -t")

    def running() -> bool:
        for pattern in patterns:
            done = where.exec(loadgen, ["pgrep", "-f", pattern], user=user(), timeout=30)
            if done.returncode == 0:
                return True
        return False

    # Same uid as the run: the container has no CAP_KILL to signal another user's process.
    for pattern in patterns:
        where.exec(loadgen, ["pkill", "-TERM", "-f", pattern], user=user(), timeout=30)
    deadline = time.monotonic() + wait_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.5)


def version(where: Placer, loadgen: Container) -> str:
    """Locust's version as the image reports it."""
    done = where.exec(loadgen, ["locust", "--version"], timeout=60)
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "unknown"


def wrk_version(where: Placer, loadgen: Container) -> str:
    """wrk's version as the image reports it (first line of `wrk -v`)."""
    done = where.exec(loadgen, ["wrk", "-v"], timeout=60)
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text and text[0].startswith("wrk") else "unknown"
