"""The 1998 World Cup access logs (Internet Traffic Archive binary format) as a trace and a file set.

Each record is 20 bytes, big-endian: uint32 timestamp (s since the Epoch, GMT), uint32 clientID,
uint32 objectID, uint32 size (response bytes), uint8 method, uint8 status (2 high bits: HTTP
version; 6 low bits: index into STATUS_CODES), uint8 type, uint8 server. Logs are read raw or
gzip-compressed (`wc_day46_1.gz` as published).

Replay: the trace is the log's successful GETs (status 200) in log order, one path per request;
the file set has one file per object, of the largest size any of its 200 responses logged
(objects only ever logged with size 0 are left out). Specs name the log relative to DATA_DIR
(`workloads/data/`, mounted with the workloads folder into the containers):
  {"kind": "worldcup", "log": "wc_day46_1.gz", "requests": 100000, "skip": 0}
`requests` (optional) keeps the first N replayable requests after `skip` of them.

Logs are decoded in chunks of CHUNK_RECORDS records as numpy structured arrays, and only
per-object state is kept (objects are far fewer than requests: tens of thousands in a day of
the World Cup against tens of millions of requests), so memory does not grow with the log and
time grows linearly with it. `objects()` is one pass (the file set, and how many requests and
bytes the trace will hold); `trace_chunks()` is a second pass that yields the trace's paths
chunk by chunk, for `traces.write_chunks` to write as they come.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np

RECORD = struct.Struct(">IIIIBBBB")
DTYPE = np.dtype([("timestamp", ">u4"), ("client", ">u4"), ("obj", ">u4"), ("size", ">u4"),
                  ("method", "u1"), ("status", "u1"), ("type", "u1"), ("server", "u1")])
CHUNK_RECORDS = 1 << 18  # 5 MiB of log per read
LOOKUP_LIMIT = 1 << 24  # object IDs below this are looked up in a table (8 bytes per ID)
DATA_DIR = Path(os.environ.get("TIERBENCH_DATA", Path(__file__).resolve().parent / "data"))
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "OPTIONS", "CONNECT", "OTHER")
HTTP_VERSIONS = ("HTTP/0.9", "HTTP/1.0", "HTTP/1.1", "HTTP/x.x")
STATUS_CODES = (100, 101, 200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 305,
                *range(400, 416), *range(500, 506))
TYPES = ("HTML", "IMAGE", "AUDIO", "VIDEO", "JAVA", "FORMATTED", "DYNAMIC", "TEXT",
         "COMPRESSED", "PROGRAMS", "DIRECTORY", "ICL", "OTHER")
GET, OK = METHODS.index("GET"), STATUS_CODES.index(200)

Progress = Callable[[int], None]  # called with the records read so far


class WorldCupError(ValueError):
    """A World Cup log that cannot be read, or a spec that names none."""


@dataclass(frozen=True)
class Record:
    """One decoded log record."""

    timestamp: int
    client: int
    obj: int
    size: int
    method: str
    version: str
    status: int  # 0 where the log says "other"
    type: str
    server: int


def decode(raw: bytes) -> Record:
    """Decode one 20-byte record (for reading a record by eye; logs are read with chunks())."""
    ts, client, obj, size, method, status, ftype, server = RECORD.unpack(raw)
    code = status & 0x3F
    return Record(ts, client, obj, size,
                  METHODS[method] if method < len(METHODS) else "OTHER",
                  HTTP_VERSIONS[status >> 6],
                  STATUS_CODES[code] if code < len(STATUS_CODES) else 0,
                  TYPES[ftype] if ftype < len(TYPES) else "OTHER", server)


def encode(rec: Record) -> bytes:
    """Encode one record (the inverse of decode; used to write test logs)."""
    code = STATUS_CODES.index(rec.status) if rec.status in STATUS_CODES else 37
    return RECORD.pack(rec.timestamp, rec.client, rec.obj, rec.size, METHODS.index(rec.method),
                       (HTTP_VERSIONS.index(rec.version) << 6) | code, TYPES.index(rec.type),
                       rec.server)


def _open(path: Path) -> BinaryIO:
    with path.open("rb") as fh:
        magic = fh.read(2)
    return cast(BinaryIO, gzip.open(path, "rb")) if magic == b"\x1f\x8b" else path.open("rb")


def chunks(path: Path, progress: Progress | None = None) -> Iterator[np.ndarray]:
    """The log's records in order, as structured arrays (DTYPE) of up to CHUNK_RECORDS; a
    truncated last record is an error."""
    try:
        fh = _open(path)
    except OSError as exc:
        raise WorldCupError(f"cannot read World Cup log {path}: {exc.strerror or exc}") from None
    done = 0
    with fh:
        while True:
            try:
                data = fh.read(DTYPE.itemsize * CHUNK_RECORDS)
                if len(data) % DTYPE.itemsize:
                    data += fh.read(DTYPE.itemsize - len(data) % DTYPE.itemsize)
            except (OSError, EOFError) as exc:  # a damaged gzip stream
                raise WorldCupError(f"cannot read World Cup log {path}: {exc}") from None
            if not data:
                return
            if len(data) % DTYPE.itemsize:
                raise WorldCupError(f"{path} ends with a partial record: not a World Cup "
                                    "binary log (20-byte records)")
            records = np.frombuffer(data, DTYPE)
            done += len(records)
            if progress:
                progress(done)
            yield records


def log_path(spec: dict) -> Path:
    """The log a spec names, relative to DATA_DIR unless absolute."""
    log = spec.get("log")
    if not isinstance(log, str) or not log:
        raise WorldCupError("a worldcup spec needs log: the file name of a log in workloads/data/")
    return Path(log) if Path(log).is_absolute() else DATA_DIR / log


def set_name(spec: dict) -> str:
    """Directory of the set under the docroot: log stem and the request window."""
    stem = Path(str(spec.get("log", "log"))).name.split(".")[0]
    window = f"{spec.get('skip', 0)}:{spec.get('requests', 'all')}"
    return f"wc98-{stem}-{hashlib.sha256(window.encode()).hexdigest()[:8]}"


def path_of(name: str, obj: int) -> str:
    """URL path of one object."""
    return f"/{name}/o{obj}.bin"


def _replayed(path: Path, skip: int, limit: int | None,
              progress: Progress | None) -> Iterator[np.ndarray]:
    """The object IDs and sizes (fields obj, size) of the replayed window of successful GETs,
    chunk by chunk; stops reading once the window is complete."""
    end = None if limit is None else skip + limit
    seen = 0
    for records in chunks(path, progress):
        ok = records[(records["method"] == GET) & ((records["status"] & 0x3F) == OK)]
        lo, hi = max(skip - seen, 0), len(ok) if end is None else min(end - seen, len(ok))
        seen += len(ok)
        if hi > lo:
            yield ok[lo:hi]
        if end is not None and seen >= end:
            return


@dataclass(frozen=True)
class Objects:
    """Per-object state of a replayed window: IDs ascending, requests and largest logged size of
    each (objects whose largest size is 0 included: they are not replayed)."""

    ids: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray

    @property
    def kept(self) -> np.ndarray:
        """Which objects are replayed: those with a non-zero size."""
        return self.sizes > 0

    @property
    def requests(self) -> int:
        """Requests the trace holds."""
        return int(self.counts[self.kept].sum())


def _merge(acc: Objects | None, ids: np.ndarray, counts: np.ndarray,
           sizes: np.ndarray) -> Objects:
    if acc is not None:
        ids = np.concatenate([acc.ids, ids])
        counts = np.concatenate([acc.counts, counts])
        sizes = np.concatenate([acc.sizes, sizes])
    uniq, inv = np.unique(ids, return_inverse=True)
    total = np.zeros(len(uniq), np.int64)
    np.add.at(total, inv, counts)
    largest = np.zeros(len(uniq), np.int64)
    np.maximum.at(largest, inv, sizes)
    return Objects(uniq, total, largest)


def _window(spec: dict) -> tuple[Path, int, int | None]:
    limit = spec.get("requests")
    return log_path(spec), int(spec.get("skip") or 0), None if limit is None else int(limit)


def objects(spec: dict, progress: Progress | None = None) -> Objects:
    """Per-object requests and largest size of a spec's window: one pass over the log, memory
    in proportion to the objects, not the requests. Cached while the log file is unchanged."""
    path, skip, limit = _window(spec)
    try:
        st = path.stat()
    except OSError as exc:
        raise WorldCupError(f"cannot read World Cup log {path}: {exc.strerror or exc}") from None
    key = (path, st.st_mtime_ns, st.st_size, skip, limit)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = _objects(path, skip, limit, progress)
        while len(_CACHE) > 8:
            del _CACHE[next(iter(_CACHE))]
    if not found.kept.any():
        raise WorldCupError(f"{path} holds no successful GET with a non-zero size "
                            f"after skipping {skip}")
    return found


_CACHE: dict[tuple, Objects] = {}


def _objects(path: Path, skip: int, limit: int | None, progress: Progress | None) -> Objects:
    acc: Objects | None = None
    for ok in _replayed(path, skip, limit, progress):
        ids, inv = np.unique(ok["obj"].astype(np.int64), return_inverse=True)
        largest = np.zeros(len(ids), np.int64)
        np.maximum.at(largest, inv, ok["size"].astype(np.int64))
        acc = _merge(acc, ids, np.bincount(inv, minlength=len(ids)), largest)
    return acc if acc is not None else Objects(*(np.zeros(0, np.int64) for _ in range(3)))


def files(spec: dict) -> list[tuple[str, int]]:
    """The file set: one file per replayed object, most requested first."""
    found = objects(spec)
    keep = found.kept
    ids, counts, sizes = found.ids[keep], found.counts[keep], found.sizes[keep]
    ranked = np.lexsort((ids, -counts))  # most requests first, then by object ID
    name = set_name(spec)
    return [(path_of(name, int(o)), int(s)) for o, s in zip(ids[ranked], sizes[ranked])]


def trace_bytes(spec: dict) -> int:
    """Bytes of the trace's request lines (each path and its newline), without reading the
    requests again."""
    found = objects(spec)
    keep = found.kept
    name_len = len(path_of(set_name(spec), 0)) - 1  # the path without the object's digits
    digits = np.char.str_len(found.ids[keep].astype(str))
    return int((found.counts[keep] * (name_len + digits + 1)).sum())


def trace_chunks(spec: dict, progress: Progress | None = None) -> Iterator[list[str]]:
    """The trace, one path per replayed request in log order, in chunks: a second pass over
    the log (after objects()), each chunk formatted from a table of the objects' paths."""
    found = objects(spec)
    name = set_name(spec)
    paths = np.array([path_of(name, int(o)) for o in found.ids], dtype=object)
    keep = found.kept
    # object ID -> its row: a direct table when the IDs are small (the World Cup's are below
    # 100,000), else a binary search
    table = None
    if int(found.ids[-1]) < LOOKUP_LIMIT:
        table = np.zeros(int(found.ids[-1]) + 1, np.int64)
        table[found.ids] = np.arange(len(found.ids))
    path, skip, limit = _window(spec)
    for ok in _replayed(path, skip, limit, progress):
        obj = ok["obj"].astype(np.int64)
        at = table[obj] if table is not None else np.searchsorted(found.ids, obj)
        at = at[keep[at]]
        if len(at):
            yield paths[at].tolist()
