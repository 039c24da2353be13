"""Two checkouts on one host, for real (issue 39, item 4): while the first checkout's run holds
this host's run lock, a second checkout's `tierbench run` and `tierbench clean` are refused in
one sentence naming the holder; the first run's results are complete; and once it has ended, the
second checkout's `clean` leaves the first's stack up (each checkout its own Compose project).
The second checkout is a copy of this one's files in another folder. Needs root, Docker with
Compose v2 and tierbench-net (`make images`); run under the Docker lock like the other stack
tests."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tierbench.config import files
from tierbench.placement import compose, runlock

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = """name: shared-host
kind: net
seed: 1
repetitions: 3
settle_s: 0
modes: [offloads-on]
net: {test: stream, receivers: 1, connections: 1, write_size: 131072, warmup_s: 1, measure_s: 3}
"""


def copy_checkout(to: Path) -> Path:
    """This checkout's tracked files (as they are now) in the folder ``to``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


def cli(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tierbench.cli", *args], cwd=root,
                          env={**env, "PYTHONPATH": str(root)}, capture_output=True, text=True,
                          timeout=600)


def project_containers(project: str) -> list[str]:
    return sorted(subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True, text=True, timeout=60).stdout.split())


def test_a_second_checkout_is_refused_while_the_first_runs_and_cleans_only_its_own(
        tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the stack tests need root: run `make test` as root")
    others = compose.others_up(lambda *a: subprocess.run(
        ["docker", *a], capture_output=True, text=True, timeout=60, check=True).stdout)
    if others:  # this test's first run would be refused, rightly: it removes nobody's stack
        pytest.fail(f"another checkout's stack ({', '.join(others)}) is up on this host: remove "
                    "it with its checkout's `tierbench clean` first")
    other = copy_checkout(tmp_path / "other-checkout")
    mine, theirs = files.project_name(ROOT), files.project_name(other)
    assert mine != theirs
    exp = tmp_path / "shared-host.yml"
    exp.write_text(EXPERIMENT)
    env_a = {**os.environ, "TIERBENCH_RESULTS": str(tmp_path / "a-results"),
             "TIERBENCH_STATE_DIR": str(tmp_path / "a-state")}
    env_b = {**os.environ, "TIERBENCH_RESULTS": str(tmp_path / "b-results"),
             "TIERBENCH_STATE_DIR": str(tmp_path / "b-state")}
    for env in (env_a, env_b):
        env.pop(files.PROJECT_ENV, None)
        env.pop(runlock.LOCK_DIR_ENV, None)
    lock = runlock.lock_dir() / runlock.LOCK_FILE
    first = subprocess.Popen([sys.executable, "-m", "tierbench.cli", "run", str(exp)], cwd=ROOT,
                             env=env_a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            held = runlock.parse_owner(lock.read_text()) if lock.exists() else None
            if held is not None and held.pid == first.pid:
                break
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.5)
        for args in (("run", str(exp)), ("clean",)):
            refused = cli(other, env_b, *args)
            assert first.poll() is None, first.communicate()  # refused while it runs
            assert refused.returncode == 2, refused.stderr
            said = refused.stderr.strip()
            assert "\n" not in said and re.fullmatch(
                rf"tierbench: this host is in use by another tierbench run, held by user \S+ on "
                rf"host \S+ \(pid {first.pid}, checkout {re.escape(str(ROOT))}, `tierbench run "
                rf"{re.escape(str(exp))}`, since \S+, [^)]+\): wait for it to end, or ask its "
                rf"owner \(lock {re.escape(str(lock))}\)", said), said
        out, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.terminate()
            first.wait(timeout=120)
    # the first run's results are complete, its stack up (the senders stay between runs)
    run = next((tmp_path / "a-results" / "shared-host").iterdir())
    with (run / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 and all(not r.get("error") for r in rows), rows
    up = project_containers(mine)
    assert up, "the first checkout's stack is not up after its run"
    try:
        cleaned = cli(other, env_b, "clean")
        assert cleaned.returncode == 0, cleaned.stderr
        assert f"this checkout's stack ({theirs})" in cleaned.stdout, cleaned.stdout
        assert project_containers(mine) == up  # the first checkout's stack untouched
    finally:
        done = cli(ROOT, env_a, "clean")
        assert done.returncode == 0, done.stderr
    assert project_containers(mine) == []
