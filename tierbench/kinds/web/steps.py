"""The optional parts of a web point, each a small named step: what it does before the load
starts, what it adds to the point's row from the measured window, and what it closes after the
load whatever happened. A deployment's steps are chosen once, from its typed settings
(:func:`chosen`); the point's sequence (kinds.web.sequence) runs them in this order."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from tierbench.kinds.contract import PointContext
from tierbench.kinds.web import appdb, webdisks, webmetrics
from tierbench.kinds.web.load import LoadgenError, LoadResult, served_between
from tierbench.kinds.web.prepare import WebPrepared
from tierbench.kinds.web.settings import StackSettings, WebSettings, loads_proxy
from tierbench.placement import model
from tierbench.tiers import diskbuild, disks
from workloads import traces as tracelib

# A web point's context as a step sees it (the deployment's info, kinds.web.stack.WebInfo,
# holds the steps: they do not read it).
StepContext = PointContext[WebSettings, Any, WebPrepared]


@dataclass
class Measured:
    """What a point's figures are taken over: the engine's result, the two samples that
    bracket its measured window and every sample of the point."""

    result: LoadResult
    first: dict[str, Any]
    last: dict[str, Any]
    samples: list[dict[str, Any]]


class Step:
    """One optional part of a web point."""

    def before(self, ctx: StepContext) -> None:
        """Before the load starts."""

    def end(self) -> None:
        """After the load, whatever happened."""

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        """Figures over the measured window, for the point's row."""
        return {}


# A graceful restart (Apache: its children finish, then exit) or reload (HAProxy in
# master-worker mode: a new worker, the old one stopping softly) of each proxy closes the
# connections the previous point left open to the web tier, so that every point opens its own
# with the mode's settings (MTU, offloads) in force.
PROXY_RELOAD = {"apache": "kill -USR1 1", "haproxy": "kill -USR2 1"}
EPHEMERAL = (32768, 60999)  # Linux's default ip_local_port_range: the ports a client opens
RELOAD_WAIT_S = 10.0


def outbound(tables: str) -> set[tuple[str, str]]:
    """The established TCP connections a process opened (its local port ephemeral), as
    (local, remote) of /proc/net/tcp and tcp6."""
    out = set()
    for line in tables.splitlines():
        f = line.split()
        if len(f) < 4 or f[3] != "01" or ":" not in f[1]:
            continue
        if EPHEMERAL[0] <= int(f[1].rsplit(":", 1)[1], 16) <= EPHEMERAL[1]:
            out.add((f[1], f[2]))
    return out


class FreshProxyConnections(Step):
    """Every point starts with fresh proxy-to-web connections: the proxies' keep-alive
    connections to the web tier (kept 30 s idle) closed by a graceful restart of each proxy
    before the load, and waited for (at most RELOAD_WAIT_S); point.json's
    ``proxy_connections`` says how many were open and how many were left."""

    def __init__(self, proxy: str) -> None:
        self.proxy = proxy

    def before(self, ctx: StepContext) -> None:
        where = ctx.deployment.placer
        proxies = ctx.deployment.tiers["proxy"].containers
        old = {c.name: outbound(where.proc_net(c, ("tcp", "tcp6"))) for c in proxies}
        for c in proxies:
            where.exec(c, ["sh", "-c", PROXY_RELOAD[self.proxy]], timeout=30)
        t0 = time.monotonic()
        while True:
            left = sum(len(old[c.name] & outbound(where.proc_net(c, ("tcp", "tcp6"))))
                       for c in proxies)
            if not left or time.monotonic() - t0 > RELOAD_WAIT_S:
                break
            time.sleep(0.2)
        ctx.record["proxy_connections"] = {
            "restart": f"{self.proxy}: {PROXY_RELOAD[self.proxy]}",
            "open_before": sum(len(v) for v in old.values()), "left": left,
            "wait_s": round(time.monotonic() - t0, 2)}
        if left:
            ctx.log(f"tierbench: {left} proxy-to-web connection(s) of the previous point were "
                    f"still open {RELOAD_WAIT_S:g} s after the proxies' graceful restart")


