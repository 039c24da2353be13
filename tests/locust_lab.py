"""A real in-process HTTP server and the real `locust` binary on the engine's locustfile, for
the tests of the Locust users (test_engines.py, test_open_loop.py): no Docker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq

from tierbench.kinds.web import webmetrics as metrics
from workloads import traces

ROOT = Path(__file__).resolve().parent.parent
LOCUST = Path(sys.executable).parent / "locust"


class Server(ThreadingHTTPServer):
    """Answers every GET (and POST) with 64 bytes after `delay` seconds (or `slow_s` for every
    `slow_every`-th, or held by a stall); records paths, methods and concurrency."""

    daemon_threads = True
    # The listen backlog: Python's default of 5 is too short for a stall. Every request that
    # arrives while the others are held opens a new connection (about 100 in test_open_loop's
    # 1 s stall), and on a loaded host the accept loop (one thread that accepts, then starts a
    # handler thread and waits for it to run) falls behind: beyond 5 unaccepted connections
    # the kernel drops the SYN (TcpExt ListenOverflows), the client sends it again 1 s later,
    # and that request's latency is 1 s plus the wait, the stall or not. (CI, 7 Dec: p90 876
    # ms, p99 1,027 and p99.9 1,034 ms where the stall allows at most 1,000 ms.) The kernel
    # caps it at net.core.somaxconn (4096 here).
    request_queue_size = 1024

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.delay, self.paths, self.inflight, self.max_inflight = delay, [], 0, 0
        # stall_s: every request that arrives from 1.5 s after the first one until stall_s later
        # is held until the stall ends (a server that stops answering for a while)
        self.stall_s, self.first = 0.0, None
        # slow_every: every slow_every-th request (the 1st, then every slow_every) is answered
        # slow_s later instead of `delay`: a known share of slow answers
        self.slow_every, self.slow_s, self.count = 0, 0.0, 0
        self.methods: list[tuple[str, str, str | None]] = []  # method, path, Content-Length
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body leave in two writes: without TCP_NODELAY the body waits for the client's
    # delayed ACK (40 ms on Linux) whenever the headers are still unacknowledged
    disable_nagle_algorithm = True

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        srv = self.server
        with srv.lock:
            if srv.first is None:
                srv.first = time.time()
            hold = srv.stall_s and srv.first + 1.5 - time.time()  # stalled from 1.5 s, 1 s long
        if hold and -srv.stall_s < hold <= 0:
            time.sleep(srv.stall_s + hold)
        with srv.lock:
            srv.paths.append(self.path)
            srv.methods.append((self.command, self.path, self.headers.get("Content-Length")))
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
            slow = srv.slow_every and srv.count % srv.slow_every == 0
            srv.count += 1
        time.sleep(srv.slow_s if slow else srv.delay)
        with srv.lock:
            srv.inflight -= 1
        self.send_response(200)
        self.send_header("Content-Length", "64")
        self.end_headers()
        self.wfile.write(b"x" * 64)

    def log_message(self, *args: object) -> None:
        pass


def run_locust(tmp_path: Path, srv: Server, trace: Path, users: int, seconds: int,
               user_class: str = "TraceUser", processes: int = 1, **env: str) -> list[dict]:
    """Run the real locust binary on the engine's locustfile; returns the request log rows."""
    log = tmp_path / "requests.csv"
    full_env = {**os.environ, "TRACE": str(trace), "REQUEST_LOG": str(log), "USERS": str(users),
                "PROCESSES": str(processes), "PYTHONPATH": str(ROOT),
                # the test server is on 127.0.0.1, which workers refuse unless allowed
                "ALLOW_FOREIGN_TARGET": "1", **env}
    argv = [str(LOCUST), "-f", str(ROOT / "workloads/locust/trace_replay.py"), "--headless",
            "--host", f"http://127.0.0.1:{srv.server_address[1]}", "-u", str(users),
            "-r", str(users), "-t", f"{seconds}s", "--stop-timeout", "2", "--only-summary",
            "--csv", str(tmp_path / "locust"), "--csv-full-history", "--exit-code-on-error", "0"]
    if processes > 1:  # its master on a free port of 127.0.0.1: tests run two at a time
        port = free_port()
        argv += ["--processes", str(processes), "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(port), "--master-port", str(port)]
    done = subprocess.run(argv + [user_class], env=full_env, capture_output=True, text=True,
                          timeout=seconds + 60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return parquet_rows(tmp_path, done.stderr)


def listen_overflows() -> int:
    """How many connections this network namespace's listening sockets have refused so far for
    a full accept queue (TcpExt ListenOverflows of /proc/net/netstat): each such SYN dropped,
    its connection made 1 s later."""
    names, values = [ln.split() for ln in Path("/proc/net/netstat").read_text().splitlines()
                     if ln.startswith("TcpExt:")][:2]
    return int(dict(zip(names, values))["ListenOverflows"])


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def parquet_rows(point: Path, stderr: str = "") -> list[dict]:
    """The engine's request logs converted as the runner does, rows as text (like the CSV)."""
    merged = metrics.convert_request_logs(point)
    assert merged is not None, stderr[-2000:]
    return [{k: str(v) for k, v in r.items()}
            for r in pq.read_table(point / "requests.parquet").to_pylist()]


def two_subsets(tmp_path: Path) -> Path:
    path = tmp_path / "trace.txt"
    traces.write(path, [f"/a/{i}" for i in range(5)] + [f"/b/{i}" for i in range(5)],
                 "two subsets", subset=5)
    return path



def servers() -> Iterator[Callable[..., Server]]:
    """Yields a maker of started servers (`make(delay)`), and shuts them all down after."""
    def make(delay: float = 0.0) -> Server:
        srv = Server(delay)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        made.append(srv)
        return srv

    made: list[Server] = []
    yield make
    for srv in made:
        srv.shutdown()
        srv.server_close()


def four_subsets(tmp_path: Path) -> Path:
    path = tmp_path / "trace.txt"
    traces.write(path, [f"/{c}/{i}" for c in "abcd" for i in range(5)], "four subsets",
                 subset=5)
    return path
