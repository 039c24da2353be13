"""One file-server point: the test's tool in the client containers (dbench with its lines
stamped as they arrive; fio in every client at one wall-clock instant), then the CPU and network
figures over the samples that bracket each timed part."""

from __future__ import annotations

import shlex
import threading
import time
from typing import Any

from tierbench.kinds.contract import PointContext, PointResult
from tierbench.kinds.fs import tools
from tierbench.kinds.fs.figures import cpu_figures, fio_figures, memory_figures
from tierbench.kinds.fs.settings import FILEBENCH, LAYOUT, MIB, SET_B_FILES, Fs, FsSettings
from tierbench.kinds.fs.stack import BRICK_PATH, PVFS_MOUNT, SHARE, FsInfo, FsPrepared
from tierbench.measure import counters
from tierbench.measure.counters import MeasureError
from tierbench.placement import model
from tierbench.tiers.orangefs import PfsError
from tierbench.transport import DidNotFinish, PIPE, STDOUT

START_DELAY_S = 2.0  # fio clients in several containers start together, this far ahead
START_PER_CONTAINER_S = 0.3  # and this much more for each container beyond the first

FsContext = PointContext[FsSettings, FsInfo, FsPrepared]


def run(ctx: FsContext, f: Fs) -> PointResult:
    """The test's tool, then the figures over the samples bracketing its timed part."""
    runner = {"dbench": dbench, "randread": randread, "filebench": filebench,
              "iozone": iozone}[f.test]
    try:
        values, windows, per_second = runner(ctx, f)
    except (tools.FsParseError, PfsError, model.StackError) as exc:
        ctx.close_window()
        return PointResult(error=str(exc))
    except DidNotFinish as exc:
        ctx.close_window()
        return PointResult(error=f"the tool did not finish within {exc.timeout:.0f} s and "
                           "was stopped")
    samples = ctx.close_window()
    error = values.pop("error", None)
    for prefix, (start, end, nbytes) in windows.items():
        try:
            first, last = counters.window(samples, start, end)
        except MeasureError as exc:
            return PointResult(values, per_second, error=error or str(exc))
        values.update(cpu_figures(first, last, nbytes, prefix,
                                  ctx.deployment.info.server_net))
        if f.test == "filebench":
            memory = memory_figures(samples, first, last)
            values.update(memory)
            if "server_memory_mb" in memory:  # the cap, and whether the cache kept under it
                ctx.record["server_memory"] = {
                    **memory, "held": memory.get("server_cache_mb", 0.0)
                    <= memory["server_memory_mb"]}
        ctx.record[f"{prefix}window"] = {"start": start, "end": end,
                                         "first_sample": first["t"], "last_sample": last["t"]}
    span = (min(w[0] for w in windows.values()), max(w[1] for w in windows.values()))
    return PointResult(values, per_second, span, error=error)

def dbench(ctx: FsContext, f: Fs) -> tuple[dict, dict, list]:
    """dbench with the point's programs and think time; its lines stamped as they arrive."""
    p = ctx.point.factors
    client = ctx.deployment.info.clients[0]
    folder = f"{SHARE}/{ctx.prepared.run_id}-{ctx.point.id}"
    loadfile = tools.DBENCH_LOADFILE
    us = think_us(p["think_ms"])
    if us:
        loadfile = f"/tmp/think-{us}.txt"
        checked(ctx, client, ["sh", "-c", tools.think_loadfile(us, loadfile)],
                "write the think-time load file", 120)
    checked(ctx, client, ["mkdir", "-p", folder], "make the point's folder on the share", 60)
    argv = tools.dbench_command(p["programs"], f.measure_s, loadfile, folder)
    timed: list[tuple[float, str]] = []
    limit = f.measure_s * 2 + 120 + 0.005 * us * p["programs"]
    try:
        with (ctx.dir / "dbench.txt").open("w") as raw:
            proc = ctx.deployment.placer.popen(client, argv, stdout=PIPE,
                                               stderr=STDOUT, text=True)
            killer = threading.Timer(limit, proc.kill)
            killer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    timed.append((time.time(), line.rstrip("\n")))
                    raw.write(line)
                proc.wait()
            finally:
                killer.cancel()
    finally:
        ctx.deployment.placer.exec(client, ["sh", "-c", f"rm -rf {folder} /tmp/think-*.txt"],
                                   timeout=300)
    text = "".join(line + "\n" for _, line in timed)
    report = tools.parse_dbench(text)
    start, end = tools.dbench_window(timed)
    nbytes = report["mb_per_s"] * 1e6 * (end - start)
    per_second = [{"t": round(t, 3), "clients": d.clients, "lines": d.lines,
                   "mb_per_s": d.mb_per_s, "phase": d.phase, "second": d.second,
                   "latency_ms": d.latency_ms}
                  for t, line in timed if (d := tools.parse_dbench_line(line))]
    # dbench resets its operation counts after the warm-up: these are the timed part's
    operations = sum(o["count"] for o in report["operations"].values())
    values: dict[str, Any] = {"mb_per_s": report["mb_per_s"],
                              "ops_per_s": operations / (end - start),
                              "max_latency_ms": report["max_latency_ms"],
                              "bytes": round(nbytes), "operations": operations}
    if report["errors"]:
        values["error"] = f"dbench reported: {report['errors'][0][:200]}"
    ctx.record["operations"] = report["operations"]
    return values, {"": (start, end, nbytes)}, per_second