def empty_proxy_caches(ctx: StepContext) -> None:
    """Every caching proxy's cache emptied."""
    where = ctx.deployment.placer
    for proxy in ctx.deployment.tiers["proxy"].containers:
        where.exec(proxy, ["sh", "-c", "rm -rf /var/cache/apache2/mod_cache_disk/*"],
                   user="www-data", timeout=120)


class ProxyCache(Step):
    """The caching Apache proxies: every point starts with empty caches (filled again during its
    warm-up, so that points do not depend on the order they run in; with load.warm_pass, kept:
    the warm pass empties and fills them) and empty cache logs; the
    hits and misses in the measured window summed over the proxies (stack.proxies: each has its
    own cache), from their logs (one line per request: epoch second and mod_cache's verdict;
    whole seconds at the edges)."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep

    def before(self, ctx: StepContext) -> None:
        if not self.keep:
            empty_proxy_caches(ctx)
        for proxy in ctx.deployment.tiers["proxy"].containers:
            ctx.deployment.placer.exec(proxy, ["sh", "-c", ": > /var/log/apache2/cache.log"],
                                       timeout=60)

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        start, end = measured.first["t"], measured.last["t"]
        script = (f"awk -v a={int(start)} -v b={int(end)} '$1 >= a && $1 <= b "
                  "{ if ($0 ~ /hit/) h++; else m++ } END { print h + 0, m + 0 }' "
                  "/var/log/apache2/cache.log 2>/dev/null || echo 0 0")
        hits = misses = 0
        for proxy in ctx.deployment.tiers["proxy"].containers:
            done = ctx.deployment.placer.exec(proxy, ["sh", "-c", script], timeout=60)
            try:
                h, m = (int(x) for x in done.stdout.split()[:2])
            except ValueError:
                return {}
            hits, misses = hits + h, misses + m
        total = hits + misses
        return {"proxy_cache_hits": hits, "proxy_cache_misses": misses,
                "proxy_hit_ratio": hits / total if total else float("nan")}


class PageCacheFigures(Step):
    """How much of what was served the web tier read from its disk, and so from its page cache
    (every point)."""

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        first, last = measured.first, measured.last
        return webmetrics.page_cache_figures(
            first, last, served_between(measured.result, first["t"], last["t"]),
            ctx.point["trace"])


class MemoryFigures(Step):
    """Whether the web tier's memory cap held and what the docroot's storage read (every point;
    each figure left out where it was not counted)."""

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        return webmetrics.memory_figures(measured.samples, measured.first, measured.last)


class DiskSystem(Step):
    """A docroot on a disk system: the point records the system and its limits read back."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def before(self, ctx: StepContext) -> None:
        ctx.record["disk"] = self.record

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        """The RAID-0 stripe check (the report warns on a point striped wider than 004's)."""
        check = disks.stripe_check(str(self.record.get("filesystem") or ""))
        return {"raid_stripe": check} if check else {}


class DroppedAfterBringUp(Step):
    """Under a memory cap: the point records how many docroot files were dropped from the page
    cache after the bring-up (kinds.web.stack.drop_written_files)."""

    def __init__(self, dropped: int) -> None:
        self.dropped = dropped

    def before(self, ctx: StepContext) -> None:
        ctx.record["dropped_after_bring_up"] = (
            f"{self.dropped} docroot files dropped from the page cache after the bring-up "
            "(written there by its one-shot jobs, outside the memory caps)")


class ColdPageCache(Step):
    """stack.page_cache: cold: the docroot's files dropped from the page cache before the point,
    so that the first read of each comes from the disk (the disk system's files, or the docroot
    volume's on each web server's host)."""

    def __init__(self, built: diskbuild.Built | None) -> None:
        self.built = built

    def before(self, ctx: StepContext) -> None:
        if self.built is not None:
            dropped = diskbuild.evict(self.built)
            what = "files of the disk system"
        else:
            # each web server's node (on one host, or one node, they share the volume)
            webs = {c.node: c for c in ctx.deployment.tiers["web"].containers}
            dropped = sum(ctx.deployment.placer.evict_volume(c, "docroot") for c in webs.values())
            what = "docroot files"
        ctx.record["page_cache"] = f"cold: {dropped} {what} dropped before the point"


