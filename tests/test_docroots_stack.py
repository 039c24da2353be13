"""Docroot placements on the real stack: a tmpfs docroot that the web tier really serves (the
fileset job's files must survive into the web container), and 004 §4.4's hybrid placement: two
sites at once, the foreground's small files also on a tmpfs the web tier serves them from.

Needs root, Docker with Compose v2 and the images (`make test` provides them)."""

import csv
import os
import subprocess
from pathlib import Path

import pytest
from stack_env import TIERBENCH, cli_env

from tierbench.placement import model

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "hybrid-short.yml"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("docroots")
    with cli_env(base, DOCROOT_TMPFS_DIR=str(base / "docroot"),
                 HOT_TMPFS_DIR=str(base / "hot")) as e:
        yield e


@pytest.fixture(scope="module")
def run(env: dict[str, str]) -> Path:
    # What an earlier run on a disk docroot leaves behind (`make run` before `make test`): a
    # plain docroot volume. Compose would keep it for the tmpfs docroot the experiment asks
    # for, and the web tier would serve the wrong files; the run must replace it.
    subprocess.run([*TIERBENCH, "clean"], env=env, cwd=ROOT, capture_output=True, timeout=300)
    # labelled as Compose labels its volumes, so that `tierbench clean` removes it even when
    # the run fails (an unlabelled one outlived the CI run of 8 Dec 2026)
    made = subprocess.run(["docker", "volume", "create",
                           "--label", f"com.docker.compose.project={model.PROJECT}",
                           "--label", "com.docker.compose.volume=docroot",
                           f"{model.PROJECT}_docroot"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    done = subprocess.run([*TIERBENCH, "run", str(EXPERIMENT)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{model.PROJECT}_docroot were made for other settings" in done.stderr
    return next((Path(env["TIERBENCH_RESULTS"]) / "hybrid-short").iterdir())


def fetch(path: str) -> bytes:
    done = subprocess.run(["docker", "exec", f"{model.PROJECT}-loadgen-1", "python3", "-c",
                           "import sys, urllib.request; sys.stdout.buffer.write("
                           f"urllib.request.urlopen('http://proxy{path}').read())"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr[-1000:]
    return done.stdout


def test_tmpfs_docroot_serves_every_request_and_reports_both_sites(run: Path) -> None:
    [row] = list(csv.DictReader((run / "summary.csv").open()))
    assert row["error"] == "" and int(row["errors"]) == 0
    assert row["docroot"] == "tmpfs+hot-tmpfs"
    fg, bg = float(row["tps_foreground"]), float(row["tps_background"])
    assert fg > 10 and bg > 10
    # every successful request belongs to one of the two sites
    assert fg + bg == pytest.approx(float(row["tps"]), rel=0.02)


def test_hot_small_files_are_served_from_the_hot_tmpfs(run: Path, env: dict[str, str]) -> None:
    hot = Path(env["HOT_TMPFS_DIR"])
    assert os.path.ismount(hot) and os.path.ismount(env["DOCROOT_TMPFS_DIR"])
    copies = sorted(p for p in hot.rglob("*.bin"))
    docroot = Path(env["DOCROOT_TMPFS_DIR"])
    assert copies, "no hot copies were written"
    assert all(p.stat().st_size < 1048576 for p in copies)
    site = copies[0].relative_to(hot).parts[0]
    big = [p for p in (docroot / site).glob("*.bin") if p.stat().st_size >= 1048576]
    assert big and not any((hot / p.relative_to(docroot)).exists() for p in big)
    # mark one hot copy: the web tier must answer with the marked bytes
    target = copies[0]
    original = target.read_bytes()
    try:
        target.write_bytes(b"HOTCOPY" + original[7:])
        rel = "/" + str(target.relative_to(hot))
        assert fetch(rel)[:7] == b"HOTCOPY"
        assert fetch("/" + str(big[0].relative_to(docroot)))[:7] != b"HOTCOPY"
    finally:
        target.write_bytes(original)
