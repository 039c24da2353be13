"""Trace replay for Locust. TraceUser is closed loop: each user sends one request at a time,
walking its own sequence of the trace (workloads/traces.py: offsets, or per-client subsets),
with an optional think time. OpenLoopUser sends at a fixed arrival rate whatever the answers,
and logs how late each request left against its schedule. Every request is logged (end time,
latency, bytes, path, status, lateness) so the control program counts exactly the measured
window; with --processes or distributed workers each worker writes its own log.

Environment: TRACE, REQUEST_LOG, USERS; THINK_KIND (fixed|exponential) and THINK_MS; RATE
(requests/s over all users, OpenLoopUser); SEED."""

import itertools
import os
import random
import threading
import time
from pathlib import Path

import gevent
from locust import FastHttpUser, events, task
from locust.runners import MasterRunner, WorkerRunner

from workloads import traces

TRACE = os.environ["TRACE"]
REQUEST_LOG = os.environ["REQUEST_LOG"]
USERS = int(os.environ.get("USERS", "1"))
THINK_KIND = os.environ.get("THINK_KIND", "")
THINK_S = float(os.environ.get("THINK_MS", "0")) / 1000
RATE = float(os.environ.get("RATE", "0"))
SEED = int(os.environ.get("SEED", "1"))

# One reader and one replay rule for every engine (workloads/traces.py; PYTHONPATH=/app).
PATHS, SUBSET = traces.read_with_subset(Path(TRACE))
_records: list[tuple[float, float, int, str, int, float]] = []
_next_user = itertools.count()
_lock = threading.Lock()
_env = {}


def client_sequence(client: int, clients: int) -> list[str]:
    """The requests one client replays, in order."""
    return traces.client_sequence(PATHS, SUBSET, client, clients)


@events.init.add_listener
def _init(environment, **_):
    _env["environment"] = environment


@events.request.add_listener
def _log(response_time, response_length, response, exception, context, **_):
    """Keep one record per request; status -1 marks a failure without an HTTP status."""
    status = getattr(response, "status_code", None) or -1
    if exception is not None and status < 400:
        status = -1
    context = context or {}
    _records.append((time.time(), response_time, response_length or 0, context.get("path", ""),
                     status, context.get("late_ms", 0.0)))


def _log_path(runner) -> str | None:
    if isinstance(runner, MasterRunner):
        return None
    if isinstance(runner, WorkerRunner):
        base, dot, ext = REQUEST_LOG.rpartition(".")
        return f"{base}-w{runner.worker_index}.{ext}" if dot else f"{REQUEST_LOG}-w{runner.worker_index}"
    return REQUEST_LOG


@events.quitting.add_listener
def _flush(environment, **_):
    path = _log_path(environment.runner)
    if path is None:
        return
    with open(path, "w") as fh:
        fh.write("end_s,latency_ms,bytes,path,status,late_ms\n")
        fh.writelines(f"{e:.6f},{lat:.3f},{n},{p},{s},{late:.3f}\n"
                      for e, lat, n, p, s, late in _records)


def _client_index() -> tuple[int, int]:
    """(global index of this user, number of processes): users are interleaved over workers."""
    with _lock:
        local = next(_next_user)
    runner = _env["environment"].runner
    if isinstance(runner, WorkerRunner):
        procs = max(int(os.environ.get("PROCESSES", "1")), 1)
        return local * procs + max(runner.worker_index, 0), procs
    return local, 1


def _think(rng: random.Random) -> float:
    if THINK_KIND == "fixed":
        return THINK_S
    if THINK_KIND == "exponential" and THINK_S > 0:
        return rng.expovariate(1 / THINK_S)
    return 0.0


class TraceUser(FastHttpUser):
    """Closed loop: replays its own sequence of the trace, one request at a time."""

    def on_start(self) -> None:
        i, _ = _client_index()
        self._paths = itertools.cycle(client_sequence(i, USERS))
        self._rng = random.Random(SEED * 100003 + i)

    def wait_time(self) -> float:
        return _think(self._rng)

    @task
    def replay(self) -> None:
        path = next(self._paths)
        self.client.get(path, name="trace", context={"path": path})


class OpenLoopUser(FastHttpUser):
    """Open loop: its share (RATE / USERS) of a fixed arrival rate, answers not awaited."""

    concurrency = 1000

    def on_start(self) -> None:
        i, _ = _client_index()
        self._paths = itertools.cycle(client_sequence(i, USERS))
        self._interval = USERS / RATE
        # Users start spread over one interval, so arrivals interleave instead of bunching.
        self._next = time.time() + self._interval * (i % USERS) / USERS

    def _send(self, path: str, late_ms: float) -> None:
        self.client.get(path, name="trace", context={"path": path, "late_ms": late_ms})

    @task
    def arrive(self) -> None:
        wait = self._next - time.time()
        if wait > 0:
            gevent.sleep(wait)
        late_ms = max(0.0, (time.time() - self._next) * 1000)
        gevent.spawn(self._send, next(self._paths), late_ms)
        self._next += self._interval
