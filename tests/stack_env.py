"""What the stack tests that drive the `tierbench` command share: the command itself, and an
environment with results and state in a temporary folder, checked for root and Compose v2
(a missing prerequisite fails the test, it never skips), cleaned with `tierbench clean` after;
for the cluster-lab modules, a lab brought up and down around the module with every node's NIC
state compared, and the runs on it."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tierbench.placement import nodes

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


TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
NO_ORANGEFS_SOURCE = 3  # setup/orangefs-image.sh: no source tarball could be had


def orangefs_image() -> None:
    """The OrangeFS images built (setup/orangefs-image.sh --offline: from ORANGEFS_TARBALL or the
    verified tarball a previous build cached; tests never download). Without a source the test
    skips, saying so; where CI has built them (TIERBENCH_REQUIRE_ORANGEFS=1, .ci/run) it fails."""
    done = subprocess.run([str(ROOT / "setup" / "orangefs-image.sh"), "--offline"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    if done.returncode == NO_ORANGEFS_SOURCE:
        why = ("tierbench-orangefs cannot be built here: "
               + done.stderr.strip().splitlines()[-1].removeprefix("setup: "))
        if os.environ.get("TIERBENCH_REQUIRE_ORANGEFS") == "1":
            pytest.fail(why + " (TIERBENCH_REQUIRE_ORANGEFS=1: the OrangeFS tests must run)")
        pytest.skip(why)
    assert done.returncode == 0, done.stderr[-2000:]


def published_counters_rel(window_s: float) -> float:
    """How far a figure from PostgreSQL's counters may be from the load generator's over a
    window of `window_s` seconds, relative: a busy backend publishes its counters at most once a
    second, so each end of the window may miss up to a second's worth (1 / window_s), plus 10 %
    for requests that cross the window's edges. Fails when the window is too short for the
    figure to tell one transaction per request from two."""
    rel = 1 / window_s + 0.1
    assert rel < 0.4, f"a {window_s:.1f} s window cannot tell 1 transaction per request from 2"
    return rel


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


LAB_SH = ROOT / "setup" / "lab.sh"
LAB_CLUSTER = ROOT / "lab" / "cluster.yml"
EXPERIMENTS = ROOT / "tests" / "data" / "experiments"


def nic_state(cluster: nodes.Cluster) -> dict[str, str]:
    """Every node's data-plane interface as the tools print its settings: ethtool -k/-c/-g/-l,
    MTU, qdisc."""
    script = ("for o in -k -c -g -l; do echo \"== ethtool $o\"; ethtool $o eth0 2>&1; done; "
              "ip -o link show dev eth0 | grep -o 'mtu [0-9]*'; tc qdisc show dev eth0")
    return {n.name: nodes.run_on_node(n, script, timeout=30).stdout for n in cluster.nodes}


@contextmanager
def lab_cluster(tmp_path_factory: pytest.TempPathFactory, size: int = 4,
                roles: dict[str, object] | None = None) -> Iterator[dict]:
    """A lab of `size` nodes (`setup/lab.sh up SIZE`, no image shipped up front: the runner ships
    what each node needs) for a test module, results and state in temporary folders, as
    {"env", "cluster", "path", "before", "results"}: `path` is the lab's cluster file, or with
    `roles` a copy beside it (its ssh_config is relative) whose roles those replace; `before` is
    every node's NIC state, which must hold again at the end. Afterwards `tierbench clean
    --cluster` and `setup/lab.sh down`; no lab container may stay."""
    require_free_lab()
    results = tmp_path_factory.mktemp("results")
    env = {**os.environ, "LAB_IMAGES": "none", "TIERBENCH_RESULTS": str(results),
           "TIERBENCH_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
    env.pop("TIERBENCH_CLUSTER", None)
    path = LAB_CLUSTER.with_name("cluster-test.yml") if roles else LAB_CLUSTER
    try:
        up = subprocess.run([str(LAB_SH), "up", str(size)], env=env, capture_output=True,
                            text=True, timeout=900)
        assert up.returncode == 0, up.stderr[-3000:]
        if roles:
            data = yaml.safe_load(LAB_CLUSTER.read_text())
            data["roles"].update(roles)
            path.write_text(yaml.safe_dump(data))
        cluster = nodes.load_cluster(path)
        before = nic_state(cluster)
        yield {"env": env, "cluster": cluster, "path": path, "before": before,
               "results": results}
        assert nic_state(cluster) == before
    finally:
        clean = tierbench(env, "clean", "--cluster", str(path), timeout=300)
        down = subprocess.run([str(LAB_SH), "down"], capture_output=True, text=True, timeout=300)
        if roles:
            path.unlink(missing_ok=True)
        assert down.returncode == 0, down.stderr
        assert lab_containers() == []
        assert clean.returncode == 0, clean.stderr


def lab_run(lab: dict, experiment: str, *extra: str,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """`tierbench run tests/data/experiments/EXPERIMENT --cluster LAB EXTRA...`."""
    return tierbench(lab["env"], "run", str(EXPERIMENTS / experiment), "--cluster",
                     str(lab["path"]), *extra, timeout=timeout)


def last_run(lab: dict, name: str) -> Path:
    """The newest results folder of experiment `name` in the lab's results."""
    return sorted((lab["results"] / name).iterdir())[-1]


def summary_rows(run_dir: Path) -> list[dict[str, str]]:
    """A run's summary.csv, one dict per row."""
    with (run_dir / "summary.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))
