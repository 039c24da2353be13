"""Deterministic file sets: every set is a list of (path, size) computed from its spec and seed.

The stack's one-shot `fileset` job writes them into the docroot volume; the control program
computes the same list on the host to build traces, so the two always agree.

Spec kinds (one dict each, as in experiment files):
  {"kind": "single", "size": 4096}                       one file of that many bytes
  {"kind": "uniform-log", "files": 500, "min_size": 1024, "max_size": 65536, "seed": 1}
                                                         sizes drawn log-uniformly in [min, max]
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
from pathlib import Path

DOCROOT = Path(os.environ.get("DOCROOT", "/srv/docroot"))


class FilesetError(ValueError):
    """A file-set spec that cannot be generated."""


def set_name(spec: dict) -> str:
    """Directory name of a set under the docroot, unique for its parameters."""
    if spec["kind"] == "single":
        return f"single-{spec['size']}"
    if spec["kind"] == "uniform-log":
        seed = spec.get("seed", 1)
        return f"log-{spec['files']}x{spec['min_size']}-{spec['max_size']}-s{seed}"
    raise FilesetError(f"unknown file-set kind {spec['kind']!r} (expected single or uniform-log)")


def files(spec: dict) -> list[tuple[str, int]]:
    """The (URL path, size in bytes) of every file in the set, in popularity-rank order."""
    name = set_name(spec)
    if spec["kind"] == "single":
        size = int(spec["size"])
        if size <= 0:
            raise FilesetError(f"single file size must be positive, got {size}")
        return [(f"/{name}/file.bin", size)]
    n, lo, hi = int(spec["files"]), int(spec["min_size"]), int(spec["max_size"])
    if n <= 0 or lo <= 0 or hi < lo:
        raise FilesetError(f"uniform-log needs files > 0 and 0 < min_size <= max_size, got {spec}")
    rng = random.Random(int(spec.get("seed", 1)))
    sizes = [round(math.exp(rng.uniform(math.log(lo), math.log(hi)))) for _ in range(n)]
    return [(f"/{name}/f{i:05d}.bin", s) for i, s in enumerate(sizes)]


def _content(path: str, size: int) -> bytes:
    """Incompressible, reproducible bytes for one file."""
    seed = hashlib.sha256(path.encode()).digest()
    block = hashlib.shake_256(seed).digest(min(size, 1 << 20))
    return (block * (size // len(block) + 1))[:size]


def write(specs: list[dict], docroot: Path = DOCROOT) -> tuple[int, int]:
    """Write every file of the sets that is missing or has the wrong size; returns (written, kept)."""
    written = kept = 0
    for spec in specs:
        for rel, size in files(spec):
            target = docroot / rel.lstrip("/")
            if target.is_file() and target.stat().st_size == size:
                kept += 1
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(_content(rel, size))
            tmp.chmod(0o644)
            tmp.rename(target)
            written += 1
    return written, kept


def main() -> int:
    """Entry point of the fileset job: FILESETS holds a JSON list of specs."""
    try:
        specs = json.loads(os.environ.get("FILESETS", "[]"))
        written, kept = write(specs)
    except (FilesetError, KeyError, ValueError, TypeError) as exc:
        print(f"fileset: bad FILESETS specification: {exc}", file=sys.stderr)
        return 2
    print(f"fileset: {len(specs)} set(s) in {DOCROOT}: {written} file(s) written, {kept} kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
