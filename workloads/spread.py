"""Which disk of a web server holds each file: 004 §5.2.4's file distributions (Table 4).

A web server with several disks that are not striped keeps each file whole on one of them. The
strategies deal the files of a file set over the disks:

  single      every file on the first disk (004's Single Disk)
  random      each file on a disk drawn at random (seeded)
  popularity  files sorted by popularity (rank 0, the most popular, first), dealt round-robin
  size        files sorted by size (smallest first), dealt round-robin

The control program writes the result as a map file (one `URL-path dN` line per file, Apache's
RewriteMap txt format); the `fileset` job writes each file to the disk the map names and the web
tier serves it from there, so the three always agree.
"""

from __future__ import annotations

import random

STRATEGIES = ("single", "random", "popularity", "size")
MAP_NAME = "placement.txt"  # at the top of a server's disk root: URL path -> disk folder


class SpreadError(ValueError):
    """A distribution that cannot be made."""


def disk_name(index: int) -> str:
    """Folder of disk `index` (0-based) under a server's disk root: d1, d2, ..."""
    return f"d{index + 1}"


def assign(sizes: list[int], strategy: str, disks: int, popularity: list[int] | None = None,
           seed: int = 1) -> list[int]:
    """The disk (0-based) of every file, given the files' sizes in file-set order and, for
    `popularity`, the file index of each popularity rank (rank 0 first)."""
    if disks < 1:
        raise SpreadError(f"disks must be >= 1, got {disks}")
    n = len(sizes)
    if strategy == "single":
        return [0] * n
    if strategy == "random":
        rng = random.Random(seed)
        return [rng.randrange(disks) for _ in range(n)]
    if strategy == "popularity":
        if popularity is None or sorted(popularity) != list(range(n)):
            raise SpreadError("popularity needs the file index of every popularity rank")
        order = list(popularity)
    elif strategy == "size":
        order = sorted(range(n), key=lambda i: (sizes[i], i))
    else:
        raise SpreadError(f"strategy must be one of {', '.join(STRATEGIES)}, got "
                             f"{strategy!r}")
    out = [0] * n
    for position, index in enumerate(order):
        out[index] = position % disks
    return out


def bytes_per_disk(sizes: list[int], disk_of: list[int], disks: int) -> list[int]:
    """Bytes each disk holds under an assignment."""
    out = [0] * disks
    for size, d in zip(sizes, disk_of):
        out[d] += size
    return out


def map_lines(paths: list[str], disk_of: list[int]) -> list[str]:
    """The map file's lines: `URL-path dN` per file."""
    return [f"{path} {disk_name(d)}" for path, d in zip(paths, disk_of)]


def read_map(text: str) -> dict[str, str]:
    """URL path -> disk folder, from a map file's text (blank lines and # comments skipped)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not parts[0].startswith("#"):
            out[parts[0]] = parts[1]
    return out