class AccessLogs(Step):
    """stack.access_log: the access logs of the tier that times each request start empty; the
    per-file times over the window from them (004 Fig. 11-12, per_file.csv)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def logged(self, ctx: StepContext) -> list[model.Container]:
        dep = ctx.deployment
        return webdisks.logging_tier(self.target, dep.tiers["proxy"].containers,
                                     dep.tiers["web"].containers)

    def before(self, ctx: StepContext) -> None:
        webdisks.reset_logs(ctx.deployment.placer, self.logged(ctx))

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        first, last = measured.first["t"], measured.last["t"]
        return webdisks.per_file(webdisks.read_logs(ctx.deployment.placer, self.logged(ctx)),
                                 ctx.prepared.sizes,
                                 first, last, ctx.dir / "per_file.csv")


class MixedSites(Step):
    """A mix trace: each site's TPS and latency (004 §4.4: the foreground's)."""

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        sites = tracelib.sites(ctx.point["trace"])
        if not sites:
            return {}
        requests = measured.result.requests
        if requests is None:
            raise LoadgenError("a mix trace needs per-request records (engine: locust)")
        return webmetrics.site_figures(requests, sites, measured.first["t"],
                                       measured.last["t"])


def wait_until_apps_idle(ctx: StepContext) -> tuple[int, float]:
    """appdb.wait_until_app_idle over every application server (one per web server with
    three): the requests still in them (-1: one's connections could not be read) and the
    seconds waited."""
    busy, waited = 0, 0.0
    for app in ctx.deployment.tiers["app"].containers:
        b, w = appdb.wait_until_app_idle(ctx.deployment.placer, app)
        busy, waited = (-1 if b < 0 or busy < 0 else busy + b), waited + w
    return busy, waited


class AppIdleWait(Step):
    """The application tier serves nothing before the point: the previous point's last
    requests (still in the proxy or the application tier when its load stopped) write their
    rows during this wait, not after the table was emptied for this point."""

    def before(self, ctx: StepContext) -> None:
        busy, waited = wait_until_apps_idle(ctx)
        ctx.record["app_idle_wait_s"] = round(waited, 1)
        if busy:
            ctx.record["app_busy_before_point"] = (
                f"{busy} requests still in the application tier after "
                f"{appdb.APP_IDLE_WAIT_S:g} s" if busy > 0
                else "its connections could not be read")


class DynamicFigures(Step):
    """Dynamic requests per second over the window, the dynamic requests answered over the
    whole load (warm-up included: `answered`, for DatabaseCounters), and for a trace with writes
    the write check (the rows the database holds against the writes answered)."""

    def __init__(self) -> None:
        self.answered: int | None = None

    def before(self, ctx: StepContext) -> None:
        self.answered = None

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        result, first, last = measured.result, measured.first, measured.last
        dyn = ctx.point["trace"].get("dynamic") or {}
        counts: dict[str, Any]
        if result.requests is not None:
            counts = webmetrics.dynamic_figures(result.requests, first["t"], last["t"],
                                                tracelib.DYNAMIC_PREFIX, tracelib.WRITE_PREFIX)
            in_flight = ctx.point["users"]
        else:
            span = float(result.extra.get("measured_s") or 0)
            counts = {"dyn_tps": result.extra.get("dynamic_ok", 0) / span if span > 0 else 0.0,
                      "writes_ok": result.extra.get("writes_ok"),
                      "dynamic_answered": result.extra.get("dynamic_answered")}
            in_flight = ctx.point["users"] * int(result.extra.get("runs", 1))
        answered = counts["dynamic_answered"]
        self.answered = None if answered is None else int(answered)
        out: dict[str, Any] = {"dyn_tps": counts["dyn_tps"]}
        if dyn.get("query") == "write" and dyn.get("share", 0) > 0:
            rows = appdb.rows_written(ctx.deployment.placer, ctx.deployment.containers["db"])
            out.update({"writes_ok": counts["writes_ok"], "rows_written": rows,
                        "write_check": appdb.write_check(counts["writes_ok"], rows, in_flight)})
        return out


class DatabaseCounters(Step):
    """The database's own counters (pg_stat_statements: exact at the end of each query): its
    writes table emptied before the point; its transactions per second and rows read and
    written over the window; and over the whole load, from readings before it and after it
    with nothing of the application tier running, rows read and statements per dynamic request
    answered (`dynamic`: the point's DynamicFigures, which counts them)."""

    def __init__(self, dynamic: DynamicFigures) -> None:
        self.dynamic = dynamic
        self.before_load: dict[str, int] = {}

    def before(self, ctx: StepContext) -> None:
        db, where = ctx.deployment.containers["db"], ctx.deployment.placer
        if not appdb.empty_writes(where, db):
            ctx.record["db"] = "the database did not answer before the point"
        # AppIdleWait ran first: no request of the previous point is in the application tier
        # (when some still were, no reading before the load is exact)
        busy = "app_busy_before_point" in ctx.record
        self.before_load = {} if busy else ctx.deployment.probes["db"]()

    def after(self, ctx: StepContext, measured: Measured) -> dict[str, Any]:
        out: dict[str, Any] = appdb.db_figures(measured.first, measured.last)
        busy, _ = wait_until_apps_idle(ctx)
        if busy:
            ctx.record["db_after_load"] = ("not read: " + (
                f"{busy} requests still in the application tier after "
                f"{appdb.APP_IDLE_WAIT_S:g} s" if busy > 0
                else "its connections could not be read"))
            return out
        after_load = ctx.deployment.probes["db"]()
        answered = self.dynamic.answered
        if answered is not None:
            counted = appdb.counted_between(self.before_load, after_load)
            ctx.record["db_over_load"] = {"dynamic_answered": answered, **(counted or {})}
            out.update(appdb.per_dynamic_request(self.before_load, after_load, answered))
        return out


class Fault(Step):
    """The experiment's fault, once per run: a server tier stopped `after_s` seconds into the
    measured window of the first point."""

    def __init__(self, stop: str, after_s: float, warmup_s: float) -> None:
        self.stop, self.after_s, self.warmup_s = stop, after_s, warmup_s
        self.thread: threading.Thread | None = None

    def before(self, ctx: StepContext) -> None:
        if ctx.prepared.fault_done:
            return
        ctx.prepared.fault_done = True
        target = ctx.deployment.containers[self.stop]
        delay = self.warmup_s + self.after_s
        ctx.record["fault"] = {"stop": self.stop, "after_s": self.after_s}

        def stop() -> None:
            time.sleep(delay)
            ctx.log(f"tierbench: fault: stopping the {self.stop} tier as the experiment asks")
            ctx.deployment.placer.stop(target, 2)

        self.thread = threading.Thread(target=stop, name="fault", daemon=True)
        self.thread.start()

    def end(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None


def chosen(stack: StackSettings, s: WebSettings, disk: dict[str, Any] | None,
           built: diskbuild.Built | None, dropped: int | None = None) -> list[Step]:
    """The steps of a deployment's points, in the order they run: from its stack settings,
    the experiment's settings, the disk system it was built on (``disk``: its record) and the
    files dropped from the page cache after its bring-up (``dropped``, under a memory cap)."""
    dynamic = stack.app_db
    steps: list[Step] = [FreshProxyConnections(stack.proxy)] if loads_proxy(s.target) else []
    steps += [ProxyCache(keep=s.load.warm_pass)] if stack.proxy_cache else []
    steps += [PageCacheFigures(), MemoryFigures()]
    if disk is not None:
        steps.append(DiskSystem(disk))
    if dropped is not None:
        steps.append(DroppedAfterBringUp(dropped))
    if stack.cold:
        steps.append(ColdPageCache(built))
    if stack.access_log:
        steps.append(AccessLogs(s.target))
    if any(t.kind == "mix" for t in s.traces):
        steps.append(MixedSites())
    if dynamic:
        dynamic_figures = DynamicFigures()
        steps += [AppIdleWait(), dynamic_figures, DatabaseCounters(dynamic_figures)]
    if s.fault is not None:
        steps.append(Fault(s.fault.stop, s.fault.after_s, s.load.warmup_s))
    return steps
