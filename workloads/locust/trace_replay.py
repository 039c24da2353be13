"""Trace replay for Locust. TraceUser is closed loop: each user sends one request at a time,
walking its own sequence of the trace (workloads/traces.py: offsets, or per-client subsets),
with an optional think time. OpenLoopUser sends at a fixed arrival rate whatever the answers
(ARRIVAL=constant: evenly spaced; ARRIVAL=poisson: exponential gaps, seeded per client), and
logs how late each request left against its schedule, so that its latency can be counted from
the time it was meant to leave (coordinated omission corrected: late_ms + latency_ms). Every request is logged (end time,
latency, bytes, path, status, lateness) so the control program counts exactly the measured
window. Dynamic writes (paths under traces.WRITE_PREFIX) are sent as POST (Content-Length: 0),
every other request as GET.

Every user reads its own client's sequence from the trace file, lazily (traces.AHEAD lines at a
time), starting at its own place through the trace's index (traces.Cursor): neither a process's
memory nor its start-up grows with the trace. A single process appends its request records to REQUEST_LOG every
FLUSH_EVERY records, so its memory does not grow with the run either.

Distributed (--processes, or --master with --worker processes in other containers or on other
nodes): the master sends the settings and the trace's path to every worker before the first
user starts; workers on this host (processes, worker containers with the results folder
mounted) read their clients' parts of the file; for workers on other nodes (SHIP_TRACE=1) the
master sends the trace's lines instead. A worker's users take client numbers interleaved by
the worker's index (distinct over every worker); at the end the master asks every worker for
its request records and appends them, as they arrive, to one log per worker (REQUEST_LOG with
-wINDEX), which the control program converts. A worker refuses a target that is not the
testbed's own (workloads/target.py) unless ALLOW_FOREIGN_TARGET=1 is set on its side.

Request-count runs (REQUESTS_PER_CLIENT=N, closed loop; 000 §5.2.1): a user replays its
sequence through the warm-up (WARMUP_S, which each process counts from its own first request),
then sends the first N requests of its sequence, from its start, and stops; a worker tells the
master. With COUNTED_AIM_S, N is raised where the warm-up's rate says it would be answered in
less than that (as the wrk engine does): each process takes its clients' mean rate over its
warm-up and gives every one of its clients enough requests for COUNTED_AIM_S at that rate. When
every user has finished, the single process or the master quits the run and writes "K M C" (K of
M clients finished, each having sent at least C requests) to locust-finished.txt beside
REQUEST_LOG; Locust's -t is then only a time limit.

Environment (master or single process): TRACE, REQUEST_LOG, USERS; THINK_KIND
(fixed|exponential) and THINK_MS; RATE (requests/s over all users, OpenLoopUser); SEED;
ARRIVAL (constant|poisson, OpenLoopUser); REQUESTS_PER_CLIENT, WARMUP_S and COUNTED_AIM_S; FLUSH_TIMEOUT_S (how long the master waits for the workers'
records, default 20); SHIP_TRACE; TARGETS (several proxies: their URLs, comma-separated; each
user sends to the one of its client number modulo their count)."""

import itertools
import logging
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import gevent
from locust import FastHttpUser, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from workloads import counting
from workloads import target as target_guard
from workloads import traces

REQUEST_LOG = os.environ.get("REQUEST_LOG", "")
LOG_HEADER = "end_s,latency_ms,bytes,path,status,late_ms\n"
CHUNK = 20000  # records per message from a worker to the master
FLUSH_TIMEOUT_S = float(os.environ.get("FLUSH_TIMEOUT_S", "20"))


