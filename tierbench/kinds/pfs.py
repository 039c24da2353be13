"""Parallel file system experiments on the OrangeFS tier (compose/pvfs.yml).

Three tests, chosen by an experiment's ``pfs.test``:

- ``concurrent`` (000 §6.2.1): 1..K clients, each in its own container, read and then write one
  contiguous region of ``region_mb_per_server`` x N MB at the same time (N I/O servers).
- ``streams`` (000 §6.2.2): 1..64 concurrent reading streams spread over the client containers.
- ``basic`` (004 Table 1): one sequential writer then reader on tmpfs, a local-disk volume or
  OrangeFS, for several buffer sizes.

Every stream repeats its transfer until ``measure_s`` has passed (so process start-up does not
dominate short transfers); aggregate MB/s is the bytes of all streams over the span from the
common start to the last stream's end. CPU per side (clients, servers) and of the host comes
from counters read at each phase's start and end; what was read and written is checked against
checksums the runner computes itself. A stopped server makes its streams fail within the job
timeout; the point records the errors and the run ends with one message naming the server.
"""

from __future__ import annotations

import csv
import hashlib
import shlex
import subprocess
import threading
import time
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

from pydantic import model_validator

from tierbench.config.models import Model, choice, flag, number, one_or_many, problem, whole
from tierbench.kinds import families
from tierbench.kinds.contract import (
    CLIENT,
    SERVER,
    Column,
    Deployment,
    Experiment,
    Kind,
    Point,
    PointContext,
    PointResult,
    RunEnds,
    Tier,
    log,
    refuse_server_modes,
)
from tierbench.measure.sampler import PROC_STAT_FIELDS
from tierbench.placement import compose as stack
from tierbench.placement import orangefs, placer, space
from tierbench.placement.orangefs import MAX_IO_SERVERS, STORAGE, PfsError, label

TESTS = ("concurrent", "streams", "basic")
FILESYSTEMS = {"tmpfs": "/scratch", "disk": "/disk", "orangefs": "/mnt/orangefs",
               "orangefs-native": "/mnt/orangefs"}
ACCESS = ("native", "fuse")
TIERS = ("pfs-client", "pfs-server")
IO_SCRIPT = "/app/workloads/pfs/pfs-io.sh"
MB = 1_000_000
MIB = 1 << 20
START_DELAY_S = 1.5  # every stream starts at the same wall-clock time, this far ahead
PHASE_COLUMNS = ("mb_per_s", "bytes", "s", "client_cpu_s", "server_cpu_s", "client_cpu_pct",
                 "server_cpu_pct", "client_cpu_us_per_kb", "server_cpu_us_per_kb",
                 "host_usr_pct", "host_sys_pct", "host_softirq_pct", "host_idle_pct",
                 "failed_streams")
SUMMARY_COLUMNS = [
    "point", "test", "mode", "repetition", "io_servers", "clients", "streams", "filesystem",
    "buffer", "access", "region_bytes",
    *(f"{phase}_{col}" for phase in ("read", "write") for col in PHASE_COLUMNS),
    "integrity",
]

__all__ = ["PfsError", "PfsKind", "PfsSettings", "aggregate", "make_source_cmd", "parse_io_line",
           "pattern", "phase_cpu", "sha256"]


# --------------------------------------------------------------------------- settings


class Fault(Model):
    """Stop one server `after_s` seconds into the first timed phase of the run."""

    stop: choice(*orangefs.server_services(MAX_IO_SERVERS))
    after_s: number(0) = 1


