"""Traces: the ordered URL paths a load generator replays.

On-disk format (read by every engine): UTF-8 text, one request path per line; lines starting
with `#` are comments (the first ones describe how the trace was made). Each closed-loop client
replays the trace from its own offset (client i of N starts at i * len / N), one request at a
time, wrapping around at the end.
"""

from __future__ import annotations

import bisect
import itertools
import random
from pathlib import Path

from workloads import filesets


class TraceError(ValueError):
    """A trace spec that cannot be built."""


def zipf_weights(n: int, alpha: float) -> list[float]:
    """Normalised Zipf probabilities of ranks 1..n: p(k) proportional to 1 / k**alpha."""
    raw = [1.0 / (k**alpha) for k in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def zipf_sample(n: int, alpha: float, count: int, seed: int) -> list[int]:
    """`count` zero-based ranks drawn from Zipf(alpha) over n items, reproducible from seed."""
    cumulative = list(itertools.accumulate(zipf_weights(n, alpha)))
    rng = random.Random(seed)
    return [min(bisect.bisect_left(cumulative, rng.random()), n - 1) for _ in range(count)]


def build(spec: dict, seed: int) -> list[str]:
    """The request paths of one trace spec (kind single or zipf) over its file set."""
    kind = spec.get("kind")
    fileset = fileset_of(spec)
    paths = [p for p, _ in filesets.files(fileset)]
    if kind == "single":
        return paths
    if kind == "zipf":
        alpha = float(spec["alpha"])
        count = int(spec.get("requests", 10000))
        if alpha < 0 or count <= 0:
            raise TraceError(f"zipf needs alpha >= 0 and requests > 0, got {spec}")
        # Popularity rank -> file: a seeded shuffle, so popularity does not follow file order.
        order = list(range(len(paths)))
        random.Random(seed + 1).shuffle(order)
        return [paths[order[r]] for r in zipf_sample(len(paths), alpha, count, seed)]
    raise TraceError(f"unknown trace kind {kind!r} (expected single or zipf)")


def fileset_of(spec: dict) -> dict:
    """The file-set spec a trace spec draws from."""
    if spec.get("kind") == "single":
        return {"kind": "single", "size": int(spec["size"])}
    if "fileset" not in spec:
        raise TraceError(f"trace {spec.get('name', '?')!r} has no fileset")
    return dict(spec["fileset"])


def write(path: Path, paths: list[str], header: str) -> None:
    """Write a trace file in the on-disk format."""
    lines = [f"# {line}" for line in header.splitlines()] + paths
    path.write_text("\n".join(lines) + "\n")


def read(path: Path) -> list[str]:
    """Read a trace file; raises TraceError when it holds no request."""
    paths = [ln.strip() for ln in path.read_text().splitlines()]
    paths = [p for p in paths if p and not p.startswith("#")]
    if not paths:
        raise TraceError(f"trace {path} holds no request")
    return paths
