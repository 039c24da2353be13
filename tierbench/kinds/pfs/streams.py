"""What the streams of a point move, pure: the data each stream writes and its checksum, the
result line of pfs-io.sh, a phase's aggregate MB/s and CPU figures, and a point's factors as the
phases use them."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import Any

from tierbench.kinds.pfs.settings import MIB
from tierbench.measure.sampler import PROC_STAT_FIELDS
from tierbench.placement import compose

MB = 1_000_000


def pattern(stream: int, nbytes: int, seed: int) -> bytes:
    """The bytes stream ``stream`` writes: a repeated line, as the client makes it with yes."""
    line = f"tierbench pfs stream {stream} seed {seed}\n".encode()
    return (line * (nbytes // len(line) + 1))[:nbytes]


def make_source_cmd(stream: int, nbytes: int, seed: int, path: str) -> str:
    """Shell command writing ``pattern(...)`` to ``path`` in a client (coreutils only)."""
    return (f"[ -f {path} ] || yes {shlex.quote(f'tierbench pfs stream {stream} seed {seed}')} "
            f"| head -c {nbytes} > {path}")


def sha256(stream: int, nbytes: int, seed: int) -> str:
    """The checksum a stream's data must have."""
    return hashlib.sha256(pattern(stream, nbytes, seed)).hexdigest()


def parse_io_line(text: str) -> dict[str, Any]:
    """The result line of pfs-io.sh (``start= end= iterations= bytes= last= status= error=``)."""
    line = next((ln for ln in reversed(text.strip().splitlines()) if "status=" in ln), "")
    if not line:
        return {"status": "error", "error": (text.strip().splitlines() or ["no output"])[-1]}
    head, _, error = line.partition(" error=")
    out: dict[str, Any] = dict(kv.split("=", 1) for kv in head.split() if "=" in kv)
    out["error"] = error.strip()
    for key in ("start", "end"):
        out[key] = float(out.get(key, 0) or 0)
    for key in ("iterations", "bytes"):
        out[key] = int(out.get(key, 0) or 0)
    return out


@dataclass(frozen=True)
class Stream:
    """One client stream of a phase: where it runs and what it transfers."""

    number: int
    client: compose.Container
    access: str  # native | posix
    file: str
    offset: int
    nbytes: int
    buffer: int
    local: str


def phase_cpu(before: dict[str, dict], after: dict[str, dict], host0: dict[str, int],
              host1: dict[str, int], clients: list[str], servers: list[str], span_s: float,
              nbytes: int) -> dict[str, float]:
    """CPU of one phase: seconds and percent of one core per side, host breakdown."""
    def used(names: list[str]) -> float:
        return sum(after[n]["usage_s"] - before[n]["usage_s"] for n in names)

    client_s, server_s = used(clients), used(servers)
    ticks = {k: host1[k] - host0[k] for k in PROC_STAT_FIELDS}
    total = sum(ticks.values()) or 1
    kb = nbytes / 1024
    span = span_s if span_s > 0 else float("nan")
    return {"client_cpu_s": client_s, "server_cpu_s": server_s,
            "client_cpu_pct": 100 * client_s / span, "server_cpu_pct": 100 * server_s / span,
            "client_cpu_us_per_kb": 1e6 * client_s / kb if kb else float("nan"),
            "server_cpu_us_per_kb": 1e6 * server_s / kb if kb else float("nan"),
            "host_usr_pct": 100 * (ticks["user"] + ticks["nice"]) / total,
            "host_sys_pct": 100 * ticks["system"] / total,
            "host_softirq_pct": 100 * ticks["softirq"] / total,
            "host_idle_pct": 100 * (ticks["idle"] + ticks["iowait"]) / total}


def aggregate(results: list[dict[str, Any]], start: float) -> dict[str, Any]:
    """Aggregate MB/s of a phase: all streams' bytes over common start .. last end."""
    nbytes = sum(r["bytes"] for r in results if r["status"] == "ok")
    end = max((r["end"] for r in results if r.get("end")), default=start)
    span = max(end - start, 1e-9)
    return {"mb_per_s": nbytes / MB / span if nbytes else 0.0, "bytes": nbytes, "s": span,
            "failed_streams": sum(r["status"] != "ok" for r in results)}




@dataclass(frozen=True)
class PointFactors:
    """One point's factors as the phases use them."""

    id: str
    mode: str
    repetition: int
    io_servers: int
    clients: int = 1
    streams: int = 1
    filesystem: str = "orangefs"
    buffer: int = MIB
