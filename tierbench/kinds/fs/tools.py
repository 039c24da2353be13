"""The file-server tools' command lines and parsers (kind `fs`): dbench 4.0, which replays
NetBench's Disk Mix (the operations of its client.txt, a trace of a NetBench client), and fio
(random reads, the nine Filebench workloads as job files, IOzone-style sequential sessions).

Parsers are tested on captured output in tests/data/fs/. Every parse error is one sentence that
names the tool and what it printed instead.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from tierbench.config.errors import TierbenchError

# Debian 12's dbench: the Disk Mix load file (a NetBench client's operations, about 458,000
# lines, 2.5 GB of reads and writes per pass) and the fileio backend only (no SMB or NFS one)
DBENCH_LOADFILE = "/usr/share/dbench/client.txt"
# How much a dbench client program writes at most (its \clients\clientN tree: 107 files, 24 MB
# at their largest, measured from client.txt), with room to spare
DBENCH_BYTES_PER_PROGRAM = 32 << 20
# client.txt's length and the think-time copy's (a Sleep line before each of its lines)
DBENCH_LOADFILE_BYTES = 26_214_401
DBENCH_LOADFILE_LINES = 458_344
FILEBENCH_DIR = "/app/workloads/fs/filebench"
START_SCRIPT = "/app/workloads/fs/at.sh"


class FsParseError(TierbenchError):
    """A tool's output cannot be read as its report."""


# --------------------------------------------------------------------------- dbench


def dbench_command(programs: int, seconds: int, loadfile: str, directory: str) -> list[str]:
    """dbench with `programs` client processes for `seconds` (dbench adds a warm-up of a fifth
    of that before, and removes its files after), in `directory` (on the mounted share)."""
    return ["dbench", "-t", str(seconds), "-c", loadfile, "-D", directory, str(programs)]


def dbench_warmup_s(seconds: int) -> int:
    """dbench 4.0's warm-up before the timed part: a fifth of the time limit (not settable)."""
    return seconds // 5


def think_loadfile(think_us: int, path: str, source: str = DBENCH_LOADFILE) -> str:
    """Shell command that writes the load file with a `Sleep think_us` line before every
    operation to `path` (dbench 4.0 sleeps for a Sleep line's microseconds): a think time
    between each request and the next, as NetBench's. Other lines are copied as they are."""
    program = (f'NF >= 2 && $1 !~ /^#/ {{ print "Sleep {int(think_us)} NT_STATUS_OK" }} '
               "{ print }")
    return f"awk {shlex.quote(program)} {shlex.quote(source)} > {shlex.quote(path)}"


_PROGRESS = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+) MB/sec\s+(warmup|execute)\s+(\d+) sec"
                       r"\s+latency ([\d.]+) ms\s*$")
_OPERATION = re.compile(r"^\s*([A-Za-z]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$")
_THROUGHPUT = re.compile(r"^Throughput ([\d.eE+-]+) MB/sec(.*?)\s+(\d+) clients\s+(\d+) procs"
                         r"\s+max_latency=([\d.]+) ms\s*$")


@dataclass(frozen=True)
class DbenchLine:
    """One progress line: clients running, load-file lines done per client, MB/s since the
    phase began, the phase (warmup, execute) and its second, the worst latency of that second."""

    clients: int
    lines: int
    mb_per_s: float
    phase: str
    second: int
    latency_ms: float


def parse_dbench_line(line: str) -> DbenchLine | None:
    """A progress line of dbench, or None for any other line."""
    m = _PROGRESS.match(line)
    if not m:
        return None
    return DbenchLine(int(m[1]), int(m[2]), float(m[3]), m[4], int(m[5]), float(m[6]))


def parse_dbench(text: str) -> dict[str, Any]:
    """dbench 4.0's report: throughput (MB/s over the timed part, reads and writes, MB = 10^6
    bytes), clients and processes, worst latency, the progress lines and the operation table
    (count, mean and worst latency in ms per operation)."""
    throughput = next((m for line in text.splitlines() if (m := _THROUGHPUT.match(line))), None)
    if throughput is None:
        said = [ln.strip() for ln in text.splitlines() if ln.strip()]
        hint = next((ln for ln in reversed(said) if re.search(r"fail|error|unable|cannot|denied",
                                                              ln, re.I)), said[-1] if said
                    else "nothing")
        raise FsParseError(f"dbench printed no Throughput line; it said: {hint[:200]}")
    progress = [p for line in text.splitlines() if (p := parse_dbench_line(line))]
    ops: dict[str, dict[str, float]] = {}
    table = text.split(" Operation ", 1)[-1] if " Operation " in text else ""
    for line in table.splitlines():
        m = _OPERATION.match(line)
        if m:
            ops[m[1]] = {"count": int(m[2]), "avg_ms": float(m[3]), "max_ms": float(m[4])}
    return {"mb_per_s": float(throughput[1]), "clients": int(throughput[3]),
            "procs": int(throughput[4]), "max_latency_ms": float(throughput[5]),
            "progress": progress, "operations": ops,
            "errors": [ln.strip() for ln in text.splitlines()
                       if re.search(r"failed|ERROR", ln) and "barrier semaphore" not in ln]}


