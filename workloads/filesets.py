"""Deterministic file sets: every set is a list of (path, size) computed from its spec and seed.

The stack's one-shot `fileset` job writes them into the docroot volume; the control program
computes the same list on the host to build traces, so the two always agree.

Spec kinds (one dict each, as in experiment files):
  {"kind": "single", "size": 4096}                       one file of that many bytes
  {"kind": "uniform-log", "files": 500, "min_size": 1024, "max_size": 65536, "seed": 1}
                                                         sizes drawn log-uniformly in [min, max]
  {"kind": "class", "class": 2, "seed": 1}               004 Table 2 class 0-4 (CLASSES): sizes
                                                         log-uniform in [1 KiB, max], files drawn
                                                         until the working set is reached
  {"kind": "same-size", "files": 1501, "size": 1048576}  files of one size: the first is the
                                                         hot file of a hit-ratio trace, the
                                                         others are each requested once
  {"kind": "worldcup", "log": "wc_day46_1.gz", "requests": 100000}
                                                         one file per object of a World Cup 98
                                                         log, of its logged size (worldcup.py)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
from pathlib import Path

from workloads import spread

DOCROOT = Path(os.environ.get("DOCROOT", "/srv/docroot"))


KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# 004 §4.3 Table 2: class -> (largest file, working set). Smallest file 1 KiB, Zipf alpha 0.9.
CLASSES: dict[int, tuple[int, int]] = {
    0: (250 * KIB, 25 * MIB),
    1: (1 * MIB, 100 * MIB),
    2: (4 * MIB, 450 * MIB),
    3: (16 * MIB, 2 * GIB),
    4: (64 * MIB, 6 * GIB),
}
CLASS_MIN_SIZE = KIB
CHUNK = 1 << 20


class FilesetError(ValueError):
    """A file-set spec that cannot be generated."""


def set_name(spec: dict) -> str:
    """Directory name of a set under the docroot, unique for its parameters."""
    if spec["kind"] == "single":
        return f"single-{spec['size']}"
    if spec["kind"] == "uniform-log":
        seed = spec.get("seed", 1)
        return f"log-{spec['files']}x{spec['min_size']}-{spec['max_size']}-s{seed}"
    if spec["kind"] == "class":
        return f"class{spec['class']}-s{spec.get('seed', 1)}"
    if spec["kind"] == "same-size":
        return f"same-{spec['size']}x{spec['files']}"
    if spec["kind"] == "worldcup":
        from workloads import worldcup

        return worldcup.set_name(spec)
    raise FilesetError(f"unknown file-set kind {spec['kind']!r} "
                       "(expected single, uniform-log, class, same-size or worldcup)")


def class_sizes(number: int, seed: int) -> list[int]:
    """Sizes of a 004 Table 2 class: log-uniform in [1 KiB, max] until the working set is met.

    Files are drawn one at a time; the first draw that would overshoot the working set is cut to
    the bytes still missing (kept only when >= 1 KiB), so the total is within 1 KiB of its target.
    """
    if number not in CLASSES:
        raise FilesetError(f"class must be one of {sorted(CLASSES)}, got {number!r}")
    top, target = CLASSES[number]
    rng = random.Random(seed * 1000 + number)
    lo, hi = math.log(CLASS_MIN_SIZE), math.log(top)
    sizes: list[int] = []
    total = 0
    while True:
        size = round(math.exp(rng.uniform(lo, hi)))
        if total + size >= target:
            rest = target - total
            if rest >= CLASS_MIN_SIZE:
                sizes.append(rest)
            return sizes
        sizes.append(size)
        total += size


def files(spec: dict) -> list[tuple[str, int]]:
    """The (URL path, size in bytes) of every file in the set, in popularity-rank order."""
    name = set_name(spec)
    if spec["kind"] == "single":
        size = int(spec["size"])
        if size <= 0:
            raise FilesetError(f"single file size must be positive, got {size}")
        return [(f"/{name}/file.bin", size)]
    if spec["kind"] == "class":
        sizes = class_sizes(spec["class"], int(spec.get("seed", 1)))
        return [(f"/{name}/f{i:05d}.bin", s) for i, s in enumerate(sizes)]
    if spec["kind"] == "same-size":
        n, size = int(spec["files"]), int(spec["size"])
        if n <= 0 or size <= 0:
            raise FilesetError(f"same-size needs files > 0 and size > 0, got {spec}")
        return [(f"/{name}/f{i:06d}.bin", size) for i in range(n)]
    if spec["kind"] == "worldcup":
        from workloads import worldcup

        return worldcup.files(spec)
    n, lo, hi = int(spec["files"]), int(spec["min_size"]), int(spec["max_size"])
    if n <= 0 or lo <= 0 or hi < lo:
        raise FilesetError(f"uniform-log needs files > 0 and 0 < min_size <= max_size, got {spec}")
    rng = random.Random(int(spec.get("seed", 1)))
    sizes = [round(math.exp(rng.uniform(math.log(lo), math.log(hi)))) for _ in range(n)]
    return [(f"/{name}/f{i:05d}.bin", s) for i, s in enumerate(sizes)]


def total_bytes(spec: dict) -> int:
    """The working set of a file set: the sum of its file sizes."""
    return sum(size for _, size in files(spec))


def _block(path: str, size: int) -> bytes:
    """Incompressible, reproducible bytes (at most 1 MiB) that a file repeats."""
    seed = hashlib.sha256(path.encode()).digest()
    return hashlib.shake_256(seed).digest(min(size, CHUNK))


def _content(path: str, size: int) -> bytes:
    """Reproducible bytes for one file: its block repeated up to its size."""
    block = _block(path, size)
    return (block * (size // len(block) + 1))[:size]


def _write_file(target: Path, rel: str, size: int) -> None:
    """Write one file in 1 MiB chunks (large files never sit whole in memory)."""
    block = _block(rel, size)
    with target.open("wb") as fh:
        left = size
        while left > 0:
            piece = block[:left]
            fh.write(piece)
            left -= len(piece)


def write(specs: list[dict], docroot: Path = DOCROOT, below: int | None = None,
          disks: dict[str, str] | None = None) -> tuple[int, int]:
    """Write every file of the sets that is missing or has the wrong size (only files smaller
    than ``below`` bytes when given); returns (written, kept). With ``disks`` (URL path -> disk
    folder, workloads.spread's map) each file goes to that folder under docroot."""
    written = kept = 0
    for spec in specs:
        for rel, size in files(spec):
            if below is not None and size >= below:
                continue
            if disks is not None:
                if rel not in disks:
                    raise FilesetError(f"{rel} is missing from the disk map of {docroot}")
                target = docroot / disks[rel] / rel.lstrip("/")
            else:
                target = docroot / rel.lstrip("/")
            if target.is_file() and target.stat().st_size == size:
                kept += 1
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            _write_file(tmp, rel, size)
            tmp.chmod(0o644)
            tmp.rename(target)
            written += 1
    return written, kept


def main() -> int:
    """Entry point of the fileset job: FILESETS holds a JSON list of specs."""
    try:
        specs = json.loads(os.environ.get("FILESETS", "[]"))
        # FILESET_ROOTS: the web servers' disk roots (emulated or real disk systems, 004 §5),
        # instead of the docroot volume; a root with a placement map spreads its files over
        # the disks the map names (workloads/spread.py)
        roots = [Path(r) for r in json.loads(os.environ.get("FILESET_ROOTS") or "null")
                 or [str(DOCROOT)]]
        written = kept = 0
        for root in roots:
            map_file = root / spread.MAP_NAME
            disks = spread.read_map(map_file.read_text()) if map_file.is_file() else None
            w, k = write(specs, root, disks=disks)
            written, kept = written + w, kept + k
        # HOT: {"sets": [...], "below": bytes}: the small files of those sets also go to HOT_DIR
        # (a tmpfs the web tier serves them from first: 004 §4.4's hybrid placement).
        hot = json.loads(os.environ.get("HOT") or "null")
        if hot:
            hot_dir = Path(os.environ.get("HOT_DIR", "/srv/hot"))
            hw, hk = write(hot["sets"], hot_dir, int(hot["below"]))
            print(f"fileset: files below {hot['below']} bytes of {len(hot['sets'])} set(s) in "
                  f"{hot_dir}: {hw} written, {hk} kept")
    except (FilesetError, KeyError, ValueError, TypeError) as exc:
        print(f"fileset: bad FILESETS or HOT specification: {exc}", file=sys.stderr)
        return 2
    print(f"fileset: {len(specs)} set(s) in {', '.join(map(str, roots))}: {written} file(s) "
          f"written, {kept} kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