class Pfs(Model):
    """The `pfs:` block of an experiment file."""

    test: choice(*TESTS)
    io_servers: one_or_many(whole(1, MAX_IO_SERVERS), "whole number") = [2]
    strip_size: whole(4096) = 65536
    storage: choice(*STORAGE) = "tmpfs"
    measure_s: number(0.5) = 10
    job_timeout_s: whole(2, 300) = 15
    fault: Fault | None = None
    clients: one_or_many(whole(1, 16), "whole number") = [1, 2]
    streams: one_or_many(whole(1, 256), "whole number") = [1, 4]
    client_containers: whole(1, 16) = 4
    access: choice(*ACCESS) = "native"
    region_mb_per_server: number(0.0625) = 2
    regions_per_stream: whole(1, 1024) = 16
    filesystems: one_or_many(choice(*FILESYSTEMS), "file system") = ["tmpfs", "disk", "orangefs"]
    buffers: one_or_many(whole(512, 64 * MIB), "whole number") = [4096, 65536, MIB]
    file_mb: number(1, 4096) = 256
    drop_caches: flag() = False

    @model_validator(mode="after")
    def _per_test(self) -> Pfs:
        per_test = {"concurrent": {"clients", "access", "region_mb_per_server",
                                   "regions_per_stream"},
                    "streams": {"streams", "client_containers", "access",
                                "region_mb_per_server", "regions_per_stream"},
                    "basic": {"filesystems", "buffers", "file_mb", "drop_caches"}}
        common = {"test", "io_servers", "strip_size", "storage", "measure_s", "job_timeout_s",
                  "fault"}
        allowed = common | per_test[self.test]
        extra = sorted(set(self.model_fields_set) - allowed)
        if extra:
            raise problem("unknown key {key} for test {test} (allowed: {allowed})",
                          key=repr(extra[0]), test=self.test, allowed=", ".join(sorted(allowed)))
        return self


class PfsSettings(Model):
    """The keys of a parallel file system experiment besides the common ones."""

    pfs: Pfs


def cluster_clients(p: Pfs) -> int:
    """Client containers the cluster needs."""
    if p.test == "concurrent":
        return max(p.clients)
    return p.client_containers if p.test == "streams" else 1


# --------------------------------------------------------------------------- data


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
    client: stack.Container
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
class PfsPoint:
    """One point's factors as the phases use them."""

    id: str
    mode: str
    repetition: int
    io_servers: int
    clients: int = 1
    streams: int = 1
    filesystem: str = "orangefs"
    buffer: int = MIB


