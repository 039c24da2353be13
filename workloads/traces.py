"""Traces: the ordered URL paths a load generator replays.

On-disk format (read by both engines, Locust and wrk): UTF-8 text, one request path per line;
lines starting with `#` are comments (the first ones describe how the trace was made). One
comment is a directive: `# subset-size: S`. Without it, client i of N replays the whole trace
from offset i * L / N (L lines), one request at a time, wrapping at the end. With it, the trace
is K = L / S consecutive subsets of S requests, and client i replays subset i mod K from its
start, wrapping within it: each client has its own subset (000 §5.2.1).

Trace kinds (experiment `traces:` entries):
  single    {size}                               one file, every request
  hit-ratio {size, hit_ratio, requests}          004 §5.2.2: one hot file asked for with share
                                                 hit_ratio, evenly spread; every other request
                                                 for a file of the same size never asked for
                                                 before (a `same-size` set of 1 + requests files)
  zipf      {alpha, requests, fileset, mapping}  Zipf(alpha) over the file set's N files
  worldcup  {log, requests, skip}                the successful GETs of a World Cup 98 log
  mix       {per_client, subsets, parts: [{site, weight, alpha, fileset, mapping}]}
                                                 several sites at once (004 §4.4), each with
                                                 its own clients: `subsets` per-client subsets
                                                 of `per_client` requests, drawn site by site in
                                                 the pattern of the weights (1:1 -> bg, fg, bg,
                                                 fg, ...), every one with its own seed; so of
                                                 every sum(weights) clients weight_k replay site k
`per_client: S` with `subsets: K` (zipf) builds K independent subsets of S requests each, drawn
with seeds seed + k; on single traces every subset is the same file, so it changes nothing.

Dynamic content (004 §7.1): a single or zipf trace with `dynamic: {share, query, work,
range_rows, requests}` turns the share `share` of its requests (evenly spread, as hit-ratio
spreads its hot requests) into requests for the application tier, `/dyn/QUERY/SIZE?k=KEY&w=WORK`
(`&n=ROWS` for a range read), SIZE being the size of the file the static request asked for, so
the mix keeps the trace's size distribution; KEY picks the database row (seeded). QUERY is
`point` (a row by key), `range` (`range_rows` rows from there) or `write` (a row inserted; the
engines send it as a POST). WORK is the application tier's computation per request, in passes
of SHA-256 over the body: proportional to SIZE. A trace shorter than `requests` (a single file)
is repeated to that length first, so that its dynamic requests carry different keys.
`mapping` (zipf) maps popularity ranks to files: `random` (a seeded shuffle, the default),
`small-first` (the most popular file is the smallest) or `large-first`.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from workloads import filesets

if TYPE_CHECKING:
    import numpy as np

MAPPINGS = ("random", "small-first", "large-first")
SUBSET_DIRECTIVE = "subset-size:"
DYNAMIC_PREFIX = "/dyn/"  # requests for the application tier
WRITE_PREFIX = "/dyn/write/"  # dynamic requests that insert a row (sent as POST)
QUERIES = ("point", "range", "write")
DYNAMIC_KINDS = ("single", "zipf")
DYNAMIC_MAX_BYTES = 16 << 20  # the application tier builds each body in memory
DYNAMIC_DEFAULTS = {"share": 1.0, "query": "point", "work": 1, "range_rows": 10,
                    "requests": 1000}
INDEX_STEP = 4096  # request lines between two byte offsets of a trace's index


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


def rank_order(files: list[tuple[str, int]], mapping: str, seed: int) -> list[int]:
    """File index of each popularity rank (rank 0 = most popular)."""
    order = list(range(len(files)))
    if mapping == "random":
        random.Random(seed + 1).shuffle(order)
    elif mapping == "small-first":
        order.sort(key=lambda i: (files[i][1], i))
    elif mapping == "large-first":
        order.sort(key=lambda i: (-files[i][1], i))
    else:
        raise TraceError(f"mapping must be one of {', '.join(MAPPINGS)}, got {mapping!r}")
    return order


def chunks(spec: dict, seed: int) -> Iterator[list[str]]:
    """The request paths of one trace spec in order, chunk by chunk: a World Cup log's as they
    are decoded (never all at once), every other kind's as one chunk."""
    if spec.get("kind") == "worldcup":
        from workloads import worldcup

        yield from worldcup.trace_chunks(spec)
    else:
        yield build(spec, seed)


