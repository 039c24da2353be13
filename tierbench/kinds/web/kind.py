"""The web kind as the contract sees it: its settings, tiers and roles, the resolved experiment,
the axes and the deployment key (the stack settings), and each part of the contract handed to
the module of the package that does it."""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from tierbench.config.errors import ConfigError
from tierbench.config.files import dotenv
from tierbench.kinds.contract import (Column, Deployment, Experiment, Kind, Point, PointContext,
                                      PointResult)
from tierbench.kinds.web import (plan, report, results, sequence, services, sizes, stack, warm,
                                 webdisks)
from tierbench.kinds.web.stack import GENERATOR, TIERS, WebInfo
from tierbench.kinds.web.load import stop
from tierbench.kinds.web.settings import (SERVER_OPTIONS, WebSettings, has_dynamic, stack_for,
                                          stack_settings, trace_dicts)
from tierbench.kinds.web.prepare import WebPrepared, prepare, workload_errors
from tierbench.kinds.web.roles import ROLES
from tierbench.kinds.web import worker
from tierbench.placement import placer
from tierbench import space
from tierbench.tiers import disks
from tierbench.tiers import orangefs


class WebKind(Kind[WebSettings, WebInfo, WebPrepared]):
    """Traces replayed through the proxy -> web stack."""

    name = "web"
    description = "request traces through the proxy and web tiers (wrk or Locust)"
    model = WebSettings
    key = "traces"
    scalable = {"load.measure_s": 2, "load.warmup_s": 1, "load.requests_per_client": 20}
    tiers = TIERS
    declared_roles = ROLES
    roles = ("loadgen", "proxy", "web")
    bring_up = "stack bring-up (seconds when images are built)"
    commands = (worker.COMMAND,)
    server_options = SERVER_OPTIONS

    # -- experiment
    def check(self, exp: Experiment[WebSettings]) -> None:
        """A real device the experiment names must exist (sizes and use: at preflight; a
        cluster node's devices are checked there at preflight). A mode's platform on some tiers
        must be one the stack can start them under; its server options are the stack's."""
        self.check_server_options(exp)
        s = exp.settings
        try:
            services.own_platforms(exp.modes)
        except ConfigError as exc:
            raise ConfigError(f"{exp.source}: {exc}") from None
        wants = warm.wants_misses(s)
        if s.load.warm_pass and wants:
            raise ConfigError(f"{exp.source}: load.warm_pass warms what {wants} asks to miss: "
                              "drop one of the two")
        if not exp.placer.here(webdisks.WEB_ROLE):
            return
        wrong = webdisks.device_problem(list(s.stack.docroot), webdisks.names(s.disk_systems))
        if wrong:
            raise ConfigError(f"{exp.source}: {wrong}")

    def cluster_roles(self, exp: Experiment[WebSettings]) -> list[str]:
        """loadgen, proxy and web (proxy, proxy2.. round the proxy nodes with stack.proxies;
        web, web2 and web3 round the web nodes with stack.web_servers: 3); app and db with
        dynamic requests (with three web servers, app, app2 and app3 round the app nodes); the
        Locust workers' nodes with load.workers; the OrangeFS servers' with a docroot on
        OrangeFS. A disk system is built on the node of the server it serves: each web
        server's on its node, each OrangeFS I/O server's (pvfs_storage) on its pfs_io node."""
        s = exp.settings
        roles = list(self.roles)
        if has_dynamic(s):
            roles += list(services.APP_TIERS)
        if s.load.workers:
            roles.append("loadgen_workers")
        if any(d.startswith("orangefs") for d in s.stack.docroot):
            roles += ["pfs_meta", "pfs_io"]
        return roles

    def resolved(self, exp: Experiment[WebSettings]) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        s = exp.settings
        ld = s.load
        systems = used_systems(s, exp.placer)
        return {
            "name": exp.name,
            "kind": self.name,
            "description": exp.description,
            "source": exp.source,
            "seed": exp.seed,
            "repetitions": exp.repetitions,
            "engine": s.engine,
            "load": {"users": list(ld.users), "processes": ld.processes, "workers": ld.workers,
                     "remote_workers": ld.remote_workers, "worker_wait_s": ld.worker_wait_s,
                     "think": ld.think.model_dump() if ld.think else None,
                     "rate": ld.rate_record(),
                     **({"rate_of_max": list(ld.rate_of_max)} if ld.rate_of_max else {}),
                     **({"arrival": ld.arrival} if ld.open_loop else {}),
                     "warmup_s": ld.warmup_s, "measure_s": ld.measure_s,
                     **({"requests_per_client": ld.requests_per_client}
                        if ld.requests_per_client else {}),
                     **({"warmup": "steady", "warmup_max_s": ld.warmup_max_s}
                        if ld.warmup == "steady" else {}),
                     **({"warm_pass": True} if ld.warm_pass else {})},
            "target": s.target,
            "allow_foreign_target": s.allow_foreign_target,
            "settle_s": exp.settle_s,
            "modes": [m.as_dict() for m in exp.modes],
            "traces": trace_dicts(s),
            "stack": {**stack_settings(s, exp.seed), "docroot": list(s.stack.docroot),
                      **({"placement": list(s.stack.placement)} if s.stack.placement else {})},
            **({"fault": s.fault.model_dump()} if s.fault else {}),
            **({"disk_systems": systems} if systems else {}),
        }

    def axes(self, exp: Experiment[WebSettings]) -> list[tuple[str, list[Any]]]:
        """trace x mode x users x rate (an open loop's offered load) or rate_of_max (the same
        as fractions of each mode's maximum) x docroot x placement (004 Table 4) x repetition."""
        s = exp.settings
        return [("trace", trace_dicts(s)), ("mode", [m.name for m in exp.modes]),
                ("users", list(s.load.users)), ("rate", s.load.rates),
                ("rate_of_max", s.load.fractions),
                ("docroot", list(s.stack.docroot)),
                ("placement", list(s.stack.placement) if s.stack.placement else [None]),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def point_factors(self, combo: dict[str, Any]) -> dict[str, Any]:
        """A point's factors (placement, rate and rate_of_max only when the experiment has the
        factor)."""
        out = super().point_factors(combo)
        for factor in ("placement", "rate", "rate_of_max"):
            if out.get(factor) is None:
                out.pop(factor, None)
        return out

    def deployment_key(self, exp: Experiment[WebSettings],
                       combo: dict[str, Any] | Point) -> Hashable:
        """The stack settings, as a hashable key."""
        c = combo.factors | {"mode": combo.mode} if isinstance(combo, Point) else combo
        return tuple(sorted(stack_for(exp, c["mode"], c["docroot"], c.get("placement")).items()))

    def with_warm_pass(self, exp: Experiment[WebSettings]) -> Experiment[WebSettings]:
        """load.warm_pass turned on (the plan says so), unless a trace or the page cache asks
        for misses (hit-ratio traces, stack.page_cache: cold)."""
        s = exp.settings
        wants = warm.wants_misses(s)
        if wants:
            exp.scaled.append(f"no warm pass: {wants} asks for misses")
            return exp
        exp.settings = s.model_copy(update={"load": s.load.model_copy(
            update={"warm_pass": True})})
        exp.scaled.append(warm.PLAN_LINE)
        return exp

    # -- plan
    def point_seconds(self, exp: Experiment[WebSettings]) -> float:
        """settle + warm-up + measured + overhead (a request-count run: its time limit)."""
        return plan.point_seconds(exp)

    def plan_header(self, exp: Experiment[WebSettings], points: list[Point]) -> list[str]:
        """What runs, how, and what a point costs."""
        return plan.header(exp, points)

    def deployment_line(self, exp: Experiment[WebSettings], point: Point, first: bool) -> str:
        """The stack settings from this point on."""
        return plan.placement_line(exp, point, first)

    def point_line(self, exp: Experiment[WebSettings], point: Point) -> str:
        """trace, mode, repetition, users, time."""
        return plan.point_line(exp, point)

    def needs(self, exp: Experiment[WebSettings], points: list[Point]) -> list[space.Need]:
        """The file sets on each docroot the experiment uses, the hot site's small files, the
        results, the database, the proxies' caches (kinds.web.sizes)."""
        with workload_errors(exp):
            return (sizes.needs(exp, len(points)) + sizes.proxy_cache_needs(exp, points)
                    + warm.needs(exp))

    # -- run
    def preflight(self, exp: Experiment[WebSettings], points: list[Point]) -> None:
        """Every image the run will need is built (the first time, or after its build context
        changed); disk systems can be built where they go (the web node's tools and devices,
        asked there)."""
        s = exp.settings
        known = webdisks.names(s.disk_systems)
        bases = [services.docroot_parts(docroot)[0] for docroot in s.stack.docroot]
        services.ensure_images(exp.placer, [
            name for base in bases for name in services.stack_images(
                s.stack.proxy, "disk" if base in known else base, has_dynamic(s))])
        with workload_errors(exp):
            plans = sizes.disk_plans(exp)
        try:
            disks.preflight_on(plans, functools.partial(webdisks.hosts_for, exp.placer))
        except disks.DiskError as exc:
            raise ConfigError(f"{exp.source}: {exc}") from None
        if s.load.remote_workers and exp.placer.here("loadgen"):
            problem = services.master_bind_problem({**dotenv(), **os.environ})
            if problem:
                raise ConfigError(f"{exp.source}: load.remote_workers: {problem}")

    def prepare(self, exp: Experiment[WebSettings], run_dir: Path) -> WebPrepared:
        """Every trace written into run_dir/traces; the file sets and hot sets they need."""
        return prepare(exp, run_dir)

    def deploy(self, exp: Experiment[WebSettings], key: Hashable, prepared: WebPrepared,
               previous: Deployment[WebInfo] | None, point: Point) -> Deployment[WebInfo]:
        """The stack up with the key's settings (kinds.web.stack)."""
        return stack.deploy(exp.placer, exp.settings, exp.seed, key, prepared, previous, point,
                            services.own_platforms(exp.modes))

    def finish(self, exp: Experiment[WebSettings], deployment: Deployment[WebInfo]) -> list[str]:
        """The stack removed when its docroot was on OrangeFS: OrangeFS's servers admit whoever
        connects (any other stack stays up for the next run)."""
        docroot = deployment.info.stack.record.get("docroot", "disk")
        if services.docroot_parts(str(docroot))[0] != "orangefs":
            return []
        return orangefs.remove(exp.placer, "the stack with its docroot's OrangeFS cluster")

    def running(self, where: placer.Placer) -> Deployment[WebInfo] | None:
        """The stack's tiers, when its services are up."""
        return stack.running(where)

    def provenance(self, exp: Experiment[WebSettings], deployment: Deployment[WebInfo],
                   ) -> dict[str, Any]:
        """Locust, wrk and the servers' versions; PostgreSQL's settings and data set."""
        return stack.provenance(deployment)

    def run_point(self, ctx: PointContext[WebSettings, WebInfo, WebPrepared]) -> PointResult:
        """Replay the point's trace (kinds.web.sequence)."""
        return sequence.run(ctx, ctx.exp.settings)

    def after_point(self, exp: Experiment[WebSettings], point: Point, row: dict[str, Any],
                    deployment: Deployment[WebInfo]) -> None:
        """A stopped proxy or web tier ends the run; a stopped app or db tier starts again."""
        stack.after_point(point, row, deployment)

    # -- results
    def identity(self, exp: Experiment[WebSettings], point: Point) -> dict[str, Any]:
        """point, trace, mode, repetition, engine, users, docroot, the trace's facts."""
        return results.identity(exp, point)

    def columns(self, exp: Experiment[WebSettings]) -> list[Column]:
        """webmetrics.SUMMARY_COLUMNS with the dynamic requests' columns when they run."""
        return results.columns(exp)

    def brief(self, row: dict[str, Any]) -> str:
        """TPS, MB/s, server CPU per KB, generator CPU."""
        return results.brief(row)

    def point_title(self, exp: Experiment[WebSettings], point: Point) -> str:
        """How the progress line names a point."""
        return results.point_title(exp, point)

    def clean(self, where: placer.Placer) -> list[str]:
        """Stop a load generator a crashed run left running."""
        running = where.containers()
        if GENERATOR in running:
            stop(where, running[GENERATOR])
            return ["stopped any load generator still running in the loadgen container"]
        return []

    def end_note(self, rows: list[dict[str, Any]]) -> str | None:
        """How many points were client-bound, and what to do about it."""
        return results.end_note(rows)

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The report section of the experiment's family (by name)."""
        return report.report_spec(resolved)


def used_systems(settings: WebSettings, where: placer.Placer) -> dict[str, Any]:
    """The disk systems the experiment's docroots name, as the manifest records them
    (emulated or real; bandwidths; how RAID-0 is made on this host)."""
    known = webdisks.names(settings.disk_systems)
    out: dict[str, Any] = {}
    for d in settings.stack.docroot:
        system = webdisks.system_of(d, known)
        if system is not None:
            out[system.name] = {
                "description": system.describe(), "emulated": system.emulated,
                "devices": list(system.paths) or system.devices,
                "read_mb_s": system.read_bps / 1e6 if system.read_bps else None,
                "write_mb_s": system.write_bps / 1e6 if system.write_bps else None,
                "raid0": disks.raid_words(webdisks.host_of_web(where)) if system.raid0 else None}
    return out