class Work:
    """One point's streams, timed phases and checks on the running cluster."""

    def __init__(self, p: Pfs, seed: int, run_id: str, deployment: Deployment,
                 prepared: dict[str, Any], sampler: Any) -> None:
        self.exp, self.seed, self.run_id, self.prepared = p, seed, run_id, prepared
        self.servers: list[stack.Container] = deployment.info["servers"]
        self.clients: list[stack.Container] = deployment.info["clients"]
        self.sampler = sampler  # the point's running sampler: its now() reads every counter
        self.io_servers = int(deployment.key)  # type: ignore[arg-type]
        self.window: tuple[float, float] | None = None  # first phase start .. last phase end

    def _streams(self, point: PfsPoint, row: dict) -> list[Stream]:
        exp = self.exp
        prefix = f"/mnt/orangefs/{self.run_id}-{point.id}"
        if exp.test == "basic":
            nbytes = int(exp.file_mb * MIB)
            root = FILESYSTEMS[point.filesystem]
            access = "native" if point.filesystem == "orangefs-native" else "posix"
            return [Stream(1, self.clients[0], access, f"{root}/{self.run_id}-{point.id}", 0,
                           nbytes, point.buffer, "/scratch/io-1")]
        # Every call moves one region (2 MB per I/O server); a stream's file holds several, so
        # that one pvfs2-cp start-up is shared by many requests.
        region = int(exp.region_mb_per_server * point.io_servers * MIB)
        nbytes = region * exp.regions_per_stream
        row["region_bytes"] = region
        out = []
        for s in range(1, point.streams + 1):
            client = self.clients[(s - 1) % point.clients]
            if exp.access == "native":
                out.append(Stream(s, client, "native", f"{prefix}-s{s}", 0, nbytes, region,
                                  f"/scratch/io-{s}"))
            else:  # one shared file, a contiguous stretch per stream (as pvfs-test does)
                out.append(Stream(s, client, "posix", f"{prefix}-shared", (s - 1) * nbytes,
                                  nbytes, region, f"/scratch/io-{s}"))
        return out

    def phases(self, point: PfsPoint, row: dict, pdir: Path, record: dict) -> dict:
        exp = self.exp
        streams = self._streams(point, row)
        seed = self.seed
        out: dict[str, Any] = {}
        checks: list[str] = []
        sources = {s.number: f"/scratch/src-{s.nbytes}-{s.number}" for s in streams}
        self._each(streams, lambda s: make_source_cmd(s.number, s.nbytes, seed,
                                                      sources[s.number]), "write source data")
        phases = ["write", "read"] if exp.test == "basic" else (
            ["read", "write"] if exp.test == "concurrent" else ["read"])
        if phases[0] == "read":  # the files to read, written before the clock starts
            self._each(streams, lambda s: self._write_once(s, sources[s.number]),
                       "write the files to read")
        written: dict[int, str] = {}
        try:
            for phase in phases:
                if phase == "read" and exp.test == "basic" and exp.drop_caches:
                    placer.current().drop_caches(self.clients + self.servers)
                # pvfs2-cp never overwrites: a native stream reads back the file it wrote last
                active = [dc_replace(s, file=written[s.number]) if s.access == "native"
                          and written.get(s.number) else s for s in streams]
                results = self._run_phase(phase, active, sources, pdir)
                record[f"{phase}_streams"] = results
                figures = results["figures"]
                out.update({f"{phase}_{k}": v for k, v in figures.items()})
                failed = [r for r in results["streams"] if r["status"] != "ok"]
                if failed:
                    out["error"] = (f"{phase}: {len(failed)} of {len(streams)} streams failed: "
                                    f"{failed[0].get('error') or 'no output'}")
                    break
                if phase == "read":
                    checks += self._verify_reads(streams, seed)
                else:
                    written = {r["stream"]: r.get("last") or "" for r in results["streams"]}
            else:
                if "write" in phases:
                    checks += self._verify_writes(streams, written, seed)
        finally:
            self._cleanup(streams)
        if "error" not in out:
            out["integrity"] = "ok" if not checks else "mismatch"
            if checks:
                out["error"] = "integrity: " + "; ".join(checks[:3])
        else:
            out["integrity"] = "not checked"
        record["integrity_problems"] = checks
        return out

    def _write_once(self, s: Stream, source: str) -> str:
        if s.access == "native":
            return f"pvfs2-cp {source} {s.file}"
        return (f"dd if={source} of={s.file} bs=1M oflag=seek_bytes seek={s.offset} "
                "conv=notrunc status=none")

    def _each(self, streams: list[Stream], cmd: Any, what: str) -> list[str]:
        """Run a shell command per stream (grouped per client container); fail on error."""
        timeout = self.exp.job_timeout_s * 3 + 60
        outputs = []
        for s in streams:
            done = stack.exec_in(s.client, ["sh", "-c", cmd(s)], timeout=timeout)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                raise PfsError(f"{what} failed in {label(s.client)}: {lines[-1][:300]}")
            outputs.append(done.stdout)
        return outputs

    def _run_phase(self, phase: str, streams: list[Stream], sources: dict[int, str],
                   pdir: Path) -> dict:
        exp = self.exp
        lead = START_DELAY_S + placer.current().exec_lead_s
        start = time.time() + lead + 0.02 * len(streams)
        by_client: dict[str, list[Stream]] = {}
        for s in streams:
            by_client.setdefault(s.client.id, []).append(s)
        clients_used = [label(self.clients[i]) for i in range(len(self.clients))
                        if self.clients[i].id in by_client]
        servers = [label(c) for c in self.servers]
        now0 = self.sampler.now()
        before = self._cpu(now0)
        host0 = now0["host"]
        timeout = lead + exp.measure_s + 3 * exp.job_timeout_s + 60

        def run_client(group: list[Stream]) -> list[dict]:
            parts = []
            for s in group:
                local = s.local if phase == "read" else sources[s.number]
                if phase == "read" and exp.test == "basic" and s.access == "posix":
                    # only dd gets /dev/null: pvfs2-cp deletes its destination when it fails
                    local = "/dev/null"
                file = s.file
                args = [IO_SCRIPT, phase, s.access, file, s.offset, s.nbytes, s.buffer,
                        f"{start:.6f}", exp.measure_s, local]
                parts.append(f"(sh {' '.join(shlex.quote(str(a)) for a in args)} "
                             f"| sed 's/^/stream={s.number} /') &")
            script = " ".join(parts) + " wait"
            try:
                done = stack.exec_in(group[0].client, ["sh", "-c", script], timeout=timeout)
                text = done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                text = ""
            results = []
            for s in group:
                line = next((ln for ln in text.splitlines() if ln.startswith(f"stream={s.number} ")),
                            "")
                r = parse_io_line(line) if line else {
                    "status": "error", "error": f"no result within {timeout:.0f} s"}
                r.update(stream=s.number, client=label(s.client))
                results.append(r)
            return results

        fault = self._arm_fault(start)
        with ThreadPoolExecutor(max_workers=len(by_client)) as pool:
            results = [r for rs in pool.map(run_client, by_client.values()) for r in rs]
        if fault:
            fault.join()
        now1 = self.sampler.now()
        after = self._cpu(now1, before)
        host1 = now1["host"]
        figures = aggregate(results, start)
        end = max((r["end"] for r in results if r.get("end")), default=start)
        self.window = (min(self.window[0], start), max(self.window[1], end)) if self.window \
            else (start, end)
        figures.update(phase_cpu(before, after, host0, host1, clients_used, servers,
                                 figures["s"], figures["bytes"]))
        with (pdir / f"{phase}.csv").open("w", newline="") as fh:
            cols = ["stream", "client", "status", "start", "end", "iterations", "bytes", "last",
                    "error"]
            writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(sorted(results, key=lambda r: r["stream"]))
        return {"start": start, "figures": figures, "streams": results}

    def _cpu(self, now: dict[str, Any], fallback: dict[str, dict] | None = None,
             ) -> dict[str, dict]:
        """CPU counters of every container from a sample ``now``; one that stopped keeps its
        ``fallback`` value (its CPU since then is unknown and counted as none)."""
        names = [label(c) for c in self.servers + self.clients]
        return {name: now["cpu"].get(name) or (fallback or {}).get(
                    name, {"usage_s": 0.0, "user_s": 0.0, "system_s": 0.0})
                for name in names}

    def _arm_fault(self, start: float) -> threading.Thread | None:
        """The experiment's fault, once per run: stop a server `after_s` into a timed phase."""
        fault = self.exp.fault.model_dump() if self.exp.fault else None
        if not fault or self.prepared["fault_done"]:
            return None
        self.prepared["fault_done"] = True
        target = next((c for c in self.servers if c.service == fault["stop"]), None)
        if target is None:
            log(f"tierbench: fault: {fault['stop']} is not part of this cluster; nothing stopped")
            return None

        def stop() -> None:
            time.sleep(max(0.0, start + fault["after_s"] - time.time()))
            log(f"tierbench: fault: stopping {fault['stop']} as the experiment asks")
            placer.current().stop(target, 5)

        thread = threading.Thread(target=stop, name="fault", daemon=True)
        thread.start()
        return thread

    def _verify_reads(self, streams: list[Stream], seed: int) -> list[str]:
        if self.exp.test == "basic":
            return []  # basic reads go to /dev/null; the write check covers the data
        problems = []
        sums = self._each(streams, lambda s: f"sha256sum {s.local} | cut -d' ' -f1",
                          "checksum what was read")
        for s, got in zip(streams, sums):
            if got.strip() != sha256(s.number, s.nbytes, seed):
                problems.append(f"stream {s.number} read back data that differs from what "
                                "was written")
        return problems

    def _verify_writes(self, streams: list[Stream], written: dict[int, str],
                       seed: int) -> list[str]:
        def cmd(s: Stream) -> str:
            if s.access == "native":
                target = written.get(s.number) or s.file
                return (f"rm -f /scratch/check-{s.number} && pvfs2-cp {target} "
                        f"/scratch/check-{s.number} >/dev/null && sha256sum /scratch/check-"
                        f"{s.number} | cut -d' ' -f1")
            return (f"dd if={s.file} bs=1M iflag=skip_bytes,count_bytes skip={s.offset} "
                    f"count={s.nbytes} status=none | sha256sum | cut -d' ' -f1")

        problems = []
        for s, got in zip(streams, self._each(streams, cmd, "checksum what was written")):
            if got.strip() != sha256(s.number, s.nbytes, seed):
                problems.append(f"stream {s.number}: the file system returned data that "
                                "differs from what was written")
        return problems

    def _cleanup(self, streams: list[Stream]) -> None:
        """Remove the point's files (OrangeFS through the FUSE mount, local ones directly)."""
        paths = sorted({s.file for s in streams})
        script = " ".join(f"rm -f {shlex.quote(p)} {shlex.quote(p)}.*;" for p in paths)
        # rm on the mount would hang for the job timeout
        if orangefs.stopped_servers(self.io_servers, placer.current().replicas()):
            script = ""
        script += " rm -f /scratch/io-* /scratch/check-*"
        for c in {s.client.id: s.client for s in streams}.values():
            try:
                stack.exec_in(c, ["sh", "-c", script], timeout=self.exp.job_timeout_s * 2 + 10)
            except subprocess.TimeoutExpired:
                log(f"tierbench: removing the files of the point in {label(c)} timed out")