def _settings_from_env() -> dict:
    trace = os.environ.get("TRACE", "")
    cfg = {"trace": trace, "users": int(os.environ.get("USERS", "1")),
           "think_kind": os.environ.get("THINK_KIND", ""),
           "think_s": float(os.environ.get("THINK_MS", "0")) / 1000,
           "rate": float(os.environ.get("RATE", "0")),
           "arrival": os.environ.get("ARRIVAL", "constant"), "seed": int(os.environ.get("SEED", "1")),
           "workers": max(int(os.environ.get("PROCESSES", "1")), 1),
           "count": int(os.environ.get("REQUESTS_PER_CLIENT", "0")),
           "warmup_s": float(os.environ.get("WARMUP_S", "0")),
           "aim_s": float(os.environ.get("COUNTED_AIM_S", "0")),
           "targets": [t for t in os.environ.get("TARGETS", "").split(",") if t]}
    if trace and os.environ.get("SHIP_TRACE") == "1":
        # workers on other nodes cannot open the trace file: the master sends its lines
        cfg["paths"], cfg["subset"] = traces.read_with_subset(Path(trace))
    return cfg


# One reader and one replay rule for every engine (workloads/traces.py; PYTHONPATH=/app).
# A worker started without TRACE gets all of this from the master (message tb_setup).
CFG = _settings_from_env()
_records: list[tuple[float, float, int, str, int, float]] = []
_written = [0]  # records a single process has already appended to its log
_next_user = itertools.count()
_env: dict = {}
_refused: list[str] = []
_final: set[int] = set()  # master: workers whose last records arrived
FLUSH_EVERY = 20000  # a single process appends its records to its log this many at a time
_warm_end: list[float] = []  # request-count runs: when this process's warm-up ends
_finished = [0]  # single process or master: clients that have sent their requests
_warm_sent = [0]  # request-count runs: requests this process's clients sent in its warm-up
_users_here = [0]  # closed-loop clients started in this process
_count: list[int] = []  # request-count runs: the requests each client of this process sends
_sent_least: list[int] = []  # single process or master: the least count a client was given


def method(path: str) -> str:
    """POST for a dynamic write, GET for everything else."""
    return "POST" if path.startswith(traces.WRITE_PREFIX) else "GET"


def client_sequence(client: int, clients: int) -> Iterator[str]:
    """The requests one client replays, in order, endlessly: read from the trace file at the
    client's own place (traces.Cursor), or from the lines the master sent."""
    if "paths" in CFG:
        return itertools.cycle(traces.client_sequence(CFG["paths"], CFG["subset"], client,
                                                      clients))
    return traces.Cursor(Path(CFG["trace"]), client, clients)


@events.init.add_listener
def _init(environment, **_):
    _env["environment"] = environment
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("tb_setup", _on_setup)
        runner.register_message("tb_flush", _on_flush)
    elif isinstance(runner, MasterRunner):
        runner.register_message("tb_log", _on_log)
        runner.register_message("tb_refused", _on_refused)
        runner.register_message("tb_done", _on_done)


@events.request.add_listener
def _log(response_time, response_length, response, exception, context, **_):
    """Keep one record per request; status -1 marks a failure without an HTTP status."""
    status = getattr(response, "status_code", None) or -1
    if exception is not None and status < 400:
        status = -1
    context = context or {}
    _records.append((time.time(), response_time, response_length or 0, context.get("path", ""),
                     status, context.get("late_ms", 0.0)))
    if len(_records) >= FLUSH_EVERY and REQUEST_LOG and _single():
        _append_log(REQUEST_LOG, _records, fresh=not _written[0])
        _written[0] += len(_records)
        del _records[:]


def _single() -> bool:
    runner = _env["environment"].runner if "environment" in _env else None
    return not isinstance(runner, (MasterRunner, WorkerRunner))


def _append_log(path: str, records, fresh: bool) -> None:
    """Write records to a request log (a new one with its header when fresh)."""
    with open(path, "w" if fresh else "a") as fh:
        if fresh:
            fh.write(LOG_HEADER)
        fh.writelines(f"{e:.6f},{lat:.3f},{n},{p},{s},{late:.3f}\n"
                      for e, lat, n, p, s, late in records)


def worker_log_path(index: int) -> str:
    """The master's file for the records of worker `index`: requests.csv -> requests-wINDEX.csv."""
    base, dot, ext = REQUEST_LOG.rpartition(".")
    return f"{base}-w{index}.{ext}" if dot else f"{REQUEST_LOG}-w{index}"


# --- master ---------------------------------------------------------------------------------


