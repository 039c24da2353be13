"""What the stack tests that drive the `tierbench` command share: the command itself, and an
environment with results and state in a temporary folder, checked for root and Compose v2
(a missing prerequisite fails the test, it never skips), cleaned with `tierbench clean` after."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIERBENCH = [sys.executable, "-m", "tierbench.cli"]


def tierbench(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`tierbench ARGS` from the checkout, output captured as text."""
    return subprocess.run([*TIERBENCH, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def cli_env(base: Path, **extra: str) -> Iterator[dict[str, str]]:
    """The environment of `tierbench` runs with results and state under `base` (and `extra`
    variables); the stack is removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the stack tests need root: run `make test` as root")
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        pytest.fail("docker compose v2 is missing: run `make setup`")
    env = dict(os.environ, TIERBENCH_RESULTS=str(base / "results"),
               TIERBENCH_STATE_DIR=str(base / "state"), **extra)
    try:
        yield env
    finally:
        tierbench(env, "clean", timeout=300)


def lab_containers() -> list[str]:
    """The lab cluster's node containers (label org.tierbench.lab), by name."""
    done = subprocess.run(["docker", "ps", "-a", "--filter", "label=org.tierbench.lab", "--format",
                           "{{.Names}}"], capture_output=True, text=True, check=False)
    return sorted(done.stdout.split())


def require_free_lab() -> None:
    """What the lab tests need: root, a Docker engine that answers, and no lab already up (the
    test would replace it). A missing prerequisite fails the test; it never skips."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root: run `make test` as root")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("no Docker engine answers: run `make setup`")
    if lab_containers():
        pytest.fail(f"a lab is up ({', '.join(lab_containers())}): the lab tests would replace "
                    "it; run `make lab-down` first")