def build(spec: dict, seed: int) -> list[str]:
    """The request paths of one trace spec (kind single, zipf, worldcup or mix) as one list,
    with its dynamic requests when it has a `dynamic` block."""
    if spec.get("dynamic") is not None:
        static = build_static({k: v for k, v in spec.items() if k != "dynamic"}, seed)
        sizes = dict(filesets.files(fileset_of(spec)))
        return dynamize(static, sizes, dynamic_of(spec), seed, subset_size(spec) is None)
    return build_static(spec, seed)


def build_static(spec: dict, seed: int) -> list[str]:
    """The request paths of a trace spec without its dynamic block."""
    kind = spec.get("kind")
    if kind == "mix":
        return build_mix(spec, seed)
    if kind == "worldcup":
        return [p for chunk in chunks(spec, seed) for p in chunk]
    fileset = fileset_of(spec)
    files = filesets.files(fileset)
    paths = [p for p, _ in files]
    if kind == "single":
        return paths
    if kind == "hit-ratio":
        return hit_ratio_paths(paths, float(spec["hit_ratio"]), int(spec["requests"]))
    if kind == "zipf":
        alpha = float(spec["alpha"])
        per_client = spec.get("per_client")
        count = int(per_client if per_client is not None else spec.get("requests", 10000))
        subsets = int(spec.get("subsets", 1)) if per_client is not None else 1
        if alpha < 0 or count <= 0 or subsets <= 0:
            raise TraceError(f"zipf needs alpha >= 0, requests > 0 and subsets > 0, got {spec}")
        order = rank_order(files, spec.get("mapping", "random"), seed)
        out: list[str] = []
        for k in range(subsets):
            out += [paths[order[r]] for r in zipf_sample(len(paths), alpha, count, seed + 7919 * k)]
        return out
    raise TraceError(f"unknown trace kind {kind!r} (expected single, hit-ratio, zipf or worldcup)")


def dynamic_of(spec: dict) -> dict:
    """A trace's dynamic block with every default filled in ({} for a static trace)."""
    dyn = spec.get("dynamic")
    return {} if dyn is None else {**DYNAMIC_DEFAULTS, **dyn}


def evenly(i: int, share: float) -> bool:
    """Whether request i is one of the `share` spread evenly over a sequence (the share of
    chosen requests among the first n is floor(n * share) / n, for every n)."""
    return math.floor((i + 1) * share) > math.floor(i * share)


def dynamize(paths: list[str], sizes: dict[str, int], dyn: dict, seed: int,
             stretch: bool = True) -> list[str]:
    """Static paths with the share `dyn["share"]` turned into dynamic requests of the same
    sizes (module docstring); `stretch`: repeat the paths to `dyn["requests"]` first."""
    share, query = float(dyn["share"]), str(dyn["query"])
    if not 0 <= share <= 1 or query not in QUERIES:
        raise TraceError(f"dynamic needs 0 <= share <= 1 and query one of {', '.join(QUERIES)}, "
                         f"got {share}, {query!r}")
    if stretch and len(paths) < int(dyn["requests"]):
        paths = list(itertools.islice(itertools.cycle(paths), int(dyn["requests"])))
    rng = random.Random(seed * 1000003 + 4099)
    extra = f"&n={int(dyn['range_rows'])}" if query == "range" else ""
    out = []
    for i, path in enumerate(paths):
        if not evenly(i, share):
            out.append(path)
            continue
        size = sizes[path]
        if size > DYNAMIC_MAX_BYTES:
            raise TraceError(f"a dynamic request is at most {DYNAMIC_MAX_BYTES >> 20} MiB (the "
                             f"application tier builds each body in memory); {path} has "
                             f"{size} bytes: use a file set of smaller files")
        out.append(f"{DYNAMIC_PREFIX}{query}/{size}?k={rng.randrange(1 << 31)}"
                   f"&w={int(dyn['work'])}{extra}")
    return out


