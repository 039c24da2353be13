"""Builds that still work next year: no image pins a Debian package version (the mirrors keep
only the newest), every image records what it installed, the Python floor is the same wherever
it is stated and true for the pins, and an OrangeFS tarball whose digest is not the expected one
is refused in one sentence before anything is built."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = sorted((ROOT / "images").glob("*/Dockerfile"))
SCRIPTS = sorted((ROOT / "setup").glob("*.sh"))
PACKAGE_LIST = "/usr/share/tierbench/debian-packages.txt"


def logical_lines(text: str) -> list[str]:
    """Lines with their backslash continuations joined."""
    return text.replace("\\\n", " ").splitlines()


def apt_pins(text: str) -> list[str]:
    """The package arguments of apt-get install/download commands that name a version
    (pkg=1.2-3, pkg=${PKG_VERSION}) and ARG defaults that look like Debian versions."""
    pins = []
    for line in logical_lines(text):
        for command in re.split(r"&&|\|\||;|\|", line):
            words = command.split()
            if "apt-get" not in words or not {"install", "download"} & set(words):
                continue
            pins += [w for w in words[words.index("apt-get") + 1:]
                     if re.match(r"[a-z0-9][a-z0-9+.-]*=", w)]  # a Debian package name=...
        found = re.match(r"\s*ARG\s+(\w+_VERSION)=(\S+)", line)
        if found:
            pins.append(f"{found.group(1)}={found.group(2)}")
    return pins


def test_the_pin_finder_finds_pins() -> None:
    # the test below can fail: every way a version was pinned before is found
    assert apt_pins("RUN apt-get update \\\n && apt-get install -y --no-install-recommends "
                    "apache2=2.4.71-1~deb12u1 fio \\\n && rm -rf x") == ["apache2=2.4.71-1~deb12u1"]
    assert apt_pins("ARG FIO_VERSION=3.33-3\nRUN apt-get install -y fio=${FIO_VERSION}") == [
        "FIO_VERSION=3.33-3", "fio=${FIO_VERSION}"]
    assert apt_pins('(cd "$tmp" && apt-get $opts download -q docker-compose=2.26.1-4 >/dev/null)'
                    ) == ["docker-compose=2.26.1-4"]
    assert apt_pins("RUN apt-get install -y -o Dpkg::Options::=--force-confold fio") == []


@pytest.mark.parametrize("path", DOCKERFILES + SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_image_or_setup_script_pins_a_debian_package_version(path: Path) -> None:
    # Debian's mirrors keep only the newest version of each package in a suite: a pinned one
    # breaks every build at the next point release. An exact rebuild goes through a snapshot of
    # the archive (DEBIAN_SNAPSHOT, setup/base-image.sh), which pins the whole archive instead.
    assert apt_pins(path.read_text()) == [], path


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_image_records_the_debian_packages_it_installed(path: Path) -> None:
    final = path.read_text().rsplit("\nFROM ", 1)[-1]  # the stage that becomes the image
    if "apt-get install" not in final:
        # proxy and web install nothing: they carry the list of the image they build on
        assert re.search(r"^ARG APACHE_IMAGE=", path.read_text(), re.M), path
        return
    runs = [ln for ln in logical_lines(final) if "apt-get install" in ln]
    assert all(f"dpkg-query -W -f '${{Package}}=${{Version}}\\n' > {PACKAGE_LIST}" in ln
               for ln in runs), path


def test_the_python_floor_is_the_same_wherever_it_is_stated() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert pyproject["tool"]["ruff"]["target-version"] == "py311"
    assert pyproject["tool"]["mypy"]["python_version"] == "3.11"
    assert "sys.version_info < (3, 11)" in (ROOT / "setup" / "venv.sh").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "Python >= 3.11" in readme and "Python >= 3.10" not in readme


def wheel_requires_python(name: str) -> str | None:
    """Requires-Python of an installed distribution."""
    return importlib.metadata.metadata(name).get("Requires-Python")


@pytest.mark.parametrize("name", ["numpy", "pandas", "scipy", "matplotlib", "pyarrow"])
def test_the_floor_is_the_pins_own(name: str) -> None:
    # 3.11 is the floor because the pinned versions themselves need it (pip's metadata): a
    # lower floor would pass setup/venv.sh's check and fail inside pip.
    assert wheel_requires_python(name).replace(" ", "") == ">=3.11"


def pinned(path: Path) -> dict[str, str]:
    """name -> version of the == pins of a requirements file (not following -r)."""
    out = {}
    for line in path.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line.strip())
        if found:
            out[found.group(1).lower().replace("_", "-")] = found.group(2)
    return out


def test_runtime_and_development_requirements_are_separate_and_complete() -> None:
    runtime = pinned(ROOT / "requirements.txt")
    dev = (ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev
    assert not {"ruff", "pytest", "pytest-xdist", "nbclient", "ipykernel", "locust"} & set(runtime)
    # every third-party module that tierbench, analysis and workloads import on the host comes
    # from requirements.txt (workloads/locust runs inside the load generator's image)
    dists = importlib.metadata.packages_distributions()
    # imported only where nothing but the tests and notebooks run them (requirements-dev.txt)
    dev_only = {"IPython": "analysis/notebook.py's show(), which runs inside a notebook kernel"}
    missing = set()
    for folder in ("tierbench", "analysis", "workloads"):
        for source in (ROOT / folder).rglob("*.py"):
            if "locust" in source.parts:
                continue
            for node in ast.walk(ast.parse(source.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module
                         and node.level == 0 else [])
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in dev_only or top in {
                            folder, "tierbench", "analysis", "workloads"}:
                        continue
                    for dist in dists.get(top, [top]):
                        if dist.lower().replace("_", "-") not in runtime:
                            missing.add(f"{source.relative_to(ROOT)}: {top} ({dist})")
    assert not missing, sorted(missing)


def orangefs_image(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    # an image tag nobody builds, so no real image or cached tarball is touched; none of the
    # caller's OrangeFS settings (CI exports them)
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORANGEFS_")}
    return subprocess.run([str(ROOT / "setup" / "orangefs-image.sh")], cwd=ROOT,
                          env={**base, "TIERBENCH_TAG": "tb-test-never-built", **env},
                          capture_output=True, text=True, timeout=120)


def test_an_orangefs_tarball_is_refused_unless_its_digest_is_the_one_given(
        tmp_path: Path) -> None:
    tarball = tmp_path / "orangefs-2.10.0.tar.gz"
    tarball.write_bytes(b"not the OrangeFS source")
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    cases = [
        # no digest given and none published for the upstream archive: nothing to check against
        ({}, f"has sha256 {sha} and no published digest of the OrangeFS 2.10.0 archive is known"),
        ({"ORANGEFS_SHA256": "0" * 64}, f"has sha256 {sha}, not ORANGEFS_SHA256={'0' * 64}: "
                                        "refusing it"),
        ({"ORANGEFS_SHA256": "abc"}, "ORANGEFS_SHA256=abc is not a sha256 digest"),
    ]
    cached = ROOT / "images" / "orangefs" / "source"
    before = sorted(p.name for p in cached.iterdir()) if cached.is_dir() else []
    for env, says in cases:
        done = orangefs_image(tmp_path, ORANGEFS_TARBALL=str(tarball), **env)
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert done.returncode == 1 and len(lines) == 1, (env, done.stderr)
        assert says in lines[0], (env, lines[0])
        assert f"ORANGEFS_SHA256={sha}" in lines[0] or "not a sha256" in lines[0]
    assert sorted(p.name for p in cached.iterdir()) == before  # nothing cached, nothing built


@pytest.mark.parametrize(("env", "says"), [
    ({"DEBIAN_SNAPSHOT": "20261127T000000Z"},
     "DEBIAN_SNAPSHOT is set but DEBIAN_SNAPSHOT_URL is not: set it to the address of the Debian "
     "snapshot service you use"),
    ({"DEBIAN_SNAPSHOT": "yesterday", "DEBIAN_SNAPSHOT_URL": "http://127.0.0.1:9"},
     "DEBIAN_SNAPSHOT=yesterday is not a snapshot time like 20261127T000000Z"),
    ({"DEBIAN_SNAPSHOT": "20261127T000000Z", "DEBIAN_SNAPSHOT_URL": "http://127.0.0.1:9",
      "BASE_IMAGE": "debian:bookworm-slim"},
     "DEBIAN_SNAPSHOT needs a base bootstrapped from that snapshot, not BASE_IMAGE="),
], ids=["no-url", "bad-time", "with-base-image"])
def test_a_snapshot_build_that_cannot_work_is_refused_in_one_sentence(env: dict[str, str],
                                                                       says: str) -> None:
    base = {k: v for k, v in os.environ.items()
            if k not in ("BASE_IMAGE", "DEBIAN_SNAPSHOT", "DEBIAN_SNAPSHOT_URL")}
    done = subprocess.run([str(ROOT / "setup" / "base-image.sh")], env={**base, **env},
                          capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and done.stdout == "", done.stderr
    assert says in lines[0], lines[0]