@events.test_start.add_listener
def _start(environment, **_):
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        # Sent before the spawn messages (same connection, in order): every worker knows the
        # trace, the settings and the number of workers before its first user starts.
        setup = {**CFG, "workers": max(runner.worker_count, 1)}
        runner.send_message("tb_setup", setup)
        if REQUEST_LOG:
            Path(REQUEST_LOG).with_name("locust-start.txt").write_text(f"{time.time():.6f}\n")
    elif isinstance(runner, WorkerRunner):
        own = [a for a in os.environ.get("OWN_ADDRESSES", "").split(",") if a]
        allow = os.environ.get("ALLOW_FOREIGN_TARGET") == "1"
        why = next((w for t in [environment.host or "", *(CFG.get("targets") or [])]
                    if (w := target_guard.refusal(t, allow, own))), None)
        if why:
            _refused.append(why)
            logging.error("tierbench worker: %s", why)
            runner.send_message("tb_refused", {"index": runner.worker_index, "why": why})
    elif REQUEST_LOG:
        Path(REQUEST_LOG).with_name("locust-start.txt").write_text(f"{time.time():.6f}\n")


def _on_log(environment, msg, **_):
    """Master: append a worker's records to its log as they arrive (none held in memory)."""
    data = msg.data
    if REQUEST_LOG:
        _append_log(worker_log_path(data["index"]), data["rows"], fresh=data["first"])
    if data["final"]:
        _final.add(data["index"])


def _on_done(environment, msg, **_):
    _client_finished(int(msg.data.get("count") or CFG["count"]))


def _client_finished(count: int) -> None:
    """Single process or master: one more client has sent its ``count`` requests; the last one
    ends the run (quit in its own greenlet: it stops every user, including the caller's)."""
    _sent_least[:] = [min(_sent_least + [count])]
    _finished[0] += 1
    if _finished[0] == CFG["users"]:
        gevent.spawn(_env["environment"].runner.quit)


@events.test_stop.add_listener
def _note_finished(environment, **_):
    """A request-count run: how many clients finished, for the control program."""
    if CFG["count"] and REQUEST_LOG and not isinstance(environment.runner, WorkerRunner):
        least = _sent_least[0] if _sent_least else CFG["count"]
        Path(REQUEST_LOG).with_name("locust-finished.txt").write_text(
            f"{_finished[0]} {CFG['users']} {least}\n")


def _on_refused(environment, msg, **_):
    logging.error("tierbench: worker %s refused the target: %s", msg.data["index"], msg.data["why"])


@events.test_stop.add_listener
def _collect(environment, **_):
    """Master: ask every worker to stop its users and send its records; wait for them."""
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        return
    expected = {runner.get_worker_index(c.id) for c in runner.clients.all}
    runner.send_message("tb_flush")
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while not expected <= _final and time.monotonic() < deadline:
        gevent.sleep(0.05)
    missing = sorted(expected - _final)
    if missing:
        logging.error("tierbench: no request records from worker(s) %s within %.0f s",
                      ", ".join(map(str, missing)), FLUSH_TIMEOUT_S)


@events.quitting.add_listener
def _flush(environment, **_):
    """A single process writes the rest of its log; the master wrote its workers' as their
    records arrived."""
    if REQUEST_LOG and not isinstance(environment.runner, (MasterRunner, WorkerRunner)):
        _append_log(REQUEST_LOG, _records, fresh=not _written[0])


# --- worker ---------------------------------------------------------------------------------


def _on_setup(environment, msg, **_):
    CFG.update(msg.data)


def _on_flush(environment, msg, **_):
    """Stop the users (each finishes its request in flight), then send every record."""
    runner = environment.runner
    runner.stop()
    batch = _records[:]
    del _records[:len(batch)]
    for i in range(0, max(len(batch), 1), CHUNK):
        runner.send_message("tb_log", {"index": runner.worker_index,
                                       "rows": batch[i:i + CHUNK], "first": i == 0,
                                       "final": i + CHUNK >= len(batch)})


# --- users ----------------------------------------------------------------------------------


def _client_index() -> int:
    """Global client number of a new user: users are interleaved over workers."""
    local = next(_next_user)
    runner = _env["environment"].runner
    if isinstance(runner, WorkerRunner):
        return local * CFG["workers"] + max(runner.worker_index, 0)
    return local