def randread(ctx: FsContext, f: Fs) -> tuple[dict, dict, list]:
    """fio: each program reads `block` bytes at random places of its own file."""
    p = ctx.point.factors
    client = ctx.deployment.info.clients[0]
    folder = f"{SHARE}/{ctx.prepared.run_id}-{ctx.point.id}"
    argv = tools.fio_command(name="randread", directory=folder, rw="randread",
                               block=f.block, size=int(f.file_mb * MIB),
                               jobs=p["programs"], runtime_s=f.measure_s,
                               ramp_s=f.warmup_s, direct=True)
    checked(ctx, client, ["mkdir", "-p", folder], "make the point's folder on the share", 60)
    try:
        checked(ctx, client, [*argv, "--create_only=1"], "lay out the programs' files",
                600)
        report, start = fio_at(ctx, f, [(client, argv)], "fio")
    finally:
        ctx.deployment.placer.exec(client, ["rm", "-rf", folder], timeout=300)
    begin = start + f.warmup_s
    values = fio_figures(report, "read")
    if report["errors"]:
        values["error"] = f"fio: {report['errors'][0]}"
    return values, {"": (begin, begin + f.measure_s, report["read"]["bytes"])}, []

def filebench(ctx: FsContext, f: Fs) -> tuple[dict, dict, list]:
    """One of the nine workloads in every client machine at once, each on its own sets (in its
    own folder with several clients, as 001's clients each had their own file system): a set
    laid out once per run, the server's cache emptied (uncached) or filled (cached) on the
    server, then fio on the job file in every client at one instant, their results summed."""
    w = FILEBENCH[ctx.point["workload"]]
    clients = ctx.deployment.info.clients[:f.clients]
    if len(clients) < f.clients:
        raise model.StackError(f"the point needs {f.clients} client machines but "
                                 f"{len(clients)} run: bring the tier up again (`tierbench "
                                 "clean`, then the run)")
    base = f"{ctx.prepared.run_id}-filebench"
    folders = [client_folder(base, k, len(clients)) for k in range(len(clients))]
    envs = [filebench_env(f, f"{SHARE}/{d}", f.warmup_s, f.measure_s) for d in folders]
    checked(ctx, clients[0], ["mkdir", "-p", *(f"{SHARE}/{d}" for d in folders)],
            "make the file sets' folders on the share", 60)
    if w.fileset != "w" and w.fileset not in ctx.prepared.sets:
        ctx.log(f"tierbench: laying out file set {w.fileset} ({len(clients)} x {f.set_mb} MiB)"
                " on the share")
        in_parallel(ctx, [(c, [*tools.filebench_command(LAYOUT[w.fileset], env),
                               "--create_only=1"]) for c, env in zip(clients, envs)],
                    f"lay out file set {w.fileset}", 3600)
        ctx.prepared.sets.add(w.fileset)
    if w.cache:
        server = ctx.deployment.info.servers[0]
        checked(ctx, server, ["sh", "-c", server_cache(w.cache, [
            f"{BRICK_PATH}/{d}/{name}" for d in folders for name in set_files(w.fileset)])],
                f"{'empty' if w.cache == 'uncached' else 'fill'} the server's page cache",
                1800)
        ctx.record["server_cache"] = w.cache
    try:
        reports, start = fio_each(ctx, f, [(c, tools.filebench_command(w.name, env))
                                           for c, env in zip(clients, envs)], "fio")
    finally:
        uses = ctx.prepared.uses
        uses[w.fileset] = uses.get(w.fileset, 1) - 1
        if w.fileset == "w" or uses[w.fileset] <= 0:  # the set's last point: remove it
            names = set_files(w.fileset) if w.fileset != "w" else ["write.*"]
            files = " ".join(f"{SHARE}/{d}/{name}" for d in folders for name in names)
            ctx.deployment.placer.exec(clients[0], ["sh", "-c", f"rm -f {files}"], timeout=300)
            ctx.prepared.sets.discard(w.fileset)
    report = tools.sum_fio(reports)
    direction = w.direction
    begin, end, nbytes = common_window(ctx, reports, direction, start + f.warmup_s,
                                       f.measure_s)
    values = fio_figures(report, direction)
    values.update(per_client(ctx, clients, reports, direction))
    values["threads"] = w.threads * len(clients)
    if w.fileset in ("a", "c") and w.cache == "uncached":
        values["set_passes"] = report[direction]["bytes"] / (len(clients) * f.set_mb * MIB)
    if report["errors"]:
        values["error"] = f"fio: {report['errors'][0]}"
    return values, {"": (begin, end, nbytes)}, []


