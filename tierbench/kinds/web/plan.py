"""The plan's lines of a web experiment: what runs and what a point costs, the stack settings
before the points that run on them, one line per point."""

from __future__ import annotations

from tierbench.kinds.contract import Experiment, Point
from tierbench.kinds.web import services, webdisks
from tierbench.kinds.web.settings import Load, StackSettings, WebSettings, stack_for
from tierbench.kinds.web.sizes import POINT_OVERHEAD_S, warmup_run_s
from tierbench.placement.placer import Placer


def point_seconds(exp: Experiment[WebSettings]) -> float:
    """settle + warm-up (its maximum, when found by steady state: the load runs that long) +
    measured + overhead (a request-count run: its time limit)."""
    ld = exp.settings.load
    return exp.settle_s + warmup_run_s(ld) + ld.measure_s + POINT_OVERHEAD_S


def warmup_text(ld: Load) -> str:
    """The plan's words for the warm-up."""
    if ld.warmup != "steady":
        return f"warm-up {ld.warmup_s:g} s"
    return (f"warm-up until steady (MSER-5: at least {ld.warmup_s:g} s, at most "
            f"{ld.warmup_max_s:g} s; the load runs {ld.warmup_max_s:g} s + the window)")


def header(exp: Experiment[WebSettings], points: list[Point]) -> list[str]:
    """What runs, how, and what a point costs."""
    s = exp.settings
    ld = s.load
    return [f"experiment {exp.name} ({exp.source}): {len(points)} points, "
            f"order shuffled with seed {exp.seed}; engine {s.engine}, target {s.target}"
            + (f"; Locust master + {ld.workers} worker container(s) x {ld.processes} "
               f"process(es), {ld.remote_workers} remote" if ld.workers or ld.remote_workers
               else ""),
            f"per point: settle {exp.settle_s:g} s + {warmup_text(ld)} + measured "
            + (f"until every client has sent {ld.requests_per_client:,} requests "
               f"({counted_total(ld)}; at most {ld.measure_s:g} s, so times are upper bounds)"
               if ld.requests_per_client else f"{ld.measure_s:g} s")
            + f" + about {POINT_OVERHEAD_S:g} s overhead "
            "(mode switch, snapshots, load generator start/stop)",
            "NIC modes switch without restarting containers; server options restart the "
            "services whose settings change (points are grouped to restart as rarely as "
            "possible)"] + ([
                "rates as fractions of each mode's maximum (rate_of_max "
                f"{', '.join(f'{f:g}' for f in ld.rate_of_max)}): the first point of each mode "
                "(trace, users, stack) first measures that maximum with a closed loop of "
                f"{ld.users[0] if len(ld.users) == 1 else 'its'} users (+ {warmup_run_s(ld):g} "
                f"s + {ld.measure_s:g} s, recorded in max_rate.json)"] if ld.rate_of_max else [])


def counted_total(load: Load) -> str:
    """The requests a point of a request-count run sends, per users value ('64 clients:
    640,000 a point'; 004 §3.2 sent 640,000: 8 hosts x 8 threads x 10,000)."""
    n = load.requests_per_client or 0
    return ", ".join(f"{u} client{'s' if u > 1 else ''}: {u * n:,} a point" for u in load.users)


def placement_line(exp: Experiment[WebSettings], point: Point, first: bool) -> str:
    """The stack settings from this point on."""
    record = stack_for(exp, point.mode, point["docroot"], point.factors.get("placement"))
    s = exp.settings
    return (f"  -- stack: {StackSettings(record).text()}" + ("" if first else " (restart)")
            + webdisks.label(record, webdisks.names(s.disk_systems),
                             webdisks.host_of_web(exp.placer))
            + topology(record, s, exp.placer))


def topology(record: dict, s: WebSettings, where: Placer | None = None) -> str:
    """The tiers' servers, with several proxies (stack.proxies): how many of each, how the
    clients reach the proxies and, on a cluster, each server's node (Placer.placed_words; ''
    with one proxy: the plans of experiments without it as before)."""
    stack = StackSettings(record)
    if stack.proxies == 1:
        return ""
    bound = "each wrk thread" if s.engine == "wrk" else "each Locust user"
    webs = stack.web_servers
    apps = (f" -> {webs} application server{'s' if webs > 1 else ''} -> 1 database"
            if stack.app_db else "")
    servers = {"proxy": list(services.PROXY_SERVICES[:stack.proxies]),
               "web": list(services.WEB_SERVICES[:stack.web_servers]),
               **({"app": list(services.APP_SERVICES[:stack.web_servers])}
                  if stack.app_db else {})}
    placed = where.placed_words(servers) if where is not None else ""
    return (f" [topology: {stack.proxies} proxies ({bound} bound to one, round robin) -> "
            f"{webs} web server{'s' if webs > 1 else ''}{apps}"
            + (f"; {placed}" if placed else "") + "]")


def point_line(exp: Experiment[WebSettings], point: Point) -> str:
    """trace, mode, repetition, users, time (at most that, in a request-count run)."""
    about = "<=" if exp.settings.load.requests_per_client else "~"
    rate = f"  rate={point['rate']:g}/s" if len(exp.settings.load.rate or []) > 1 else ""
    if len(exp.settings.load.rate_of_max or []) > 1:
        rate = f"  rate={point['rate_of_max']:g}x max"
    return (f"  {point.id}  trace={point['trace']['name']:<14} mode={point.mode:<16} "
            f"rep={point.repetition}  users={point['users']}{rate}  "
            f"{about}{point_seconds(exp):.0f} s")