def _base(client: int) -> str:
    """The URL a client sends to: with several proxies (TARGETS), the client's own, round robin
    by client number (each Locust user is one client: bound to one proxy, as 004's client
    threads were); else "" (the --host URL)."""
    targets = CFG.get("targets") or []
    return targets[client % len(targets)].rstrip("/") if targets else ""


def _think(rng: random.Random) -> float:
    kind, mean = CFG["think_kind"], CFG["think_s"]
    if kind == "fixed":
        return mean
    if kind == "exponential" and mean > 0:
        return rng.expovariate(1 / mean)
    return 0.0


def _counting(now: float) -> bool:
    """Request-count runs: whether this process's warm-up (from its first request) is over."""
    if not _warm_end:
        _warm_end.append(now + CFG["warmup_s"])
    return now >= _warm_end[0]


def _done_sending() -> None:
    """This user has sent its requests: count it here, or tell the master."""
    runner = _env["environment"].runner
    if isinstance(runner, WorkerRunner):
        runner.send_message("tb_done", {"index": runner.worker_index, "count": _count[0]})
    else:
        _client_finished(_count[0])


class TraceUser(FastHttpUser):
    """Closed loop: replays its own sequence of the trace, one request at a time (in a
    request-count run, its first REQUESTS_PER_CLIENT requests after the warm-up)."""

    def on_start(self) -> None:
        if _refused:
            raise StopUser()
        self._client = _client_index()
        self._base = _base(self._client)
        self._paths = client_sequence(self._client, CFG["users"])
        self._rng = random.Random(CFG["seed"] * 100003 + self._client)
        self._sent = 0
        self._left: int | None = None  # counted requests still to send
        _users_here[0] += 1

    def wait_time(self) -> float:
        return _think(self._rng)

    @task
    def replay(self) -> None:
        if CFG["count"] and self._left is None and _counting(time.time()):
            if self._sent:  # the counted requests are the client's sequence from its start
                getattr(self._paths, "close", lambda: None)()
                self._paths = client_sequence(self._client, CFG["users"])
            if not _count:  # the first client past the warm-up sets this process's count
                _count.append(counting.counted_enough(CFG["count"], _warm_sent[0],
                                                      CFG["warmup_s"], _users_here[0],
                                                      CFG["aim_s"]))
            self._left = _count[0]
        path = next(self._paths)
        self.client.request(method(path), self._base + path, name="trace",
                            context={"path": path})
        self._sent += 1
        if CFG["count"] and self._left is None:
            _warm_sent[0] += 1
        if self._left is not None:
            self._left -= 1
            if not self._left:
                _done_sending()
                raise StopUser()


def next_gap(interval: float, arrival: str, rng: random.Random) -> float:
    """The time to a user's next arrival: its mean interval, or an exponential gap of that mean
    (a Poisson process over all users, since independent Poisson streams add up to one)."""
    return rng.expovariate(1 / interval) if arrival == "poisson" else interval


class OpenLoopUser(FastHttpUser):
    """Open loop: its share (RATE / USERS) of a fixed arrival rate, answers not awaited."""

    concurrency = 1000

    def on_start(self) -> None:
        if _refused:
            raise StopUser()
        i = _client_index()
        self._base = _base(i)
        users = CFG["users"]
        self._paths = client_sequence(i, users)
        self._interval = users / CFG["rate"]
        self._rng = random.Random(CFG["seed"] * 100003 + i)
        # Users start spread over one interval, so arrivals interleave instead of bunching.
        self._next = time.time() + self._interval * (i % users) / users

    def _send(self, path: str, late_ms: float) -> None:
        self.client.request(method(path), self._base + path, name="trace",
                            context={"path": path, "late_ms": late_ms})

    @task
    def arrive(self) -> None:
        wait = self._next - time.time()
        if wait > 0:
            gevent.sleep(wait)
        late_ms = max(0.0, (time.time() - self._next) * 1000)
        gevent.spawn(self._send, next(self._paths), late_ms)
        self._next += next_gap(self._interval, CFG.get("arrival", "constant"), self._rng)