def common_window(ctx: FsContext, reports: list[dict], direction: str, begin: float,
                  measure_s: float) -> tuple[float, float, float]:
    """The span in which every client's fio was in its timed part, from its report (its end
    and its timed run time; on a busy host the `docker exec`s of many clients reach them after
    the common start, so fio's own clock says when each ran), and the bytes moved in it (the
    sum's, in proportion); fio's common start + ramp when a report has no time stamp."""
    timed = [(r["ended_s"] - r[direction]["runtime_ms"] / 1000, r["ended_s"]) for r in reports
             if r.get("ended_s") and r[direction]["runtime_ms"]]
    total = sum(r[direction]["bytes"] for r in reports)
    if len(timed) < len(reports):
        return begin, begin + measure_s, total
    first, last = max(t[0] for t in timed), min(t[1] for t in timed)
    ctx.record["client_spans"] = [[round(a, 3), round(b, 3)] for a, b in timed]
    if last - first < 1:  # hardly overlapping: the span of them all (said in the record)
        first, last = min(t[0] for t in timed), max(t[1] for t in timed)
        ctx.record["clients_overlap"] = False
    mean = sum(b - a for a, b in timed) / len(timed)
    return first, last, total * min(1.0, (last - first) / mean)


def client_folder(base: str, k: int, clients: int) -> str:
    """The folder of client K's sets on the share (under ``base``; ``base`` itself for one
    client, as before there were several)."""
    return base if clients == 1 else f"{base}/c{k + 1}"


def per_client(ctx: FsContext, clients: list[model.Container], reports: list[dict],
               direction: str) -> dict[str, Any]:
    """Each client's own figures kept in the point's record (per_client); in the row, how many
    clients there were, how many moved data in the timed part, and the slowest one's bytes in %
    of the mean (100: every client moved as much)."""
    mine = [{"client": c.service, **fio_figures(r, direction)} for c, r in zip(clients, reports)]
    ctx.record["per_client"] = mine
    moved = [m["bytes"] for m in mine]
    mean = sum(moved) / len(moved)
    return {"clients": len(clients), "clients_moving": sum(1 for b in moved if b > 0),
            "slowest_client_pct": 100 * min(moved) / mean if mean else None}


def in_parallel(ctx: FsContext, jobs: list[tuple[model.Container, list[str]]], what: str,
                timeout: float) -> None:
    """Commands that must succeed, one in each container, all at once; StackError naming the
    first that failed."""
    errors: list[str] = []

    def one(container: model.Container, argv: list[str]) -> None:
        try:
            checked(ctx, container, argv, what, timeout)
        except model.StackError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise model.StackError(errors[0])

