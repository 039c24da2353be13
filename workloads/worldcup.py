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
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

RECORD = struct.Struct(">IIIIBBBB")
DATA_DIR = Path(os.environ.get("TIERBENCH_DATA", Path(__file__).resolve().parent / "data"))
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "OPTIONS", "CONNECT", "OTHER")
HTTP_VERSIONS = ("HTTP/0.9", "HTTP/1.0", "HTTP/1.1", "HTTP/x.x")
STATUS_CODES = (100, 101, 200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 305,
                *range(400, 416), *range(500, 506))
TYPES = ("HTML", "IMAGE", "AUDIO", "VIDEO", "JAVA", "FORMATTED", "DYNAMIC", "TEXT",
         "COMPRESSED", "PROGRAMS", "DIRECTORY", "ICL", "OTHER")


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
    """Decode one 20-byte record."""
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
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else path.open("rb")


def records(path: Path) -> Iterator[Record]:
    """Every record of a log, in order; a truncated last record is an error."""
    try:
        fh = _open(path)
    except OSError as exc:
        raise WorldCupError(f"cannot read World Cup log {path}: {exc.strerror or exc}") from None
    with fh:
        while True:
            chunk = fh.read(RECORD.size * 4096)
            if not chunk:
                return
            if len(chunk) % RECORD.size:
                more = fh.read(RECORD.size - len(chunk) % RECORD.size)
                chunk += more
                if len(chunk) % RECORD.size:
                    raise WorldCupError(f"{path} ends with a partial record: not a World Cup "
                                        "binary log (20-byte records)")
            for i in range(0, len(chunk), RECORD.size):
                yield decode(chunk[i:i + RECORD.size])


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


def replay(spec: dict) -> tuple[list[int], dict[int, int]]:
    """The replayed object IDs in log order and each object's size (successful GETs only)."""
    skip = int(spec.get("skip", 0))
    limit = spec.get("requests")
    limit = None if limit is None else int(limit)
    order: list[int] = []
    sizes: dict[int, int] = {}
    seen = 0
    path = log_path(spec)
    for rec in records(path):
        if rec.method != "GET" or rec.status != 200:
            continue
        seen += 1
        if seen <= skip:
            continue
        order.append(rec.obj)
        sizes[rec.obj] = max(sizes.get(rec.obj, 0), rec.size)
        if limit is not None and len(order) >= limit:
            break
    order = [o for o in order if sizes[o] > 0]
    if not order:
        raise WorldCupError(f"{path} holds no successful GET with a non-zero size "
                            f"after skipping {skip}")
    return order, {o: s for o, s in sizes.items() if s > 0}


def path_of(name: str, obj: int) -> str:
    """URL path of one object."""
    return f"/{name}/o{obj}.bin"


def files(spec: dict) -> list[tuple[str, int]]:
    """The file set: one file per replayed object, most requested first."""
    order, sizes = replay(spec)
    counts: dict[int, int] = {}
    for o in order:
        counts[o] = counts.get(o, 0) + 1
    name = set_name(spec)
    ranked = sorted(sizes, key=lambda o: (-counts[o], o))
    return [(path_of(name, o), sizes[o]) for o in ranked]


def trace(spec: dict) -> list[str]:
    """The trace: one path per replayed request, in log order."""
    order, _ = replay(spec)
    name = set_name(spec)
    return [path_of(name, o) for o in order]
