"""The web stack a point runs on: brought up for the point's stack settings (down first when its
docroot changes; a disk system built first), its tiers found wherever they run (containers,
CPU counters, interfaces, the database's counters as a probe), its versions, and what happens
when a tier stops during a point."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tierbench.kinds.contract import CLIENT, SERVER, Deployment, Point, RunEnds, Tier, log
from tierbench.kinds.web import appdb, load, locust, services, steps, webdisks
from tierbench.kinds.web.prepare import WebPrepared
from tierbench.kinds.web.settings import StackSettings, WebSettings
from tierbench.kinds.web.steps import Step
from tierbench.measure.sampler import CgroupCpu, CgroupGroup
from tierbench.placement import model, placer
from tierbench import space
from tierbench.tiers import diskbuild, disks

GENERATOR = "loadgen"
STACK_TIERS = ("loadgen", "proxy", "web")  # always up
TIERS = STACK_TIERS + services.APP_TIERS  # app and db: with dynamic requests


@dataclass
class WebInfo:
    """A web deployment's own handles: the stack settings it is up with, its Locust worker
    containers, the steps of its points (chosen once it is up), the address the workers
    reach the master at (host networking: its node's) and the trace whose working set the
    caches hold (load.warm_pass)."""

    stack: StackSettings
    workers: list[model.Container]
    steps: list[Step] = field(default_factory=list)
    master: str = locust.MASTER_HOST
    warmed: str | None = None  # the trace the last warm pass was of (warm.run)


def deploy(where: placer.Placer, s: WebSettings, seed: int, key: Hashable,
           prepared: WebPrepared, previous: Deployment[WebInfo] | None,
           point: Point, platforms: dict[str, str] | None = None) -> Deployment[WebInfo]:
    """compose up with the key's settings (down first when the docroot changes); a disk system
    built first (anew when it changes), its limits read back from the containers that use it
    and its devices' reads sampled (the `storage` probe); under a memory cap, the files the
    bring-up wrote dropped from the page cache; the steps of the deployment's points chosen.
    ``platforms``: tiers started under a parent cgroup of their own (services.own_platforms)."""
    stack = StackSettings(dict(cast(tuple[tuple[str, Any], ...], key)))  # deployment_key's
    made = webdisks.plan_for(stack.record, webdisks.names(s.disk_systems), prepared.filesets,
                             prepared.popularity, seed)
    downed = False
    if previous is None:
        log(f"tierbench: bringing the stack up on {where.name} (file sets, healthchecks)")
    else:
        log(f"tierbench: restarting services for {point.mode}: {stack.text()}")
        if stack.rebuilds(previous.info.stack):
            where.down()  # a volume's driver cannot change in place: the docroot anew
            downed = True
    overlays: list[Path] = []
    built = None
    if made is not None:  # a disk system: on each web server's host (here, or its node)
        hosts = webdisks.hosts_for(where, made[0])
        if not downed and diskbuild.current(made[0], hosts) is None:
            where.down()  # the containers let go of the disks built before
        try:
            built = webdisks.build(made[0], made[1], space.settings(), log, hosts)
        except disks.DiskError as exc:
            raise model.StackError(str(exc)) from None
        overlays.append(disks.overlay_path())
    if previous is not None:
        close_probes(previous)
    spec = services.stack_spec(where, stack.record, prepared.filesets, s.target,
                               s.load.workers, s.load.remote_workers, prepared.hot_sets, overlays,
                               host_network=where.shares_ports(), platforms=platforms)
    spec.node_env = webdisks.fileset_node_env(built)
    where.up(spec)
    dep = discover(where, key, stack, s.load.workers)
    disk = None
    if built is not None and made is not None:
        try:
            # the web servers', or the OrangeFS I/O servers' (pvfs_storage a disk system)
            disk = diskbuild.verify(built, made[0].system, where.replicas())
        except disks.DiskError as exc:
            raise model.StackError(str(exc)) from None
        dep.probes["storage"] = diskbuild.StorageReads(built)
    dropped = drop_written_files(dep, stack, built)
    dep.info.steps = steps.chosen(stack, s, disk, built, dropped)
    return dep


def drop_written_files(dep: Deployment[WebInfo], stack: StackSettings,
                       built: diskbuild.Built | None) -> int | None:
    """Under a memory cap (web_memory, pvfs_memory), drop the docroot's files from the page
    cache once the stack is up: the fileset job wrote them, so they sit in the host's page cache
    charged to that job, outside any cap (a cgroup is charged for the pages it brings in first),
    and a capped tier would read them from memory however large the working set. After this,
    what a capped tier reads is charged to it, and its cap decides what stays cached. Returns
    how many files were dropped (None: no cap, or nothing the testbed can drop: tmpfs)."""
    if not stack.memory_capped:
        return None
    if built is not None:
        return diskbuild.evict(built)
    if services.docroot_parts(stack.docroot)[0] == "disk":
        webs = {c.node: c for c in dep.tiers["web"].containers}
        return sum(dep.placer.evict_volume(c, "docroot") for c in webs.values())
    return None


def running(where: placer.Placer) -> Deployment[WebInfo] | None:
    """The stack's tiers, when its services are up (the application and database tiers too
    when they are)."""
    found = where.replicas()
    up = {c.service for c in found}
    if not all(t in up for t in STACK_TIERS):
        return None
    app_db = all(t in up for t in services.APP_TIERS)
    return discover(where, None, StackSettings({}),
                    sum(c.service == services.WORKER_SERVICE for c in found), app_db)


def discover(where: placer.Placer, key: Hashable, stack: StackSettings, expected: int,
             app_db: bool | None = None) -> Deployment[WebInfo]:
    """The running stack's tiers (containers, CPU counters, interfaces) wherever they run; the
    loadgen tier includes its `expected` Locust worker containers; the application and
    database tiers when the settings have them (or `app_db` says so), with the database's
    counters as a sampler probe."""
    if app_db is None:
        app_db = stack.app_db
    found = where.service_containers(STACK_TIERS + (services.APP_TIERS if app_db else ()))
    counters: dict[str, CgroupCpu | CgroupGroup] = {}
    tiers: dict[str, Tier] = {}
    for name, c in found.items():
        counters[name] = where.counter(c)
        tiers[name] = Tier(name, CLIENT if name == GENERATOR else SERVER,
                           where.endpoints(name, c), [c])
    workers = [c for c in where.replicas() if c.service == services.WORKER_SERVICE]
    if expected:
        if len(workers) != expected:
            raise model.StackError(f"load.workers is {expected} but {len(workers)} "
                                     "worker container(s) are running: see `docker compose "
                                     f"logs {services.WORKER_SERVICE}`")
        parts = {GENERATOR: counters[GENERATOR]}
        gen = tiers[GENERATOR]
        for n, w in enumerate(workers, 1):
            label = f"{services.WORKER_SERVICE}-{n}"
            parts[label] = where.counter(w)
            gen.endpoints += where.endpoints(label, w)
            gen.containers.append(w)
        counters[GENERATOR] = CgroupGroup(parts)
    replicas = where.replicas()
    # web_servers: 3, proxies: N and the application server of each web server: one tier
    # each, its counters summed (each server's CPU in the samples' "parts")
    for tier, names in (("web", services.WEB_SERVICES), ("proxy", services.PROXY_SERVICES),
                        ("app", services.APP_SERVICES)):
        more = [c for c in replicas if c.service in names[1:]]
        if not more or tier not in tiers:
            continue
        counters[tier] = CgroupGroup({tier: counters[tier],
                                      **{c.service: where.counter(c) for c in more}})
        for c in more:
            tiers[tier].endpoints += where.endpoints(c.service, c)
            tiers[tier].containers.append(c)
            found = {**found, c.service: c}
    ifaces = where.ifaces([ep for t in tiers.values() for ep in t.endpoints])
    info = WebInfo(stack, workers)
    if where.shares_ports():  # host networking: workers reach the master at its node
        info.master = where.address(found[GENERATOR])
    probes: dict[str, Callable[[], dict]] = \
        {"db": appdb.PgStats(where, found["db"])} if "db" in found else {}
    return Deployment(key, tiers, counters, ifaces, containers=found, info=info, placer=where,
                      probes=probes)


def close_probes(deployment: Deployment[WebInfo]) -> None:
    """End the probes' sessions (the database's psql)."""
    for probe in deployment.probes.values():
        close = getattr(probe, "close", None)
        if close is not None:
            close()


def provenance(deployment: Deployment[WebInfo]) -> dict[str, Any]:
    """Locust, wrk and the servers' versions; PostgreSQL's settings and data set."""
    found, where = deployment.containers, deployment.placer
    versions = {"locust": load.version(where, found[GENERATOR]),
                "wrk": load.wrk_version(where, found[GENERATOR])}
    probe = ("if command -v apache2 >/dev/null; then apache2 -v | head -n 1; "
             "else haproxy -v | head -n 1; fi")
    for tier in ("proxy", "web"):
        done = where.exec(found[tier], ["sh", "-c", probe], timeout=60)
        versions[f"{tier}_server"] = done.stdout.strip()
    out: dict[str, Any] = {"versions": versions}
    if "db" in found:
        for tier, argv in (("app", ["php-fpm8.2", "-v"]), ("db", ["postgres", "--version"])):
            done = where.exec(found[tier], argv, timeout=60)
            versions[f"{tier}_server"] = (done.stdout.strip().splitlines() or [""])[0]
        out["database"] = appdb.server_settings(where, found["db"])
    return out


def after_point(point: Point, row: dict[str, Any], deployment: Deployment[WebInfo]) -> None:
    """A proxy or web tier that stopped ends the run with one sentence naming it (on a cluster,
    a node whose Docker engine stopped answering); a stopped application or database tier is
    started again (one sentence) and the run goes on."""
    where = deployment.placer
    try:
        running = where.containers()
    except model.StackError as exc:
        raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
    failed = row.get("errors")
    what = (f" ({failed:g} requests failed)" if isinstance(failed, (int, float))
            else f" ({row['error']})" if row.get("error") else "")
    stack = deployment.info.stack
    down = [t for t in (*services.PROXY_SERVICES[:stack.proxies],
                        *services.WEB_SERVICES[:stack.web_servers]) if t not in running]
    if down:
        raise RunEnds(f"the {' and '.join(down)} tier stopped during {point.id}{what}; "
                      "the run ends here")
    gone = [t for t in (*services.APP_SERVICES, "db")
            if t in deployment.containers and t not in running]
    if not gone:
        return
    log(f"tierbench: the {' and '.join(gone)} tier stopped during {point.id}{what}; "
        "starting it again, the run goes on")
    try:
        for tier in gone:
            appdb.start_again(where, deployment.containers[tier])
    except model.StackError as exc:
        raise RunEnds(f"the {' and '.join(gone)} tier stopped during {point.id} and could "
                      f"not be started again ({exc})") from None
    close_probes(deployment)
    fresh = discover(where, deployment.key, stack, len(deployment.info.workers))
    # The restarted containers have new processes and interfaces: the next point's mode and
    # sampler use them.
    deployment.tiers, deployment.counters = fresh.tiers, fresh.counters
    deployment.ifaces, deployment.containers = fresh.ifaces, fresh.containers
    deployment.probes = {**fresh.probes, **{k: v for k, v in deployment.probes.items()
                                            if k == "storage"}}  # the disks stay the same