def iozone(ctx: FsContext, f: Fs) -> tuple[dict, dict, list]:
    """Sessions spread over the client containers write, then read, their own files at the
    same time (fio, sequential, `block`-byte records)."""
    sessions = ctx.point["sessions"]
    clients = ctx.deployment.info.clients
    mount = SHARE if ctx.deployment.info.server == "gluster" else PVFS_MOUNT
    spread = sessions_per_client(sessions, len(clients))
    folders = [f"{mount}/{ctx.prepared.run_id}-{ctx.point.id}-c{i + 1}"
               for i in range(len(spread))]
    values: dict[str, Any] = {}
    windows: dict[str, tuple[float, float, float]] = {}
    try:
        for folder, client in zip(folders, clients):
            checked(ctx, client, ["mkdir", "-p", folder], "make the session folder", 60)
        for phase in ("write", "read"):
            jobs = [(client, tools.fio_command(
                name=phase, directory=folder, rw=phase, block=f.block,
                size=int(f.file_mb * MIB), jobs=n, runtime_s=f.measure_s,
                ramp_s=f.warmup_s, direct=True))
                for client, folder, n in zip(clients, folders, spread)]
            report, start = fio_at(ctx, f, jobs, f"fio-{phase}")
            begin = start + f.warmup_s
            values.update(fio_figures(report, phase, f"{phase}_"))
            windows[f"{phase}_"] = (begin, begin + f.measure_s, report[phase]["bytes"])
            if report["errors"]:
                values["error"] = f"fio ({phase}): {report['errors'][0]}"
                break
    finally:
        for folder, client in zip(folders, clients):
            ctx.deployment.placer.exec(client, ["rm", "-rf", folder], timeout=300)
    values["client_containers_used"] = len(spread)
    return values, windows, []

def fio_at(ctx: FsContext, f: Fs, jobs: list[tuple[model.Container, list[str]]],
           name: str) -> tuple[dict[str, Any], float]:
    """fio in each container at once, all starting at the same wall-clock instant; their
    reports (kept as NAME-K.json) summed."""
    reports, start = fio_each(ctx, f, jobs, name)
    return tools.sum_fio(reports), start


def fio_each(ctx: FsContext, f: Fs, jobs: list[tuple[model.Container, list[str]]],
             name: str) -> tuple[list[dict[str, Any]], float]:
    """fio in each container at once, all starting at the same wall-clock instant (a little
    later the more containers there are); each one's report (kept as NAME-K.json) and the
    instant."""
    lead = (START_DELAY_S + START_PER_CONTAINER_S * (len(jobs) - 1)
            + ctx.deployment.placer.exec_lead_s)
    start = time.time() + lead
    limit = lead + f.warmup_s + f.measure_s + 600
    outputs: list[str] = [""] * len(jobs)

    def one(k: int) -> None:
        container, argv = jobs[k]
        done = ctx.deployment.placer.exec(container, tools.at_start(start, argv),
                                          timeout=limit)
        outputs[k] = done.stdout + done.stderr

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reports = []
    for k, text in enumerate(outputs, 1):
        (ctx.dir / f"{name}-{k}.json").write_text(text)
        reports.append(tools.parse_fio(text))
    return reports, start


def sessions_per_client(sessions: int, containers: int) -> list[int]:
    """Sessions on each client container, spread evenly (the first ones get one more)."""
    base, extra = divmod(sessions, containers)
    return [base + (1 if i < extra else 0) for i in range(containers)
            if base + (1 if i < extra else 0) > 0]


def think_us(think_ms: float) -> int:
    """A think time in ms as dbench's Sleep microseconds."""
    return int(round(think_ms * 1000))


def filebench_env(fs: Fs, directory: str, ramp_s: int, runtime_s: int) -> dict[str, Any]:
    """The job files' environment: folder, times and sizes (set b is 20 files of set_mb/20)."""
    size = int(fs.set_mb * MIB)
    return {"FB_DIR": directory, "FB_RAMP": ramp_s, "FB_RUNTIME": runtime_s,
            "FB_SET_SIZE": size, "FB_PART_SIZE": size // SET_B_FILES,
            "FB_WRITE_SIZE": int(fs.write_mb * MIB)}


def set_files(fileset: str) -> list[str]:
    """The files of a read set, as the job files name them."""
    if fileset == "b":
        return [f"set-b.{i}" for i in range(SET_B_FILES)]
    return [f"set-{fileset}"]


def checked(ctx: PointContext, container: model.Container, argv: list[str], what: str,
            timeout: float) -> str:
    """A command in a container that must succeed; StackError naming what failed otherwise."""
    done = ctx.deployment.placer.exec(container, argv, timeout=timeout)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise model.StackError(f"could not {what} in {container.name}: {said[-1][:300]}")
    return done.stdout


def server_cache(cache: str, paths: list[str]) -> str:
    """A shell command, run in the file server's container (so on its node), that empties
    (uncached: written back, then each file dropped with posix_fadvise DONTNEED, which dd's
    nocache flag asks for) or fills (cached: each file read) the page cache the server reads
    the files from."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    if cache == "uncached":
        return f"sync && for f in {quoted}; do dd if=\"$f\" iflag=nocache count=0 status=none; done"
    return f"for f in {quoted}; do cat \"$f\" >/dev/null; done"