def facts(spec: dict) -> dict:
    """What the analysis needs to know of a trace, written into every summary row (so that it
    never guesses from the trace's name): its kind, file size (single-file and hit-ratio
    traces), Zipf alpha, workload class (004 Table 2) and hit ratio, where they apply."""
    fileset = got if isinstance(got := spec.get("fileset"), dict) else {}
    return {"trace_kind": spec.get("kind"),
            "size_bytes": spec.get("size"),
            "alpha": spec.get("alpha"),
            "class": fileset.get("class") if fileset.get("kind") == "class" else None,
            "hit_ratio": spec.get("hit_ratio")}


def content(spec: dict) -> str:
    """static, dynamic or mixed: what a trace asks for."""
    share = float(dynamic_of(spec).get("share", 0.0))
    return "static" if share == 0 else "dynamic" if share == 1 else "mixed"


def hit_ratio_paths(paths: list[str], hit_ratio: float, requests: int) -> list[str]:
    """004 §5.2.2: request i is for the hot file paths[0] when it keeps the share of hot
    requests so far at `hit_ratio` (evenly spread), else for the next file never asked for
    before; after a first miss on the hot file, every hot request can hit the page cache."""
    if not 0 <= hit_ratio <= 1 or requests <= 0:
        raise TraceError(f"hit-ratio needs 0 <= hit_ratio <= 1 and requests > 0, got "
                         f"{hit_ratio}, {requests}")
    out, cold = [], 1
    for i in range(requests):
        if evenly(i, hit_ratio):
            out.append(paths[0])
        else:
            out.append(paths[cold])
            cold += 1
    return out


def mix_pattern(spec: dict) -> list[int]:
    """Part index of each client slot in one cycle of the weights: [0, 1] for 1:1, [0, 0, 1]
    for 2:1."""
    return [k for k, part in enumerate(spec["parts"]) for _ in range(int(part.get("weight", 1)))]


def build_mix(spec: dict, seed: int) -> list[str]:
    """`subsets` Zipf subsets of `per_client` requests; subset j from part pattern[j % len],
    each with its own seed, so every client of a site replays its own requests."""
    pattern, size = mix_pattern(spec), int(spec["per_client"])
    out: list[str] = []
    for j in range(int(spec["subsets"])):
        k = pattern[j % len(pattern)]
        part = {key: v for key, v in spec["parts"][k].items() if key not in ("site", "weight")}
        out += build_static({**part, "requests": size}, seed + 104729 * (k + 1) + 7919 * j)
    return out


def sites(spec: dict) -> dict[str, str]:
    """Site name -> the URL prefix of its file set, for a mix trace ({} for other kinds)."""
    if spec.get("kind") != "mix":
        return {}
    return {part["site"]: f"/{filesets.set_name(fileset_of(part))}/" for part in spec["parts"]}


def subset_size(spec: dict) -> int | None:
    """The per-client subset size a built trace of this spec carries (None: whole trace)."""
    if spec.get("kind") in ("zipf", "mix") and spec.get("per_client") is not None:
        return int(spec["per_client"])
    return None


def filesets_of(spec: dict) -> list[dict]:
    """Every file-set spec a trace spec draws from (one, or one per part of a mix)."""
    if spec.get("kind") == "mix":
        return [fileset_of(part) for part in spec["parts"]]
    return [fileset_of(spec)]


def fileset_of(spec: dict) -> dict:
    """The file-set spec a trace spec draws from (of a single-set kind)."""
    if spec.get("kind") == "single":
        return {"kind": "single", "size": int(spec["size"])}
    if spec.get("kind") == "hit-ratio":
        # one set per size and request count: the hit ratios of that size share it
        return {"kind": "same-size", "size": int(spec["size"]), "files": 1 + int(spec["requests"])}
    if spec.get("kind") == "worldcup":
        return {k: spec[k] for k in ("kind", "log", "requests", "skip") if k in spec}
    if "fileset" not in spec:
        raise TraceError(f"trace {spec.get('name', '?')!r} has no fileset")
    return dict(spec["fileset"])


