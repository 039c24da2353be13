"""The file-server kind as the contract sees it: its settings and roles, the axes and the
deployment key (GlusterFS idle or busy, or an OrangeFS cluster of N I/O servers), the plan's
lines, what the largest point writes, and each part of the run handed to the module of the
package that does it."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

from tierbench.kinds import families
from tierbench.kinds.contract import (Column, Deployment, Experiment, Kind, Point, PointContext,
                                      PointResult, end_if_stopped, failed,
                                      tool_versions)
from tierbench.kinds.fs import sequence, stack, tools
from tierbench.kinds.fs.roles import ROLES
from tierbench.kinds.fs.settings import FILEBENCH, MIB, Fs, FsSettings, memory_bytes
from tierbench.kinds.fs.stack import FsInfo, FsPrepared
from tierbench.tiers import orangefs
from tierbench.placement import placer
from tierbench import space


class FsKind(Kind[FsSettings, FsInfo, FsPrepared]):
    """File-server benchmarks: dbench and fio clients against GlusterFS or OrangeFS."""

    name = "fs"
    description = ("file-server benchmarks: dbench (NetBench's Disk Mix) and fio against "
                   "GlusterFS or OrangeFS")
    model = FsSettings
    scalable = {"fs.measure_s": 2, "fs.warmup_s": 1, "fs.set_mb": 64, "fs.write_mb": 16}
    block = "fs"
    tiers = stack.TIERS
    bring_up = "the servers' bring-up (about 10 s; 30 s for OrangeFS)"
    variation_pct = 5.0
    declared_roles = ROLES
    roles = ("fs_server", "fs_client")
    plan_widths = (36, 20)

    def cluster_roles(self, exp: Experiment[FsSettings]) -> list[str]:
        """GlusterFS: the server (and its hog) on the fs_server node, the clients round the
        fs_client nodes; OrangeFS: the pfs kind's roles (compose/host-pvfs.yml)."""
        if self.settings(exp).server == "orangefs":
            return ["pfs_meta", "pfs_io", "pfs_clients"]
        return list(self.roles)

    def settings(self, exp: Experiment[FsSettings]) -> Fs:
        """The experiment's `fs:` block."""
        return exp.settings.fs

    def resolved(self, exp: Experiment[FsSettings]) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        f = self.settings(exp)
        block: dict[str, Any] = {"test": f.test, "server": f.server, "measure_s": f.measure_s}
        if f.test == "dbench":
            block.update(load=list(f.load), programs=list(f.programs), think_ms=list(f.think_ms),
                         warmup_s=tools.dbench_warmup_s(f.measure_s))
        elif f.test == "randread":
            block.update(load=list(f.load), programs=list(f.programs), file_mb=f.file_mb,
                         block=f.block, warmup_s=f.warmup_s)
        elif f.test == "filebench":
            block.update(load=list(f.load), workloads=list(f.workloads), set_mb=f.set_mb,
                         write_mb=f.write_mb, warmup_s=f.warmup_s)
            if f.clients > 1:
                block["clients"] = f.clients
            if f.server_memory:
                block["server_memory"] = f.server_memory.lower()
        else:
            block.update(sessions=list(f.sessions), file_mb=f.file_mb, block=f.block,
                         warmup_s=f.warmup_s)
            if f.server == "orangefs":
                block.update(io_servers=f.io_servers, client_containers=f.client_containers,
                             strip_size=f.strip_size, storage=f.storage,
                             job_timeout_s=f.job_timeout_s)
        return {**self.envelope(exp), "fs": block}

    def axes(self, exp: Experiment[FsSettings]) -> list[tuple[str, list[Any]]]:
        """(load x) the test's factors x mode x repetition."""
        f = self.settings(exp)
        factors: list[tuple[str, list[Any]]]
        if f.test == "dbench":
            factors = [("load", list(f.load)), ("programs", list(f.programs)),
                       ("think_ms", list(f.think_ms))]
        elif f.test == "randread":
            factors = [("load", list(f.load)), ("programs", list(f.programs))]
        elif f.test == "filebench":
            factors = [("load", list(f.load)), ("workload", list(f.workloads))]
        else:
            factors = [("sessions", list(f.sessions))]
        return factors + [("mode", [m.name for m in exp.modes]),
                          ("repetition", list(range(1, exp.repetitions + 1)))]

    def deployment_key(self, exp: Experiment[FsSettings], combo: dict[str, Any] | Point) -> Hashable:
        """GlusterFS with the server idle or busy; or an OrangeFS cluster of N I/O servers."""
        f = self.settings(exp)
        if f.server == "orangefs":
            return ("orangefs", f.io_servers)
        factors = combo if isinstance(combo, dict) else combo.factors
        return ("gluster", factors.get("load", "idle"))

    def order(self, exp: Experiment[FsSettings], combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each server load, loads in the order listed."""
        f = self.settings(exp)
        if "load" not in combos[0]:
            return combos
        listed = list(f.load)
        return sorted(combos, key=lambda c: listed.index(c["load"]))

    # -- plan
    def point_seconds(self, exp: Experiment[FsSettings]) -> float:
        """settle + the tool's time (dbench: warm-up of a fifth, timed part, clean-up) + set-up."""
        f = self.settings(exp)
        if f.test == "dbench":
            return exp.settle_s + f.measure_s + tools.dbench_warmup_s(f.measure_s) + 6
        if f.test == "iozone":
            return exp.settle_s + 2 * (sequence.START_DELAY_S + f.warmup_s + f.measure_s + 2) + 4
        if f.test == "filebench":  # and the start of fio in each further client
            prep = 10.0 + sequence.START_PER_CONTAINER_S * (f.clients - 1)
        else:  # randread: the programs' files laid out and removed every point, at about
            # 8 MiB/s on average (measured here: 14-24 s a point idle, up to 50 s busy)
            prep = 6 + sum(f.programs) / len(f.programs) * f.file_mb / 8
        return exp.settle_s + sequence.START_DELAY_S + f.warmup_s + f.measure_s + prep

    def plan_header(self, exp: Experiment[FsSettings], points: list[Point]) -> list[str]:
        """The test, its tool, the server and what a point takes."""
        f = self.settings(exp)
        tool = {"dbench": f"dbench 4.0 (NetBench's Disk Mix), {tools.dbench_warmup_s(f.measure_s)}"
                          f" s warm-up + {f.measure_s} s timed",
                "randread": f"fio, {f.block}-byte random reads of a {f.file_mb} MiB file per "
                            f"program, {f.warmup_s} s ramp + {f.measure_s} s timed",
                "filebench": f"fio job files of 001's Filebench workloads, sets of "
                             f"{f.set_mb} MiB, writers' files {f.write_mb} MiB"
                             + (" per client" if f.clients > 1 else "")
                             + f", {f.warmup_s} s ramp + {f.measure_s} s timed",
                "iozone": f"fio in IOzone's role: per session a {f.file_mb} MiB file written "
                          f"then read in {f.block}-byte records, {f.warmup_s} s ramp + "
                          f"{f.measure_s} s timed per phase"}[f.test]
        server = ("GlusterFS, one brick on a volume of the host's disk, FUSE client"
                  if f.server == "gluster" else
                  f"OrangeFS, 1 metadata + {f.io_servers} I/O servers ({f.storage} storage), "
                  f"{f.client_containers} client containers")
        lines = [f"{self.plan_head(exp, points)}; test {f.test}: {tool}",
                 f"server: {server}; per point about {self.point_seconds(exp):.0f} s"]
        if f.test == "filebench" and (f.clients > 1 or f.server_memory):
            lines += self.filebench_lines(f)
        return lines

    def filebench_lines(self, f: Fs) -> list[str]:
        """The clients and their thread totals, and each read set against the server's
        memory cap."""
        n = f.clients
        totals = ", ".join(f"{w.split('-')[0]}: {n} x {FILEBENCH[w].threads} = "
                           f"{n * FILEBENCH[w].threads:,}" for w in f.workloads)
        lines = [f"clients: {n} client machines at once, each running the workload's threads "
                 f"on its own sets; threads in all by workload: {totals}"]
        if f.server_memory:
            cap = memory_bytes(f.server_memory)
            each = n * f.set_mb * MIB
            lines.append(f"server memory capped at {f.server_memory} (its page cache "
                         f"included): each read set {n} x {f.set_mb} MiB = {each / MIB:,.0f} "
                         f"MiB, {each / cap:.1f} x the cap"
                         + ("" if each > cap else " (it fits: the sets can stay cached)"))
        return lines

    def deployment_line(self, exp: Experiment[FsSettings], point: Point, first: bool) -> str:
        """The deployment from this point on."""
        f = self.settings(exp)
        if f.server == "orangefs":
            net = exp.placer.network_words("198.18.3.0/24")
            return (f"  -- OrangeFS cluster: 1 metadata + {f.io_servers} I/O servers, "
                    f"{f.client_containers} client container(s) on {net}")
        load = ("idle server" if point.factors.get("load", "idle") == "idle" else
                "busy server (an MPEG decoder running on its CPUs all the time)")
        n = f.clients
        net = exp.placer.network_words(
            "198.18.12.0/24", "" if n == 1 else "the clients round the fs_client nodes")
        return ("  -- file server (GlusterFS"
                + (f", {f.server_memory} of memory" if f.server_memory else "")
                + f") and {n} client{'s' if n > 1 else ''} on {net}, {load}")

    def what(self, exp: Experiment[FsSettings], point: Point) -> str:
        """A point's factors in a few words."""
        p = point.factors
        test = self.settings(exp).test
        if test == "dbench":
            return f"{p['load']} programs={p['programs']} think={p['think_ms']:g} ms"
        if test == "randread":
            return f"{p['load']} programs={p['programs']}"
        if test == "filebench":
            clients = self.settings(exp).clients
            threads = FILEBENCH[p["workload"]].threads * clients
            return f"{p['load']} {p['workload']}" + (f" {threads:,} thr" if clients > 1 else "")
        return f"sessions={p['sessions']}"

    def needs(self, exp: Experiment[FsSettings], points: list[Point]) -> list[space.Need]:
        """What the largest point writes on the server (the share's volume on the host's disk,
        or the OrangeFS servers' storage) and the think-time load file in the client's /tmp."""
        f = self.settings(exp)
        what = f"the files of {exp.source}'s largest point"
        out: list[space.Need] = []
        if f.test == "dbench":
            nbytes = max(f.programs) * tools.DBENCH_BYTES_PER_PROGRAM
            if any(t > 0 for t in f.think_ms):
                lines = tools.DBENCH_LOADFILE_LINES
                out += space.on_tmpfs("the think-time load file", tools.DBENCH_LOADFILE_BYTES
                                      + lines * len("Sleep 1000000 NT_STATUS_OK\n"),
                                      "FS_CLIENT_TMP_SIZE", "256m", "use think_ms: 0",
                                      role="fs_client")
        elif f.test == "randread":
            nbytes = max(f.programs) * int(f.file_mb * MIB)
        elif f.test == "filebench":  # every client's sets and writers' files
            sets = {FILEBENCH[w].fileset for w in f.workloads}
            nbytes = sum(int(f.set_mb * MIB) for s in sets if s != "w")
            if "w" in sets:
                nbytes += max(FILEBENCH[w].threads for w in f.workloads
                              if FILEBENCH[w].fileset == "w") * int(f.write_mb * MIB)
            nbytes *= f.clients
            what = f"the file sets of {exp.source}"
        else:
            nbytes = max(f.sessions) * int(f.file_mb * MIB)
        if f.server == "orangefs":
            per_server = nbytes // f.io_servers + 1
            if f.storage == "tmpfs":
                return out + space.on_tmpfs(f"{what} on each OrangeFS I/O server", per_server,
                                            "PVFS_TMPFS_SIZE", "4g", "use fewer sessions, a "
                                            "smaller fs.file_mb or more I/O servers",
                                            copies=f.io_servers, role="pfs_io")
            return out + [space.on_disk(what, nbytes, space.docker_root(),
                                        "Docker's data folder", "lower fs.file_mb",
                                        role="pfs_io")]
        fix = {"dbench": "use fewer programs", "randread": "lower fs.file_mb or use fewer "
               "programs", "filebench": "lower fs.set_mb or fs.write_mb",
               "iozone": "lower fs.file_mb or use fewer sessions"}[f.test]
        if f.clients > 1:
            fix += " or use fewer fs.clients"
        return out + [space.on_disk(f"{what} on the file server's share", nbytes,
                                    space.docker_root(), "Docker's data folder", fix,
                                    role="fs_server")]

    # -- run
    def preflight(self, exp: Experiment[FsSettings], points: list[Point]) -> None:
        """The images are built (the first time, or after their build context changed)."""
        if self.settings(exp).server == "orangefs":
            orangefs.check_image()
        else:
            exp.placer.ensure_images([stack.IMAGE])

    def prepare(self, exp: Experiment[FsSettings], run_dir: Path) -> FsPrepared:
        """Per-run state: the run id (folder names on the share), the file sets laid out, and
        how many points still read each set (a set is removed after its last one)."""
        uses: dict[str, int] = {}
        if self.settings(exp).test == "filebench":
            for point in self.points(exp, exp.seed):
                fileset = FILEBENCH[point["workload"]].fileset
                uses[fileset] = uses.get(fileset, 0) + 1
        return FsPrepared(run_dir.name, set(), uses)

    def deploy(self, exp: Experiment[FsSettings], key: Hashable, prepared: FsPrepared,
               previous: Deployment[FsInfo] | None, point: Point) -> Deployment[FsInfo]:
        """GlusterFS: server and client up (the hog too for a busy server); OrangeFS: a cluster
        of 1 metadata + N I/O servers and the clients."""
        return stack.deploy(exp.placer, self.settings(exp), key, prepared, previous)

    def finish(self, exp: Experiment[FsSettings], deployment: Deployment[FsInfo]) -> list[str]:
        """An OrangeFS cluster removed (its servers admit whoever connects; the next run makes
        a new one); the GlusterFS server stays up, admitting only the client's address."""
        if deployment.info.server != "orangefs":
            return []
        return orangefs.remove(exp.placer)

    def running(self, where: placer.Placer) -> Deployment[FsInfo] | None:
        """The file-server tier, when it is up."""
        return stack.running(where)

    def provenance(self, exp: Experiment[FsSettings], deployment: Deployment[FsInfo],
                   ) -> dict[str, Any]:
        """The tools' and the server's versions as the containers report them."""
        where = deployment.placer
        tools = {"fio": ["fio", "--version"]}
        if deployment.info.server == "gluster":  # the OrangeFS clients have no dbench
            tools["dbench"] = ["sh", "-c", "dbench --help 2>&1 | head -1"]
        out: dict[str, Any] = tool_versions(where, deployment.info.clients[0], tools,
                                            "not installed")
        if deployment.info.server == "gluster":
            done = where.exec(deployment.info.servers[0], ["glusterfsd", "--version"],
                              timeout=30)
            lines = done.stdout.strip().splitlines()
            out["glusterfs"] = lines[0] if lines else "unknown"
        else:
            done = where.exec(deployment.info.servers[0], ["cat", "/opt/orangefs/SOURCE"],
                              timeout=30)
            out["orangefs"] = done.stdout.strip()
        return {"tools": out}

    def run_point(self, ctx: PointContext[FsSettings, FsInfo, FsPrepared]) -> PointResult:
        """The test's tool, then the figures over the samples bracketing its timed part."""
        return sequence.run(ctx, self.settings(ctx.exp))

    def after_point(self, exp: Experiment[FsSettings], point: Point, row: dict[str, Any],
                    deployment: Deployment[FsInfo]) -> None:
        """A server or client container that stopped ends the run with one sentence."""
        end_if_stopped(deployment.placer, point, row,
                       deployment.info.servers + deployment.info.clients)

    def identity(self, exp: Experiment[FsSettings], point: Point) -> dict[str, Any]:
        """point, test, server, the factors, mode, repetition."""
        f = self.settings(exp)
        return {"point": point.id, "test": f.test, "server": f.server, **point.factors,
                "mode": point.mode, "repetition": point.repetition}

    def columns(self, exp: Experiment[FsSettings]) -> list[Column]:
        """Identity, then the test's figures and the CPU figures (per phase for iozone)."""
        f = self.settings(exp)
        ident = [name for name, _ in self.axes(exp) if name not in ("mode", "repetition")]
        cpu = ["window_s", f"cpu_s_{stack.CLIENT_TIER}", f"cpu_s_{stack.SERVER_TIER}", "client_cpu_pct",
               "server_cpu_pct", "hog_cpu_pct", "server_net_mb_per_s", "host_usr_pct",
               "host_sys_pct", "host_softirq_pct", "host_idle_pct", "client_cpu_us_per_kb",
               "server_cpu_us_per_kb", "host_cpu_us_per_kb"]
        if f.test == "dbench":
            figures = ["mb_per_s", "ops_per_s", "max_latency_ms", "operations", "bytes"] + cpu
        elif f.test == "iozone":
            figures = [f"{phase}_{c}" for phase in ("write", "read")
                       for c in ["mb_per_s", "iops", "latency_ms", "p99_ms", "bytes", *cpu]]
        else:
            figures = ["mb_per_s", "iops", "latency_ms", "p99_ms", "bytes"] + cpu
        return [Column(c) for c in ["point", "test", "server", *ident, "mode", "repetition",
                                    *figures]]

    def brief(self, row: dict[str, Any]) -> str:
        """Throughput and the server's CPU."""
        parts = []
        for prefix in ("", "write_", "read_"):
            if row.get(f"{prefix}mb_per_s") is None:
                continue
            iops = row.get(f"{prefix}iops")
            parts.append(f"{prefix.rstrip('_') + ' ' if prefix else ''}"
                         f"{row[f'{prefix}mb_per_s']:.1f} MB/s"
                         + (f" ({iops:.0f} IOPS)" if iops else "")
                         + (f", server CPU {row[f'{prefix}server_cpu_pct']:.0f} %"
                            if row.get(f"{prefix}server_cpu_pct") is not None else ""))
        return failed(row) or "; ".join(parts)

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The family of the experiment (by name, else by test), factors in the file's order."""
        block = resolved.get("fs") or {}
        name = str(resolved.get("name", ""))
        by_test = {"dbench": "fs-clients", "randread": "fs-randread",
                   "filebench": "fs-filebench", "iozone": "pfs-iozone"}
        spec = families.load(families.by_name(
            "fs", name, by_test.get(str(block.get("test")), "fs-clients")))
        keys = {"load": "load", "programs": "programs", "think_ms": "think_ms",
                "workload": "workloads", "sessions": "sessions"}
        spec["order"] = families.order(block, {k: v for k, v in keys.items()
                                               if k in spec["factors"]})
        return spec


