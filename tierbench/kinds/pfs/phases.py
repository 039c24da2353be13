"""The timed phases of one pfs point on the running cluster: the streams of each client
container started at one wall-clock instant (pfs-io.sh repeats its transfer until measure_s has
passed, or moves it once with single_pass; in the basic test's send phases filesend sends the
file to a TCP sink in the client container the same way), the CPU of every container read at
each phase's start and end, what was read, written and sent checked against checksums, the fault
the experiment asks for, the point's files removed."""

from __future__ import annotations

import csv
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

from tierbench.kinds.contract import Deployment, log
from tierbench.kinds.pfs.settings import FILESYSTEMS, MIB, Pfs
from tierbench.kinds.pfs.stack import PfsInfo, PfsPrepared
from tierbench.kinds.pfs.streams import (SEND_PHASES, PointFactors, Stream, adler32, aggregate,
                                         make_source_cmd, parse_io_line, parse_send_line,
                                         phase_cpu, send_figures, send_problems, sha256)
from tierbench.tiers import orangefs
from tierbench.placement import model
from tierbench.tiers.orangefs import PfsError, label
from tierbench.transport import DidNotFinish

IO_SCRIPT = "/app/workloads/pfs/pfs-io.sh"
SENDER = "filesend"  # in the OrangeFS image (images/orangefs/filesend.c)
START_DELAY_S = 1.5  # every stream starts at the same wall-clock time, this far ahead