def write(path: Path, paths: list[str], header: str, subset: int | None = None) -> None:
    """Write a trace file in the on-disk format (with the subset directive when given)."""
    write_chunks(path, [paths], header, subset)


def index_path(path: Path) -> Path:
    """The index beside a trace file: NAME.txt -> NAME.txt.idx."""
    return path.with_name(path.name + ".idx")


def write_chunks(path: Path, chunks_: Iterable[list[str]], header: str,
                 subset: int | None = None) -> int:
    """Write a trace file chunk by chunk (memory: one chunk), and its index: the number of
    requests, the subset size and the byte offset of every INDEX_STEP-th request line, so that
    an engine can start any client at its own place without reading the rest. Returns the
    number of requests; a trace that is not whole subsets is removed and refused."""
    lines = [f"# {line}" for line in header.splitlines()]
    if subset is not None:
        if subset <= 0:
            raise TraceError(f"a trace cannot be cut in subsets of {subset}")
        lines.append(f"# {SUBSET_DIRECTIVE} {subset}")
    offsets: list[int] = []
    count = 0
    with path.open("wb") as fh:
        fh.write(("\n".join(lines) + "\n").encode() if lines else b"")
        for chunk in chunks_:
            if not chunk:
                continue
            data = ("\n".join(chunk) + "\n").encode()
            first = -count % INDEX_STEP  # the chunk's first line that starts a step
            if first < len(chunk):
                starts = _line_starts(data)
                offsets += [fh.tell() + int(starts[i])
                            for i in range(first, len(chunk), INDEX_STEP)]
            fh.write(data)
            count += len(chunk)
    if count == 0 or (subset is not None and count % subset):
        path.unlink()
        raise TraceError(f"a trace of {count} requests cannot be cut in subsets of {subset}"
                         if count else f"trace {path.name} would hold no request")
    index_path(path).write_text(
        f"# index of {path.name}: requests, subset size (0: none), lines per step, then the "
        f"byte offset of request line 0, step, 2 x step, ...\nlines {count}\n"
        f"subset {subset or 0}\nstep {INDEX_STEP}\n" + "".join(f"{o}\n" for o in offsets))
    return count


def _line_starts(data: bytes) -> np.ndarray:
    """Byte offset of every line in a block of whole lines."""
    # numpy only here, where traces are written: the engines' replay (Locust's trace_replay)
    # imports this module in every load run, and numpy's import took 0.04 CPU-s of each there
    import numpy as np

    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
    return np.concatenate([[0], ends[:-1] + 1])


def read_with_subset(path: Path) -> tuple[list[str], int | None]:
    """Read a trace file: its paths and its subset size (None when it has none)."""
    paths, subset = [], None
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("#"):
            body = line[1:].strip()
            if body.startswith(SUBSET_DIRECTIVE):
                subset = int(body[len(SUBSET_DIRECTIVE):])
        elif line:
            paths.append(line)
    if not paths:
        raise TraceError(f"trace {path} holds no request")
    if subset is not None and (subset <= 0 or len(paths) % subset):
        raise TraceError(f"trace {path}: {len(paths)} requests are not whole subsets of {subset}")
    return paths, subset


def read(path: Path) -> list[str]:
    """Read a trace file; raises TraceError when it holds no request."""
    return read_with_subset(path)[0]


