"""The Locust engine: one headless Locust run per point, inside the loadgen container."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tierbench.stack import Container, results_root

LOCUSTFILE = "/app/workloads/locust/trace_replay.py"
TARGET = "http://proxy"


class LoadgenError(Exception):
    """The load generator did not produce a usable run."""


@dataclass
class LoadRun:
    """What one load run left behind."""

    started: float
    returncode: int
    request_log: Path


def _in_container(path: Path) -> str:
    """The path under /results that the loadgen container sees for a host results path."""
    return "/results/" + str(path.resolve().relative_to(results_root()))


def run_locust(loadgen: Container, point_dir: Path, trace: Path, users: int,
               duration_s: float) -> LoadRun:
    """Run Locust closed loop for duration_s; stdout/stderr and its CSV stats go to point_dir."""
    request_log = point_dir / "requests.csv"
    env = {"TRACE": _in_container(trace), "REQUEST_LOG": _in_container(request_log),
           "USERS": str(users), "PYTHONPATH": "/app"}
    argv = ["docker", "exec"]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["-u", _user(), loadgen.id,
             "locust", "-f", LOCUSTFILE, "--headless", "--host", TARGET,
             "-u", str(users), "-r", str(users), "-t", f"{duration_s:g}s", "--stop-timeout", "5",
             "--only-summary", "--exit-code-on-error", "0",
             "--csv", _in_container(point_dir / "locust"), "--csv-full-history"]
    started = time.time()
    with (point_dir / "locust.log").open("w") as log:
        # Own session: a Ctrl-C reaches tierbench, which stops Locust itself (see stop()).
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=duration_s + 60)
        except subprocess.TimeoutExpired:
            stop(loadgen)
            proc.kill()
            raise LoadgenError(f"Locust did not finish within {duration_s + 60:.0f} s; "
                               f"see {point_dir / 'locust.log'}") from None
        except BaseException:
            stop(loadgen)
            proc.kill()
            raise
    if code != 0 or not request_log.exists():
        tail = (point_dir / "locust.log").read_text().strip().splitlines()[-3:]
        raise LoadgenError(f"Locust exited with code {code}: {' | '.join(tail)}")
    return LoadRun(started=started, returncode=code, request_log=request_log)


def _user() -> str:
    """The user Locust runs as in the container: the invoking user, so results are theirs."""
    return f"{os.getuid()}:{os.getgid()}"


def stop(loadgen: Container, wait_s: float = 15) -> None:
    """Stop any Locust run in the loadgen container and wait until it has exited."""
    def running() -> bool:
        done = subprocess.run(["docker", "exec", "-u", _user(), loadgen.id, "pgrep", "-f",
                               "bin/locust -f"], capture_output=True, timeout=30, check=False)
        return done.returncode == 0

    # Same uid as the run: the container has no CAP_KILL to signal another user's process.
    subprocess.run(["docker", "exec", "-u", _user(), loadgen.id, "pkill", "-TERM", "-f",
                    "bin/locust -f"], capture_output=True, timeout=30, check=False)
    deadline = time.monotonic() + wait_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.5)


def version(loadgen: Container) -> str:
    """Locust's version as the image reports it."""
    done = subprocess.run(["docker", "exec", loadgen.id, "locust", "--version"],
                          capture_output=True, text=True, timeout=60, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "unknown"
