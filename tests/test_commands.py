"""Every command the README and docs/ give, run as they give it, at least in a short form.

Without Docker (pure): `make help`, `make plan`, `make report-example`, `make lint`,
`make bench-scale`. With the engine (marker ``stack``, one at a time): `make setup` (nothing left
to do), `make images` (nothing to rebuild), `make orangefs-image`, `make run EXP=...`, then on the
stack it leaves up `make bench` (both ratios printed) and `tierbench worker` serving a run's
Locust master, and `make clean`. Covered elsewhere: `make test` is CI's own call (.ci/run),
`make test-cluster` runs test modules that exist on their own, `make pfs-up` and `tierbench pfs
up|down|status` in test_pfs_cluster.py, `make lab-up` and `make lab-down` in test_lab.py,
`tierbench report` and `compare` in test_kinds.py, `tierbench plan` and `clean` throughout."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stack_env import TAG, cli_env, orangefs_image, tierbench

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
MAKEFILE = (ROOT / "Makefile").read_text()


def make(*args: str, env: dict[str, str] | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in the checkout, output captured as text."""
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT,
                          env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)


# --------------------------------------------------------------------------- without Docker


def test_make_help_lists_every_target_with_its_description() -> None:
    done = make("help")
    assert done.returncode == 0, done.stderr
    documented = dict(re.findall(r"^([a-z-]+):.*## (.+)$", MAKEFILE, flags=re.M))
    listed = dict(re.findall(r"^  make (\S+) +(.+)$", done.stdout, flags=re.M))
    assert listed == documented
    assert {"run", "test", "plan", "clean", "setup", "images", "bench", "lint"} <= set(listed)


def test_make_plan_prints_the_stored_plan_of_the_default_experiment() -> None:
    done = make("plan")  # EXP defaults to quick
    assert done.returncode == 0, done.stderr
    want = (DATA / "plans" / "quick.txt").read_text().replace("<checkout>", str(ROOT))
    got = [ln for ln in done.stdout.splitlines()  # the plan, not make's echo of the command
           if not ln.startswith(("  space: ", ".venv/bin/"))]
    assert got == [ln for ln in want.splitlines() if not ln.startswith("  space: ")]


def test_make_run_builds_quicks_images_while_the_venv_is_set_up() -> None:
    """`make run`'s setup starts setup/images.sh on the images quick's stack runs (the list the
    web kind's preflight builds) in the background, sets .venv up meanwhile and waits for both,
    failing when either fails; for another experiment only .venv (`tierbench run` builds the
    images)."""
    from tierbench.kinds import registry
    from tierbench.kinds.web import services
    from tierbench.kinds.web.settings import has_dynamic

    s = registry.load_experiment("quick").settings
    want = sorted(name.removeprefix("tierbench-") for docroot in s.stack.docroot
                  for name in services.stack_images(s.stack.proxy, docroot, has_dynamic(s)))
    done = make("-n", "setup-run")
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if "venv.sh" in ln]
    both = re.fullmatch(r"setup/images\.sh ([a-z ]+) & images=\$!; +setup/venv\.sh \|\| "
                        r"\{ wait \$images; exit 1; \}; wait \$images", line)
    assert both, line
    assert sorted(both.group(1).split()) == want
    other = make("-n", "setup-run", "EXP=dc-single").stdout
    assert "setup/images.sh" not in other and "setup/venv.sh\n" in other