def client_range(lines: int, subset: int | None, client: int,
                 clients: int) -> tuple[int, int, int]:
    """The format's rule as request line numbers: client `client` of `clients` replays lines
    [lo, hi) from `start`, wrapping to lo at hi."""
    if subset is None:
        return 0, lines, (client * lines) // max(clients, 1)
    k = client % (lines // subset)
    return k * subset, (k + 1) * subset, k * subset


def client_sequence(paths: list[str], subset: int | None, client: int, clients: int) -> list[str]:
    """The requests client `client` of `clients` replays in order, wrapping (the format's rule)."""
    lo, hi, start = client_range(len(paths), subset, client, clients)
    return paths[start:hi] + paths[lo:start]


class Index:
    """A trace's index (written by write_chunks): requests, subset size, byte offsets."""

    def __init__(self, path: Path) -> None:
        where = index_path(path)
        try:
            text = where.read_text().split("\n")
            head = dict(line.split() for line in text[1:4])
            self.lines, self.step = int(head["lines"]), int(head["step"])
            self.subset = int(head["subset"]) or None
            self.offsets = [int(x) for x in text[4:] if x]
        except (OSError, ValueError, KeyError) as exc:
            raise TraceError(f"trace {path} has no usable index {where.name} ({exc}): write "
                             "traces with workloads.traces.write or write_chunks") from None

    def seek(self, fh, line: int) -> None:  # noqa: ANN001 (a binary file)
        """Position fh at the start of request line `line`."""
        fh.seek(self.offsets[line // self.step])
        for _ in range(line % self.step):
            fh.readline()


# A client reads its sequence this many requests at a time (Cursor, and wrk/replay.lua's ring):
# memory of AHEAD requests per client whatever the trace's length, and a sequence of at most
# AHEAD requests (a single-file trace, short subsets) is read once and then cycled in memory.
AHEAD = 64


class Cursor:
    """One client's requests read lazily from a trace file (the format's rule): it opens the
    file at its own place through the index and reads AHEAD lines at a time, so that neither
    memory nor start-up grow with the trace; a sequence of at most AHEAD lines is read once
    (the file is then closed) and cycled. (A line per request, with a seek per request on a
    one-line trace, took 2.6 us a request on this project's shared 2-core VM; from a block
    0.1-0.3 us.)"""

    def __init__(self, path: Path, client: int, clients: int) -> None:
        index = Index(path)
        self.lo, self.hi, self.pos = client_range(index.lines, index.subset, client, clients)
        self._fh = path.open("rb")
        index.seek(self._fh, self.lo)
        self._lo_at = self._fh.tell()
        index.seek(self._fh, self.pos)
        self._block: Iterator[str]
        if self.hi - self.lo <= AHEAD:
            self._block = itertools.cycle(self._read(self.hi - self.lo))
            self._fh.close()
        else:
            self._block = iter(())

    def _read(self, n: int) -> list[str]:
        """The next n lines of the sequence, wrapping from hi to lo."""
        out = []
        for _ in range(n):
            if self.pos >= self.hi:
                self._fh.seek(self._lo_at)
                self.pos = self.lo
            self.pos += 1
            out.append(self._fh.readline().rstrip(b"\n").decode())
        return out

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> str:
        try:
            return next(self._block)
        except StopIteration:
            self._block = iter(self._read(AHEAD))
            return next(self._block)

    def close(self) -> None:
        """Close the trace file."""
        self._fh.close()


def validate(where: str, spec: dict) -> None:
    """Check the keys this module adds to a trace spec; errors name `where` and the key."""
    kind = spec.get("kind")
    if spec.get("dynamic") is not None and kind not in DYNAMIC_KINDS:
        raise TraceError(f"{where}.dynamic: only single and zipf traces can have dynamic "
                         f"requests (a {kind} trace cannot)")
    if kind == "worldcup":
        if not isinstance(spec.get("log"), str) or not spec["log"]:
            raise TraceError(f"{where}.log: the file name of a World Cup log in workloads/data/")
        for key in ("requests", "skip"):
            value = spec.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TraceError(f"{where}.{key}: must be a whole number >= 0, got {value!r}")
    if kind == "zipf":
        mapping = spec.get("mapping", "random")
        if mapping not in MAPPINGS:
            raise TraceError(f"{where}.mapping: must be one of {', '.join(MAPPINGS)}, "
                             f"got {mapping!r}")
    for key in ("per_client", "subsets"):
        value = spec.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TraceError(f"{where}.{key}: must be a whole number >= 1, got {value!r}")
    if "subsets" in spec and "per_client" not in spec:
        raise TraceError(f"{where}.subsets: only with per_client")
    fs = spec.get("fileset")
    if isinstance(fs, dict) and fs.get("kind") == "class":
        if fs.get("class") not in filesets.CLASSES:
            raise TraceError(f"{where}.fileset.class: must be one of "
                             f"{', '.join(map(str, filesets.CLASSES))}, got {fs.get('class')!r}")