def dbench_window(timed: list[tuple[float, str]]) -> tuple[float, float]:
    """The wall-clock span of dbench's timed part from its progress lines stamped on arrival:
    from the first `execute` line less its second to the last `execute` line."""
    execute = [(t, p) for t, line in timed if (p := parse_dbench_line(line)) and
               p.phase == "execute"]
    if not execute:
        raise FsParseError("dbench printed no progress line of its timed part (execute): it "
                           "ended before its warm-up did")
    t0, first = execute[0]
    return t0 - first.second, execute[-1][0]


# --------------------------------------------------------------------------- fio


def at_start(start: float, argv: list[str]) -> list[str]:
    """`argv` run by workloads/fs/at.sh, which waits until the wall clock reaches `start`
    (clients in several containers begin together)."""
    return ["sh", START_SCRIPT, f"{start:.6f}", *argv]


def fio_command(*, name: str, directory: str, rw: str, block: int, size: int, jobs: int,
                runtime_s: int, ramp_s: int, direct: bool = False, sync: bool = False,
                extra: list[str] | None = None) -> list[str]:
    """fio with `jobs` threads of one job, each on its own file of `size` bytes in `directory`,
    `rw` (read, write, randread, randwrite) in blocks of `block` bytes, timed: `ramp_s` seconds
    not counted, then `runtime_s` counted; a JSON report on stdout."""
    argv = ["fio", f"--name={name}", f"--directory={directory}", f"--rw={rw}", f"--bs={block}",
            f"--size={size}", f"--numjobs={jobs}", "--thread", "--ioengine=psync",
            "--time_based", f"--runtime={runtime_s}", f"--ramp_time={ramp_s}",
            "--invalidate=1", "--output-format=json"]
    if direct:
        argv.append("--direct=1")
    if sync:
        argv.append("--sync=dsync")
    return argv + list(extra or [])


def filebench_command(workload: str, env: dict[str, Any]) -> list[str]:
    """fio on one of the nine Filebench job files, its sizes, threads and times from `env`
    (`fio` expands ${NAME} in job files from the environment)."""
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())), "fio",
            "--output-format=json", f"{FILEBENCH_DIR}/{workload}.fio"]


def parse_fio(text: str) -> dict[str, Any]:
    """fio's JSON report summed over its jobs, per direction (read, write): bytes, bytes/s,
    operations/s, mean and 99th-percentile completion latency (ms); the jobs and their errors,
and when it ended (`ended_s`, its report's time stamp).
    Text before the JSON (fio's notes on stderr merged in) is skipped."""
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("jobs"), list):
        said = [ln.strip() for ln in text.splitlines() if ln.strip()]
        raise FsParseError("fio printed no JSON report; it said: "
                           + (said[-1][:200] if said else "nothing"))
    jobs = report["jobs"]
    out: dict[str, Any] = {"version": report.get("fio version", ""), "jobs": len(jobs),
                           # when fio wrote the report, right after its jobs ended (epoch s)
                           "ended_s": report.get("timestamp_ms", 0) / 1000 or None,
                           "errors": [f"{j.get('jobname')}: error {j.get('error')}"
                                      for j in jobs if j.get("error")]}
    for direction in ("read", "write"):
        parts = [j[direction] for j in jobs if j.get(direction, {}).get("io_bytes")]
        ios = sum(p.get("total_ios", 0) for p in parts)
        weighted = sum(p["clat_ns"]["mean"] * p.get("total_ios", 0) for p in parts
                       if p.get("clat_ns"))
        p99 = [p["clat_ns"]["percentile"]["99.000000"] for p in parts
               if p.get("clat_ns", {}).get("percentile", {}).get("99.000000") is not None]
        out[direction] = {
            "bytes": sum(p["io_bytes"] for p in parts),
            "bytes_per_s": float(sum(p["bw_bytes"] for p in parts)),
            "iops": float(sum(p["iops"] for p in parts)),
            "ios": ios,
            "clat_mean_ms": weighted / ios / 1e6 if ios else None,
            "clat_p99_ms": max(p99) / 1e6 if p99 else None,
            "runtime_ms": max((p.get("runtime", 0) for p in parts), default=0),
        }
    return out


def sum_fio(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several fio reports (one per client container, run at the same time) as one."""
    out: dict[str, Any] = {"jobs": sum(r["jobs"] for r in reports),
                           "errors": [e for r in reports for e in r["errors"]]}
    for direction in ("read", "write"):
        parts = [r[direction] for r in reports]
        ios = sum(p["ios"] for p in parts)
        out[direction] = {
            "bytes": sum(p["bytes"] for p in parts),
            "bytes_per_s": sum(p["bytes_per_s"] for p in parts),
            "iops": sum(p["iops"] for p in parts),
            "ios": ios,
            "clat_mean_ms": (sum(p["clat_mean_ms"] * p["ios"] for p in parts
                                 if p["clat_mean_ms"] is not None) / ios) if ios else None,
            "clat_p99_ms": max((p["clat_p99_ms"] for p in parts
                                if p["clat_p99_ms"] is not None), default=None),
            "runtime_ms": max(p["runtime_ms"] for p in parts),
        }
    return out