def test_make_report_example_writes_the_shipped_example_report(tmp_path: Path) -> None:
    (example,) = [p.parent for p in (ROOT / "examples" / "quick").glob("*/summary.csv")]
    done = make("-n", "report-example")  # the default EXAMPLE is that run
    assert f"tierbench report {example.relative_to(ROOT)}" in done.stdout, done.stdout
    copy = tmp_path / "example"  # a copy: the notebooks' test reads the example meanwhile
    shutil.copytree(example, copy)
    done = make("report-example", f"EXAMPLE={copy}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(copy / "report.html")
    report = (copy / "report.html").read_text()
    assert "<svg" in report and "offloads-off" in report and "quick" in report


def test_make_lint_passes() -> None:
    done = make("lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks passed!" in done.stdout


def test_make_bench_scale_measures_each_stage(tmp_path: Path) -> None:
    # the smallest size it takes: 1 million records (about 10 s here)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = make("bench-scale", "SCALE_SIZES=1", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for stage in ("trace", "records", "report"):  # its time and its peak memory
        assert re.search(rf"^  1 M: {stage} +[\d.]+ s +peak +\d+ MB", done.stdout, re.M), (
            stage, done.stdout)


# --------------------------------------------------------------------------- with the engine


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    with cli_env(tmp_path_factory.mktemp("commands")) as e:
        yield e


@pytest.mark.stack
def test_make_setup_finds_nothing_left_to_do() -> None:
    done = make("setup", timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "installing" not in done.stdout + done.stderr  # make test ran it before: all there
    assert "creating .venv" not in done.stderr


def image_ids() -> dict[str, str]:
    done = subprocess.run(["docker", "images", "--no-trunc", "--format",
                           "{{.Repository}}:{{.Tag}} {{.ID}}"], capture_output=True, text=True,
                          check=True)
    return dict(ln.split() for ln in done.stdout.splitlines()
                if ln.startswith("tierbench-") and ln.split()[0].endswith(f":{TAG}"))


@pytest.mark.stack
def test_make_images_rebuilds_nothing_when_nothing_changed() -> None:
    before = image_ids()
    t0 = time.monotonic()
    done = make("images", timeout=1800)
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    assert "building tierbench-" not in done.stderr, done.stderr
    assert image_ids() == before
    assert took < 60, f"make images took {took:.0f} s with nothing to build"


@pytest.mark.stack
def test_make_orangefs_image_builds_from_the_verified_source() -> None:
    orangefs_image()  # a source at hand (CI: ../shared), else a skip saying why
    done = make("orangefs-image", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    label = subprocess.run(["docker", "image", "inspect", "-f",
                            '{{index .Config.Labels "org.tierbench.orangefs.source-sha256"}}',
                            f"tierbench-orangefs:{TAG}"], capture_output=True, text=True)
    assert re.fullmatch(r"[0-9a-f]{64}\n", label.stdout), label.stdout
    if os.environ.get("ORANGEFS_SHA256"):
        assert label.stdout.strip() == os.environ["ORANGEFS_SHA256"]


@pytest.mark.stack
def test_make_run_runs_an_experiment_and_writes_its_report(env: dict[str, str]) -> None:
    done = make("run", f"EXP={DATA / 'experiments' / 'run-short.yml'}", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = list((Path(env["TIERBENCH_RESULTS"]) / "run-short").iterdir())
    assert len(runs) == 1 and (runs[0] / "report.html").is_file()
    with (runs[0] / "summary.csv").open(newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["mode"] == "offloads-on" and row["error"] == "" and float(row["tps"]) > 0, row


def ratio(text: str, after: str) -> float:
    """The ratio printed on the first `ratio...: X` line following the line containing `after`."""
    tail = text.split(after, 1)[1]
    return float(re.search(r"ratio(?: of medians)?: ([\d.]+)", tail).group(1))


@pytest.mark.stack
def test_make_bench_prints_both_ratios_on_the_running_stack(env: dict[str, str]) -> None:
    # after make run (the test above left the stack up), shortened: --profile categories' cost
    # on that run's one-point experiment (not quick at --scale 0.6: 32 points, about 4 min in CI),
    # then one round of 3 s of each engine benchmark
    short = DATA / "experiments" / "run-short.yml"
    done = make("bench", f"BENCH_PROFILE_ARGS=--rounds 1 --experiment {short} --scale 1",
                "BENCH_ARGS=--seconds 3 --rounds 1 --locust-users 4", env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"--profile categories against none, {short} at --scale 1" in done.stdout, done.stdout
    cost = re.findall(r"median over conditions, (?:TPS|host CPU us/KB): ([\d.]+)", done.stdout)
    assert len(cost) == 2 and all(float(c) > 0 for c in cost), done.stdout
    wrk = ratio(done.stdout, "wrk engine vs plain wrk")
    locust = ratio(done.stdout, "Locust engine vs bare FastHttpUser")
    # one short round on a shared 2-core host: a sanity bound here; the goal (>= 0.95 each) is
    # for the full benchmark on a quiet host
    assert 0.5 < wrk < 2 and 0.5 < locust < 2, done.stdout


@pytest.mark.stack
def test_tierbench_worker_serves_a_runs_master_from_outside_the_stack(
        env: dict[str, str]) -> None:
    # the master (loadgen container, port 5557 published on MASTER_BIND: one address of this
    # host, here its loopback, never every address) waits for one remote worker process
    env = {**env, "MASTER_BIND": "127.0.0.1"}
    worker = subprocess.Popen([sys.executable, "-m", "tierbench.cli", "worker", "--master",
                               "127.0.0.1", "--runs", "1"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        done = tierbench(env, "run", str(DATA / "experiments" / "remote-worker.yml"))
        out, err = worker.communicate(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert done.returncode == 0, done.stderr[-3000:]
    assert worker.returncode == 0, err[-2000:]
    run = next((Path(env["TIERBENCH_RESULTS"]) / "remote-worker").iterdir())
    with (run / "summary.csv").open(newline="") as fh:
        (values,) = list(csv.DictReader(fh))
    assert values["remote_workers"] == "1" and values["error"] == "", values
    assert float(values["tps"]) > 0, values


@pytest.mark.stack
def test_make_clean_removes_the_stack(env: dict[str, str]) -> None:
    done = make("clean", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert not [n for n in names if n.startswith("tierbench-") and "node" not in n], names


def test_make_examples_copy_step_trims_a_run_and_keeps_it_whole(tmp_path: Path) -> None:
    # `make example` = make run's quick, then `python -m tierbench.example`: the second step on
    # a run gives a folder the report reads, with only the features the modes changed in its
    # snapshots, without traces, report or warm-up output; on the shipped example it changes
    # nothing (it was made this way)
    from tierbench import example

    (shipped,) = [p.parent for p in (ROOT / "examples" / "quick").glob("*/summary.csv")]
    run = tmp_path / "results" / shipped.name
    shutil.copytree(shipped, run)
    (run / "traces").mkdir()
    (run / "traces" / "single-4k.txt").write_text("/single-4096/file.bin\n")
    (run / "report.html").write_text("old")
    (run / "points" / "p001" / "wrk-warmup.json").write_text("{}")
    pjson = run / "points" / "p002" / "point.json"
    record = json.loads(pjson.read_text())
    endpoint = next(iter(record["interfaces_before"]))
    record["interfaces_before"][endpoint]["features"]["highdma"] = "on"  # the same everywhere
    pjson.write_text(json.dumps(record, indent=2) + "\n")
    out = example.record(run, tmp_path / "examples")
    assert out == tmp_path / "examples" / shipped.name
    assert not (out / "traces").exists() and not (out / "report.html").exists()
    assert not (out / "points" / "p001" / "wrk-warmup.json").exists()
    trimmed = json.loads((out / "points" / "p002" / "point.json").read_text())
    features = trimmed["interfaces_before"][endpoint]["features"]
    assert "highdma" not in features and features["tcp-segmentation-offload"] in ("on", "off")
    for path in shipped.rglob("*"):
        # what `make report-example` writes beside the shipped run (git-ignored) is no part of it
        if path.is_file() and path.name not in ("report.html", "comparisons.csv"):
            assert (out / path.relative_to(shipped)).read_bytes() == path.read_bytes(), path
    assert make("report-example", f"EXAMPLE={out}").returncode == 0
