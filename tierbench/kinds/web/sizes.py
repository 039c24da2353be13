"""What a web run writes where, checked against free space and memory before anything is
written: the file sets on each docroot, the disk systems' images, the results (traces,
per-request records, samples), the hot site's small files, the database's data set, the
proxies' caches."""

from __future__ import annotations

import functools
from typing import Any

from tierbench.config.files import results_root
from tierbench.kinds.contract import Experiment, Point
from tierbench.kinds.web import appdb, services, webdisks
from tierbench.kinds.web.settings import (Load, StackSettings, WebSettings, has_dynamic,
                                          loads_proxy, stack_for, stack_settings, trace_dicts)
from tierbench.kinds.web.prepare import filesets_of, hot_sets
from tierbench import space
from tierbench.tiers import disks
from workloads import filesets, worldcup
from workloads import traces as tracelib

POINT_OVERHEAD_S = 6.0  # load generator start-up and shut-down, snapshots, restore

# What a run writes, for the plan's estimate: Locust's per-request records at most
# LOCUST_RPS_PER_PROCESS requests per second per process (3,870 were measured for a bare
# FastHttpUser on one core, ENVIRONMENT), RECORD_BYTES per record in requests.parquet (11 to
# 15 measured by make bench-scale) and, for the point being converted, CSV_RECORD_BYTES plus the
# path in its CSV log; SAMPLE_BYTES per second of a point (samples, per-second rows, logs).
LOCUST_RPS_PER_PROCESS = 5000
RECORD_BYTES = 16
CSV_RECORD_BYTES = 40
SAMPLE_BYTES = 4096

# The proxy cache (stack.proxy_cache: on): each Apache proxy's mod_cache_disk on its own tmpfs
# of PROXY_CACHE_SIZE (docker-compose.yml, default 256m). The proxy image's guard stops storing
# once the tmpfs is CACHE_GUARD_LIMIT_PCT % full; the rest must hold the responses being stored
# at that moment, one per client connection to the proxy, each at most CacheMaxFileSize (Apache
# stores no larger one), in whole pages with its header file. The two figures live in the image
# (images/proxy/proxy-cache-guard.pl's $LIMIT_PCT, images/proxy/conf/tierbench.conf), which
# reads them in the container; these copies are the control program's, and
# tests/test_proxies.py checks that they agree.
PROXY_CACHE_SIZE_DEFAULT = "256m"
CACHE_GUARD_LIMIT_PCT = 70
CACHE_MAX_FILE_BYTES = 64 << 20
PAGE = 4096


def warmup_run_s(ld: Load) -> float:
    """How long the load runs besides measure_s: the warm-up, or its maximum when it is found
    by steady state (the load runs that long whatever the warm-up found)."""
    return ld.warmup_max_s if ld.warmup == "steady" else ld.warmup_s


def trace_bytes(spec: dict[str, Any], seed: int) -> int:
    """Bytes of a trace file's request lines (a World Cup trace's from its log's objects)."""
    if spec["kind"] == "worldcup":
        return worldcup.trace_bytes(spec)
    return sum(len(p) + 1 for chunk in tracelib.chunks(spec, seed) for p in chunk)


def results_bytes(exp: Experiment[WebSettings], specs: list[dict[str, Any]], points: int) -> int:
    """An upper estimate of what a run writes into its results folder: the traces, Locust's
    per-request records (Parquet for every point, the CSV log of one point at a time) and the
    points' samples and logs."""
    s = exp.settings
    ld = s.load
    seconds = warmup_run_s(ld) + ld.measure_s + POINT_OVERHEAD_S
    total = sum(trace_bytes(spec, exp.seed) for spec in specs) + points * seconds * SAMPLE_BYTES
    if s.engine == "locust":
        procs = ld.processes * max(ld.workers, 1) + ld.remote_workers
        records = int((max(ld.rate or [0]) or LOCUST_RPS_PER_PROCESS * procs) * seconds)
        if ld.requests_per_client:  # a request-count run: its requests and the warm-up's
            records = min(records, ld.requests_per_client * max(ld.users) + int(
                LOCUST_RPS_PER_PROCESS * procs * (ld.warmup_s + POINT_OVERHEAD_S)))
        total += points * records * RECORD_BYTES + records * (CSV_RECORD_BYTES + 60)
    return int(total)