class Phases:
    """One point's streams, timed phases and checks on the running cluster."""

    def __init__(self, p: Pfs, seed: int, run_id: str, deployment: Deployment[PfsInfo],
                 prepared: PfsPrepared, now: Callable[[], dict[str, Any]]) -> None:
        self.settings, self.seed, self.run_id, self.prepared = p, seed, run_id, prepared
        self.servers: list[model.Container] = deployment.info.servers
        self.clients: list[model.Container] = deployment.info.clients
        self.now = now  # every counter read now (PointContext.now)
        self.io_servers = deployment.info.io_servers
        self.where = deployment.placer  # commands in the containers go through it
        # the bytes read from the disk system's devices (pfs.storage naming one), else None
        self.storage_reads = deployment.probes.get("storage")
        self.window: tuple[float, float] | None = None  # first phase start .. last phase end

    def _streams(self, point: PointFactors, row: dict) -> list[Stream]:
        exp = self.settings
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

    def run(self, point: PointFactors, row: dict, pdir: Path, record: dict) -> dict:
        exp = self.settings
        streams = self._streams(point, row)
        seed = self.seed
        out: dict[str, Any] = {}
        checks: list[str] = []
        sources = {s.number: f"/scratch/src-{s.nbytes}-{s.number}" for s in streams}
        self._each(streams, lambda s: make_source_cmd(s.number, s.nbytes, seed,
                                                      sources[s.number]), "write source data")
        phases = phase_names(exp, point)
        if phases[0] == "read":  # the files to read, written before the clock starts
            self._each(streams, lambda s: self._write_once(s, sources[s.number]),
                       "write the files to read")
        written: dict[int, str] = {}
        try:
            for phase in phases:
                if phase != "write" and exp.test == "basic" and exp.drop_caches:
                    self.where.drop_caches(self.clients + self.servers)
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
                elif phase in SEND_PHASES:
                    checks += send_problems(phase, results["streams"],
                                            {s.number: s.nbytes for s in streams},
                                            {s.number: adler32(s.number, s.nbytes, seed)
                                             for s in streams})
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
        timeout = self.settings.job_timeout_s * 3 + 60
        outputs = []
        for s in streams:
            done = self.where.exec(s.client, ["sh", "-c", cmd(s)], timeout=timeout)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                raise PfsError(f"{what} failed in {label(s.client)}: {lines[-1][:300]}")
            outputs.append(done.stdout)
        return outputs

    def _run_phase(self, phase: str, streams: list[Stream], sources: dict[int, str],
                   pdir: Path) -> dict:
        exp = self.settings
        lead = START_DELAY_S + self.where.exec_lead_s
        start = time.time() + lead + 0.02 * len(streams)
        by_client: dict[str, list[Stream]] = {}
        for s in streams:
            by_client.setdefault(s.client.id, []).append(s)
        clients_used = [label(self.clients[i]) for i in range(len(self.clients))
                        if self.clients[i].id in by_client]
        servers = [label(c) for c in self.servers]
        reads0 = self.storage_reads() if self.storage_reads else {}
        now0 = self.now()
        before = self._cpu(now0)
        host0 = now0["host"]
        timeout = lead + exp.measure_s + 3 * exp.job_timeout_s + 60
        # pfs-io.sh moves the file at least once: a duration of 0 is a single pass
        duration = 0 if exp.test == "basic" and exp.single_pass else exp.measure_s

        def run_client(group: list[Stream]) -> list[dict]:
            parts = []
            for s in group:
                if phase in SEND_PHASES:  # the file to a sink on 127.0.0.1, buffer-sized calls
                    args: list[Any] = [SENDER, SEND_PHASES[phase], s.file, s.buffer,
                                       f"{start:.6f}", duration]
                else:
                    local = s.local if phase == "read" else sources[s.number]
                    if phase == "read" and exp.test == "basic" and s.access == "posix":
                        # only dd gets /dev/null: pvfs2-cp deletes its destination when it fails
                        local = "/dev/null"
                    args = ["sh", IO_SCRIPT, phase, s.access, s.file, s.offset, s.nbytes,
                            s.buffer, f"{start:.6f}", duration, local]
                parts.append(f"({' '.join(shlex.quote(str(a)) for a in args)} "
                             f"| sed 's/^/stream={s.number} /') &")
            script = " ".join(parts) + " wait"
            try:
                done = self.where.exec(group[0].client, ["sh", "-c", script], timeout=timeout)
                text = done.stdout + done.stderr
            except DidNotFinish:
                text = ""
            results = []
            parse = parse_send_line if phase in SEND_PHASES else parse_io_line
            for s in group:
                line = next((ln for ln in text.splitlines() if ln.startswith(f"stream={s.number} ")),
                            "")
                r: dict[str, Any] = parse(line) if line else {
                    "status": "error", "error": f"no result within {timeout:.0f} s"}
                r.update(stream=s.number, client=label(s.client))
                results.append(r)
            return results

        fault = self._arm_fault(start)
        with ThreadPoolExecutor(max_workers=len(by_client)) as pool:
            results = [r for rs in pool.map(run_client, by_client.values()) for r in rs]
        if fault:
            fault.join()
        now1 = self.now()
        after = self._cpu(now1, before)
        host1 = now1["host"]
        reads1 = self.storage_reads() if self.storage_reads else {}
        figures = aggregate(results, start)
        figures["storage_read_mb"] = storage_read_mb(reads0, reads1)
        end = max((r["end"] for r in results if r.get("end")), default=start)
        self.window = (min(self.window[0], start), max(self.window[1], end)) if self.window \
            else (start, end)
        figures.update(phase_cpu(before, after, host0, host1, clients_used, servers,
                                 figures["s"], figures["bytes"]))
        if phase in SEND_PHASES:
            figures.update(send_figures(results))
        with (pdir / f"{phase}.csv").open("w", newline="") as fh:
            cols = ["stream", "client", "status", "start", "end", "iterations", "bytes", "last",
                    "error"] + (["file_bytes", "received", "adler32", "calls", "sender_cpu_s",
                                 "sink_cpu_s"] if phase in SEND_PHASES else [])
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
        fault = self.settings.fault.model_dump() if self.settings.fault else None
        if not fault or self.prepared.fault_done:
            return None
        self.prepared.fault_done = True
        target = next((c for c in self.servers if c.service == fault["stop"]), None)
        if target is None:
            log(f"tierbench: fault: {fault['stop']} is not part of this cluster; nothing stopped")
            return None

        def stop() -> None:
            time.sleep(max(0.0, start + fault["after_s"] - time.time()))
            log(f"tierbench: fault: stopping {fault['stop']} as the experiment asks")
            self.where.stop(target, 5)

        thread = threading.Thread(target=stop, name="fault", daemon=True)
        thread.start()
        return thread

    def _verify_reads(self, streams: list[Stream], seed: int) -> list[str]:
        if self.settings.test == "basic":
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
        if orangefs.stopped_servers(self.io_servers, self.where.replicas()):
            script = ""
        script += " rm -f /scratch/io-* /scratch/check-*"
        for c in {s.client.id: s.client for s in streams}.values():
            try:
                self.where.exec(c, ["sh", "-c", script],
                                timeout=self.settings.job_timeout_s * 2 + 10)
            except DidNotFinish:
                log(f"tierbench: removing the files of the point in {label(c)} timed out")


def phase_names(p: Pfs, point: PointFactors) -> list[str]:
    """A point's timed phases in order: basic writes, reads, then sends the file with read/write
    calls and with sendfile (pfs.send; not through the native library, which gives no file
    descriptor); concurrent reads then writes; streams only reads."""
    if p.test == "basic":
        sends = list(SEND_PHASES) if p.send and point.filesystem != "orangefs-native" else []
        return ["write", "read", *sends]
    return ["read", "write"] if p.test == "concurrent" else ["read"]


def storage_read_mb(before: dict[str, int], after: dict[str, int]) -> float:
    """MB (10^6 bytes) the disk system's devices read between two readings of the storage
    probe; NaN without a disk system or where the counters could not be read."""
    if "read_bytes" not in before or "read_bytes" not in after:
        return float("nan")
    return (after["read_bytes"] - before["read_bytes"]) / 1e6
