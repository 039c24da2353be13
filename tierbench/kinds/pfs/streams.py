"""What the streams of a point move, pure: the data each stream writes and its checksums, the
result lines of pfs-io.sh and of filesend (the send phases), a phase's aggregate MB/s and CPU
figures, what a send phase must have delivered, and a point's factors as the phases use them."""

from __future__ import annotations

import hashlib
import shlex
import zlib
from dataclasses import dataclass
from typing import Any

from tierbench.kinds.pfs.settings import MIB
from tierbench.measure.sampler import PROC_STAT_FIELDS
from tierbench.placement import model

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


def adler32(stream: int, nbytes: int, seed: int) -> str:
    """The Adler-32 filesend's sink must report for a stream's file (8 hex digits)."""
    return f"{zlib.adler32(pattern(stream, nbytes, seed)):08x}"


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


# The send phases of the basic test (004 §4.2 Fig. 4-5), each with filesend's method: the file
# sent to a TCP sink with read/write calls, or with sendfile(2)
SEND_PHASES = {"sendrw": "readwrite", "sendfile": "sendfile"}
# A send phase's own columns besides the other phases': the sender's CPU (its getrusage) in
# seconds and in ms per MB sent, and the sink's
SEND_COLUMNS = ("sender_cpu_s", "sender_cpu_ms_per_mb", "sink_cpu_s")


def parse_send_line(text: str) -> dict[str, Any]:
    """filesend's result line (``method= chunk= file_bytes= passes= calls= bytes= received=
    adler32= start= end= seconds= user_s= sys_s= sink_user_s= sink_sys_s= status= error=``):
    passes as ``iterations``, the sender's CPU (user + system) as ``sender_cpu_s``, the sink's
    as ``sink_cpu_s``."""
    out = parse_io_line(text)
    out["iterations"] = int(out.pop("passes", 0) or 0)
    for key in ("file_bytes", "calls", "received", "chunk"):
        out[key] = int(out.get(key, 0) or 0)
    for key in ("seconds", "user_s", "sys_s", "sink_user_s", "sink_sys_s"):
        out[key] = float(out.get(key, 0) or 0)
    out["sender_cpu_s"] = out.pop("user_s") + out.pop("sys_s")
    out["sink_cpu_s"] = out.pop("sink_user_s") + out.pop("sink_sys_s")
    return out


def send_figures(results: list[dict[str, Any]]) -> dict[str, float]:
    """A send phase's own figures: the senders' and sinks' CPU seconds, the senders' CPU in ms
    per MB (10^6 bytes) sent."""
    ok = [r for r in results if r["status"] == "ok"]
    sender = sum(r["sender_cpu_s"] for r in ok)
    mb = sum(r["bytes"] for r in ok) / MB
    return {"sender_cpu_s": sender,
            "sender_cpu_ms_per_mb": 1000 * sender / mb if mb else float("nan"),
            "sink_cpu_s": sum(r["sink_cpu_s"] for r in ok)}


def send_problems(phase: str, results: list[dict[str, Any]], nbytes: dict[int, int],
                  checksums: dict[int, str]) -> list[str]:
    """What a send phase's streams delivered against what they had to: the file's size as
    written, every pass the whole file, every byte sent received, the first pass's Adler-32 that
    of the data written (``nbytes`` and ``checksums`` by stream number)."""
    problems = []
    for r in results:
        if r["status"] != "ok":
            continue
        s = r["stream"]
        if r["file_bytes"] != nbytes[s]:
            problems.append(f"{phase}: stream {s} found {r['file_bytes']} bytes in the file, "
                            f"not the {nbytes[s]} written")
        elif r["bytes"] != r["iterations"] * nbytes[s] or r["received"] != r["bytes"]:
            problems.append(f"{phase}: stream {s} sent {r['bytes']} bytes in "
                            f"{r['iterations']} pass(es) of {nbytes[s]} and its sink received "
                            f"{r['received']}")
        elif r.get("adler32") != checksums[s]:
            problems.append(f"{phase}: stream {s}'s sink received data that differs from "
                            "what was written")
    return problems


@dataclass(frozen=True)
class Stream:
    """One client stream of a phase: where it runs and what it transfers."""

    number: int
    client: model.Container
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