def needs(exp: Experiment[WebSettings], points: int) -> list[space.Need]:
    """The file sets on each docroot the experiment uses, the disk systems' images, the
    results, the hot site's small files, the database."""
    s = exp.settings
    specs = trace_dicts(s)
    sets = filesets_of(specs)
    total = sum(filesets.total_bytes(fs) for fs in sets)
    what = f"the file sets of {exp.source}"
    shrink = "shrink the traces' file sets (size, files or class)"
    out: list[space.Need] = []
    bases = {services.docroot_parts(d)[0] for d in s.stack.docroot}
    # OrangeFS docroots are copied from the disk volume; a disk system holds its own sets
    if bases & {"disk", "orangefs"}:
        out.append(space.on_disk(what, total, space.docker_root(), "Docker's data folder",
                                 f"{shrink} or free space there", role="web"))
    if "tmpfs" in bases:
        out += space.on_tmpfs(what, total, "DOCROOT_TMPFS_SIZE", "8g", shrink, role="web")
    if "orangefs" in bases:
        n = stack_settings(s).get("pvfs_io_servers", 3)
        per_server = total // n + total // n // 10  # strips spread evenly, plus metadata
        if webdisks.names(s.disk_systems).get(stack_settings(s)["pvfs_storage"]):
            pass  # on a disk system's devices: their images are counted below
        elif stack_settings(s).get("pvfs_storage") == "disk":
            out.append(space.on_disk(f"{what} on {n} OrangeFS I/O servers' volumes",
                                     per_server * n, space.docker_root(),
                                     "Docker's data folder", f"{shrink} or free space there",
                                     role="pfs_io"))
        else:
            out += space.on_tmpfs(f"{what} on each of {n} OrangeFS I/O servers", per_server,
                                  "PVFS_TMPFS_SIZE", "4g",
                                  f"{shrink}, use more I/O servers (stack.pvfs_io_servers) "
                                  "or stack.pvfs_storage: disk", copies=n, role="pfs_io")
    plans = disk_plans(exp)
    hosts_of = functools.partial(webdisks.hosts_for, exp.placer)
    if exp.placer.here(webdisks.WEB_ROLE):  # one system built at a time, all here
        out += disks.disk_images(plans, space.settings(), hosts_of, webdisks.WEB_ROLE)
    else:  # the web servers' on the web nodes, the OrangeFS I/O servers' on theirs
        for role, mine in webdisks.plans_by_role(plans).items():
            out += disks.disk_images(mine, space.settings(), hosts_of, role)
    out.append(space.on_disk(f"the results of {exp.source} (traces, per-request records, "
                             "samples)", results_bytes(exp, specs, points), results_root(),
                             "the results folder", "shorten the traces or load.measure_s, "
                             "run fewer points, or free space there"))
    hot_site = stack_settings(s).get("hot_site")
    if hot_site is not None:
        below = stack_settings(s)["hot_below"]
        nbytes = sum(size for fs in hot_sets(specs, hot_site) for _, size in filesets.files(fs)
                     if size < below)
        out += space.on_tmpfs(f"the small files of site {hot_site}", nbytes,
                              "HOT_TMPFS_SIZE", "2g", "lower stack.hot_below", role="web")
    if has_dynamic(s):
        st = stack_settings(s, exp.seed)
        out += appdb.needs(exp.source, st["db_rows"], st["db_row_bytes"],
                           space.parse_size(st["db_shared_buffers"], "stack.db.shared_buffers"))
    return out


def largest_file(spec: dict[str, Any]) -> int:
    """The largest file a trace asks for (its file sets' largest: every trace kind's sizes are
    known before the run, a World Cup trace's from its log's objects)."""
    return max(size for fs in tracelib.filesets_of(spec) for _, size in filesets.files(fs))


def stored_bytes(response: int) -> int:
    """What one response being stored takes in the cache's tmpfs: its body in whole pages and
    a page for its header file (nothing above CacheMaxFileSize, which is not stored)."""
    return -(-min(response, CACHE_MAX_FILE_BYTES) // PAGE) * PAGE + PAGE


def proxy_cache_needs(exp: Experiment[WebSettings], points: list[Point]) -> list[space.Need]:
    """For the points whose proxies cache: each proxy's tmpfs of PROXY_CACHE_SIZE in memory
    (the most proxies a point runs, every tmpfs full), and in the room the cache guard leaves,
    the responses in flight when it stops storing (the point with the most: its connections
    per proxy, each storing its trace's largest file), when the clients load the proxies."""
    caching = [(p, st) for p in points
               if (st := StackSettings(stack_for(exp, p.mode, p["docroot"],
                                                 p.factors.get("placement")))).proxy_cache]
    if not caching:
        return []
    size = space.setting_size("PROXY_CACHE_SIZE", PROXY_CACHE_SIZE_DEFAULT)
    proxies = max(st.proxies for _, st in caching)
    out = [space.in_memory(f"the proxy cache's tmpfs of PROXY_CACHE_SIZE={space.human(size)}"
                           + (f" on each of {proxies} proxies" if proxies > 1 else ""),
                           size * proxies,
                           "lower PROXY_CACHE_SIZE in .env or run fewer proxies (stack.proxies)",
                           role="proxy")]
    if not loads_proxy(exp.settings.target):
        return out
    largest: dict[str, int] = {}
    worst = (0, 0, "")
    for p, st in caching:
        name = p["trace"]["name"]
        if name not in largest:
            largest[name] = largest_file(p["trace"])
        connections = -(-int(p["users"]) // st.proxies)
        worst = max(worst, (connections * stored_bytes(largest[name]), connections, name))
    nbytes, connections, name = worst
    room = size * (100 - CACHE_GUARD_LIMIT_PCT) // 100
    out.append(space.Need(
        f"the responses the proxy cache is storing when its guard stops it (trace {name}: "
        f"{connections} connection{'s' if connections > 1 else ''} per proxy x "
        f"{space.human(stored_bytes(largest[name]))})", nbytes,
        f"the {100 - CACHE_GUARD_LIMIT_PCT} % of the cache's tmpfs of "
        f"PROXY_CACHE_SIZE={space.human(size)} left above the guard's limit", room,
        "raise PROXY_CACHE_SIZE in .env, or use fewer users per proxy or smaller files"))
    return out


def disk_plans(exp: Experiment[WebSettings]) -> list[disks.Plan]:
    """The disk systems the points need (one per docroot and placement strategy)."""
    s = exp.settings
    known = webdisks.names(s.disk_systems)
    specs = trace_dicts(s)
    sets = filesets_of(specs)
    pops = webdisks.popularity(specs, exp.seed) if s.stack.placement else {}
    out = []
    for docroot in s.stack.docroot:
        for strategy in list(s.stack.placement) if s.stack.placement else [None]:
            made = webdisks.plan_for(stack_for(exp, exp.modes[0].name, docroot, strategy),
                                     known, sets, pops, exp.seed)
            if made is not None:
                out.append(made[0])
    return out
