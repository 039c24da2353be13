"""A new kind at its true cost: the sample kind of tests/data/newkind/ (test_new_kind.py) put
into a scratch copy of the checkout, where its files would be (tierbench/kinds/,
kinds/families/, experiments/), and the checks every shipped kind must pass run there (the
registry's kinds, their schemas, families, notebooks, documentation, floors and stored plans;
each derives its kinds and families from the registry and the family files, not from a hand
list). What the copy needed beyond the checkout is the cost ARCHITECTURE.md ("Adding a kind")
states: the kind's own files, its generated schema and stored plan, and its experiment's line
in the two catalogues."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from test_new_kind import FILES

ROOT = Path(__file__).resolve().parent.parent
# The checks every shipped kind must pass (run in the scratch copy).
CHECKS = ["tests/test_kinds.py", "tests/test_schemas.py", "tests/test_analysis_spec.py",
          "tests/test_docs.py", "tests/test_analysis_notebooks.py::test_one_notebook_per_family",
          "tests/test_architecture.py"]
# The experiment's line in each catalogue, as a reader finds it there.
CATALOGUES = {
    "docs/experiments.md": "| sleep | [`experiments/sleep.yml`](../experiments/sleep.yml) | a "
                           "new kind's experiment: two sleeps on this host |\n",
    "experiments/README.md": "| `sleep.yml` | two sleeps on this host (`kind: sleep`) |\n"}


def tracked() -> list[str]:
    """The checkout's files as git knows them (the working tree's versions are copied)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def python(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "TIERBENCH_RESULTS": str(cwd / "results"),
           "TIERBENCH_STATE_DIR": str(cwd / "state")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900, check=False)


def changes(copy: Path, files: list[str]) -> tuple[set[str], set[str]]:
    """(files new in the copy, files of the checkout it changed)."""
    now = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()
           and ".git" not in p.parts and "__pycache__" not in p.parts}
    changed = {f for f in files if (copy / f).read_bytes() != (ROOT / f).read_bytes()}
    return now - set(files), changed


def test_the_sample_kind_passes_the_shipped_kinds_checks_in_a_scratch_checkout(
        tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    files = tracked()
    for f in files:
        (copy / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, copy / f)
    for source, target in FILES.items():  # written: module, family, experiment; the schema
        shutil.copy2(source, copy / target)
    plan = python(copy, "-c", "from tierbench import runner\nfrom tierbench.kinds import "
                  "registry\nprint('\\n'.join(runner.plan_lines(registry.load_experiment("
                  "'sleep'))))")
    assert plan.returncode == 0, plan.stderr[-2000:]
    (copy / "tests/data/plans/sleep.txt").write_text(  # generated, as every stored plan
        plan.stdout.replace(f"{copy}/", "<checkout>/"))
    for page, line in CATALOGUES.items():
        with (copy / page).open("a") as fh:
            fh.write(line)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True)  # test_docs reads git's list

    new, changed = changes(copy, files)
    assert new == {*FILES.values(), "tests/data/plans/sleep.txt"}
    assert changed == set(CATALOGUES)

    done = python(copy, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-n", "0",
                  *CHECKS)
    assert done.returncode == 0, done.stdout[-4000:]
    passed = re.findall(r"^PASSED (\S+)", done.stdout, re.M)
    for check in ("test_kinds.py::test_the_registry_finds_every_kind_module",
                  "test_kinds.py::test_shipped_experiments_keep_the_contract[sleep]",
                  "test_schemas.py::test_shipped_experiment_schemas_are_current[sleep]",
                  "test_analysis_spec.py::test_family_files_are_valid_specs[sleep]",
                  "test_docs.py::test_every_experiment_is_documented[sleep]",
                  "test_architecture.py::test_plans_are_unchanged[sleep]",
                  "test_architecture.py::test_no_kind_imports_another[sleep]"):
        assert f"tests/{check}" in passed, check

    # ARCHITECTURE.md states this count
    text = " ".join((ROOT / "ARCHITECTURE.md").read_text().split())
    assert (f"{len(new)} new files ({len(FILES) - 1} written, 2 generated) and one line in "
            f"each of {len(changed)} catalogues") in text
