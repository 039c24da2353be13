"""Closed-loop trace replay: each user sends one request at a time, walking the trace from its
own offset. Every request is logged (end time, latency, bytes, status) to REQUEST_LOG so the
control program computes TPS and percentiles over exactly the measured window."""

import itertools
import os
import threading
import time

from locust import FastHttpUser, events, task

TRACE = os.environ["TRACE"]
REQUEST_LOG = os.environ["REQUEST_LOG"]
USERS = int(os.environ.get("USERS", "1"))

with open(TRACE) as fh:
    PATHS = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
_records: list[tuple[float, float, int, str, int]] = []
_next_user = itertools.count()
_lock = threading.Lock()


@events.request.add_listener
def _log(response_time, response_length, response, exception, context, **_):
    """Keep one record per request; status -1 marks a failure without an HTTP status."""
    status = getattr(response, "status_code", None) or -1
    if exception is not None and status < 400:
        status = -1
    path = context.get("path", "") if context else ""
    _records.append((time.time(), response_time, response_length or 0, path, status))


@events.quitting.add_listener
def _flush(**_):
    with open(REQUEST_LOG, "w") as fh:
        fh.write("end_s,latency_ms,bytes,path,status\n")
        fh.writelines(f"{e:.6f},{lat:.3f},{n},{p},{s}\n" for e, lat, n, p, s in _records)


class TraceUser(FastHttpUser):
    """Replays the trace from offset i * len / N, one request at a time."""

    def on_start(self):
        with _lock:
            i = next(_next_user)
        start = (i * len(PATHS)) // max(USERS, 1)
        self._paths = itertools.cycle(PATHS[start:] + PATHS[:start])

    @task
    def replay(self):
        path = next(self._paths)
        self.client.get(path, name="trace", context={"path": path})