def cluster_deployment(n: int, servers: list[stack.Container],
                       clients: list[stack.Container]) -> Deployment:
    """The running cluster as a deployment: a client tier and a server tier."""
    where = placer.current()
    everyone = servers + clients
    counters = {label(c): where.counter(c) for c in everyone}
    eps = {label(c): where.endpoints(label(c), c) for c in everyone}
    tiers = {"pfs-client": Tier("pfs-client", CLIENT,
                                [ep for c in clients for ep in eps[label(c)]], clients),
             "pfs-server": Tier("pfs-server", SERVER,
                                [ep for c in servers for ep in eps[label(c)]], servers)}
    ifaces = where.ifaces([ep for c in everyone for ep in eps[label(c)]])
    return Deployment(n, tiers, counters, ifaces, containers={label(c): c for c in everyone},
                      info={"servers": servers, "clients": clients}, placer=where)


# --------------------------------------------------------------------------- the kind


class PfsKind(Kind):
    """Parallel file system benchmarks on the OrangeFS tier (000 §6.2, 004 §4.1)."""

    name = "pfs"
    description = "OrangeFS benchmarks: concurrent reads/writes, streams, basic file systems"
    model = PfsSettings
    scalable = {"pfs.measure_s": 2, "pfs.file_mb": 16}
    block = "pfs"
    tiers = TIERS
    roles = ("pfs_meta", "pfs_io", "pfs_clients")
    bring_up = "cluster bring-up (about 10 s each)"

    def check(self, exp: Experiment) -> None:
        """A PFS run has no web or proxy servers whose options a mode could set."""
        refuse_server_modes(exp, "a parallel file system experiment")

    def resolved(self, exp: Experiment) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        pfs: dict[str, Any] = {"test": p.test, "io_servers": list(p.io_servers),
                               "strip_size": p.strip_size, "storage": p.storage,
                               "measure_s": p.measure_s, "job_timeout_s": p.job_timeout_s}
        if p.test == "concurrent":
            pfs.update(clients=list(p.clients), access=p.access,
                       region_mb_per_server=p.region_mb_per_server,
                       regions_per_stream=p.regions_per_stream)
        elif p.test == "streams":
            pfs.update(streams=list(p.streams), client_containers=p.client_containers,
                       access=p.access, region_mb_per_server=p.region_mb_per_server,
                       regions_per_stream=p.regions_per_stream)
        else:
            pfs.update(filesystems=list(p.filesystems), buffers=list(p.buffers),
                       file_mb=p.file_mb, drop_caches=p.drop_caches)
        return {"name": exp.name, "kind": self.name, "description": exp.description,
                "source": exp.source, "seed": exp.seed, "repetitions": exp.repetitions,
                "settle_s": exp.settle_s, "modes": [m.as_dict() for m in exp.modes], "pfs": pfs}

    def axes(self, exp: Experiment) -> list[tuple[str, list[Any]]]:
        """I/O servers x the test's factor x mode x repetition."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        if p.test == "concurrent":
            factors = [{"clients": c, "streams": c} for c in p.clients]
        elif p.test == "streams":
            factors = [{"clients": min(s, p.client_containers), "streams": s}
                       for s in p.streams]
        else:
            factors = [{"filesystem": f, "buffer": b} for f in p.filesystems for b in p.buffers]
        return [("io_servers", list(p.io_servers)), ("factor", factors),
                ("mode", [m.name for m in exp.modes]),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def point_factors(self, combo: dict[str, Any]) -> dict[str, Any]:
        """io_servers, clients, streams, filesystem, buffer (the phases' defaults filled in)."""
        out = {"io_servers": combo["io_servers"], "clients": 1, "streams": 1,
               "filesystem": "orangefs", "buffer": MIB}
        return out | combo["factor"]

    def placement(self, exp: Experiment, combo: dict[str, Any] | Point) -> Hashable:
        """The number of I/O servers: a different N is a new cluster."""
        return combo["io_servers"] if isinstance(combo, dict) else combo["io_servers"]

    def order(self, exp: Experiment, combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each cluster size, cluster sizes in the order listed."""
        listed = list(exp.settings.pfs.io_servers)  # type: ignore[attr-defined]
        return sorted(combos, key=lambda c: listed.index(c["io_servers"]))

    # -- plan
    def point_seconds(self, exp: Experiment) -> float:
        """settle, the timed phases, set-up and checksums."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        lead = START_DELAY_S + placer.current().exec_lead_s
        return exp.settle_s + (2 if p.test != "streams" else 1) * (p.measure_s + lead) + 8

    def plan_header(self, exp: Experiment, points: list[Point]) -> list[str]:
        """The test, storage, strip and timeouts."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        return [f"experiment {exp.name} ({exp.source}): {len(points)} points, order shuffled "
                f"with seed {exp.seed}; test {p.test}, storage {p.storage}, strip "
                f"{p.strip_size} B, job timeout {p.job_timeout_s} s",
                f"per point: settle {exp.settle_s:g} s + {p.measure_s:g} s per phase + set-up "
                "and checksums"]

    def placement_line(self, exp: Experiment, point: Point, first: bool) -> str:
        """The cluster from this point on."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        return (f"  -- cluster: 1 metadata + {point['io_servers']} I/O servers, "
                f"{cluster_clients(p)} client container(s)" + ("" if first else " (new cluster)"))

    def point_line(self, exp: Experiment, point: Point) -> str:
        """The factor values, mode and repetition."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        f = point.factors
        what = (f"fs={f['filesystem']:<15} buffer={f['buffer']}" if p.test == "basic"
                else f"clients={f['clients']} streams={f['streams']}")
        return (f"  {point.id}  {what}  mode={point.mode:<16} rep={point.repetition}  "
                f"~{self.point_seconds(exp):.0f} s")

    def point_title(self, exp: Experiment, point: Point) -> str:
        """How the progress line names a point."""
        f = point.factors
        what = (f"{f['filesystem']} {f['buffer']} B" if exp.settings.pfs.test == "basic" else
                f"N={f['io_servers']} {f['streams']} stream(s)")
        return f"{point.id} {what} {point.mode} rep {point.repetition}"

    def needs(self, exp: Experiment, points: list[Point]) -> list[space.Need]:
        """The largest point's files: on the I/O servers' storage, in a client's scratch
        tmpfs (the source data and what is read back), on the clients' disk volume."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        out: list[space.Need] = []
        worst: dict[str, int] = {"servers": 0, "scratch": 0, "disk": 0}
        for point in points:
            f = point.factors
            n = f["io_servers"]
            if p.test == "basic":
                nbytes = int(p.file_mb * MIB)
                worst["scratch"] = max(worst["scratch"], nbytes * (2 if f["filesystem"] ==
                                                                   "tmpfs" else 1))
                if f["filesystem"] == "disk":
                    worst["disk"] = max(worst["disk"], nbytes)
                elif f["filesystem"].startswith("orangefs"):
                    worst["servers"] = max(worst["servers"], nbytes // n + 1)
                continue
            region = int(p.region_mb_per_server * n * MIB)
            per_stream = region * p.regions_per_stream
            per_client = -(-f["streams"] // f["clients"])  # streams on the busiest client
            worst["scratch"] = max(worst["scratch"], 2 * per_stream * per_client)
            worst["servers"] = max(worst["servers"], per_stream * f["streams"] // n + 1)
        what = f"the files of {exp.source}'s largest point"
        if worst["servers"]:
            if p.storage == "tmpfs":
                out += space.on_tmpfs(f"{what} on each OrangeFS I/O server", worst["servers"],
                                      "PVFS_TMPFS_SIZE", "4g", "use fewer streams, smaller "
                                      "regions (pfs.region_mb_per_server, regions_per_stream) "
                                      "or more I/O servers", copies=max(p.io_servers),
                                      role="pfs_io")
            else:
                out.append(space.on_disk(what, worst["servers"] * max(p.io_servers),
                                         space.docker_root(), "Docker's data folder",
                                         "use fewer streams or smaller regions", role="pfs_io"))
        if worst["scratch"]:
            out += space.on_tmpfs(f"{what} in a client's scratch", worst["scratch"],
                                  "PVFS_SCRATCH_SIZE", "2g", "use fewer streams per client "
                                  "(pfs.client_containers) or smaller regions or files",
                                  copies=cluster_clients(p), role="pfs_clients")
        if worst["disk"]:
            out.append(space.on_disk(what, worst["disk"], space.docker_root(),
                                     "Docker's data folder", "lower pfs.file_mb",
                                     role="pfs_clients"))
        return out

    # -- run
    def preflight(self, exp: Experiment, points: list[Point]) -> None:
        """The OrangeFS image exists."""
        orangefs.check_image()

    def prepare(self, exp: Experiment, run_dir: Path) -> dict[str, Any]:
        """Per-run state: the run id (file names) and whether the fault fired."""
        return {"run_id": run_dir.name, "fault_done": False}

    def deploy(self, exp: Experiment, key: Hashable, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """A new cluster of 1 metadata + N I/O servers and the clients the test needs."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        n = int(key)  # type: ignore[arg-type]
        if previous is None:
            log(f"tierbench: bringing the OrangeFS cluster up (1 metadata + {n} I/O servers)")
        else:
            log(f"tierbench: new cluster with {n} I/O servers")
        where = placer.current()
        where.down()
        where.up(orangefs.cluster_spec(n, cluster_clients(p), strip_size=p.strip_size,
                                       storage=p.storage, job_timeout_s=p.job_timeout_s))
        servers, clients = orangefs.cluster_containers(where.replicas())
        return cluster_deployment(n, servers, clients)

    def finish(self, exp: Experiment, deployment: Deployment) -> list[str]:
        """The OrangeFS cluster removed: its servers admit whoever connects (the next run makes
        a new cluster anyway)."""
        placer.current().down()
        return ["removed the OrangeFS cluster (its servers admit whoever connects)"]

    def running(self) -> Deployment | None:
        """The OrangeFS cluster, when one is up."""
        try:
            servers, clients = orangefs.cluster_containers(placer.current().replicas())
        except PfsError:
            return None
        return cluster_deployment(len(servers) - 1, servers, clients)

    def provenance(self, exp: Experiment, deployment: Deployment) -> dict[str, Any]:
        """The OrangeFS source the image was built from (tarball and sha256)."""
        server = deployment.info["servers"][0]
        done = stack.exec_in(server, ["cat", "/opt/orangefs/SOURCE"], timeout=30)
        return {"orangefs": done.stdout.strip()}

    def run_point(self, ctx: PointContext) -> PointResult:
        """Streams, timed phases and checks; the figures are per phase."""
        p: Pfs = ctx.exp.settings.pfs  # type: ignore[attr-defined]
        f = ctx.point.factors
        point = PfsPoint(ctx.point.id, ctx.point.mode, ctx.point.repetition, f["io_servers"],
                         f["clients"], f["streams"], f["filesystem"], f["buffer"])
        ctx.record["io_servers"] = point.io_servers
        work = Work(p, ctx.exp.seed, ctx.prepared["run_id"], ctx.deployment, ctx.prepared,
                    ctx.sampler)
        row: dict[str, Any] = {}
        try:
            row.update(work.phases(point, row, ctx.dir, ctx.record))
        except PfsError as exc:  # a set-up or checksum step failed
            row["error"] = str(exc)
        finally:
            ctx.sampler.stop()
        error = row.pop("error", None)
        return PointResult(row, window=work.window, error=error)

    def after_point(self, exp: Experiment, point: Point, row: dict[str, Any],
                    deployment: Deployment) -> None:
        """A stopped server ends the run with one sentence naming it."""
        if row.get("error"):
            try:
                found = placer.current().replicas()
            except stack.StackError as exc:
                raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
            down = orangefs.stopped_servers(int(deployment.key), found)  # type: ignore[arg-type]
            if down:
                raise RunEnds(f"OrangeFS server {', '.join(down)} stopped during {point.id}: "
                              f"{row['error']}; the run ends here")

    # -- results
    def identity(self, exp: Experiment, point: Point) -> dict[str, Any]:
        """point, test, mode, repetition, cluster size, clients, streams, fs, buffer, access."""
        p: Pfs = exp.settings.pfs  # type: ignore[attr-defined]
        f = point.factors
        row: dict[str, Any] = {"point": point.id, "test": p.test, "mode": point.mode,
                               "repetition": point.repetition, "io_servers": f["io_servers"],
                               "clients": f["clients"], "streams": f["streams"]}
        if p.test == "basic":
            row.update(filesystem=f["filesystem"], buffer=f["buffer"],
                       access="native" if f["filesystem"] == "orangefs-native" else "posix")
        else:
            row.update(access=p.access, buffer=MIB)
        return row

    def columns(self, exp: Experiment) -> list[Column]:
        """Identity, then read_* and write_* figures, then integrity."""
        return [Column(c) for c in SUMMARY_COLUMNS]

    def brief(self, row: dict[str, Any]) -> str:
        """MB/s and CPU per side for each phase, integrity."""
        return brief(row)

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The report section of the experiment's test, factors in the file's order."""
        block = resolved.get("pfs") or {}
        spec = families.load(f"pfs-{block.get('test', 'concurrent')}")
        order = {k: list(block[k]) for k in ("io_servers", "clients", "streams", "filesystems",
                                             "buffers") if isinstance(block.get(k), list)}
        if "filesystems" in order:
            order["filesystem"] = order.pop("filesystems")
        if "buffers" in order:
            order["buffer"] = order.pop("buffers")
        spec["order"] = {k: v for k, v in order.items() if len(v) > 1}
        return spec


def brief(row: dict) -> str:
    """One progress line of a point."""
    if row.get("error"):
        return f"FAILED ({row['error']})"
    parts = []
    for phase in ("write", "read"):
        if f"{phase}_mb_per_s" in row:
            parts.append(f"{phase} {row[f'{phase}_mb_per_s']:.0f} MB/s (clients "
                         f"{row[f'{phase}_client_cpu_pct']:.0f} %, servers "
                         f"{row[f'{phase}_server_cpu_pct']:.0f} % CPU)")
    return "; ".join(parts) + f", integrity {row.get('integrity')}"
