"""One runner for every workload kind: plan, order, repetitions, the per-point sequence, the
summary, the manifest, and resume.

For every point: bring up what the point needs (the kind's deployment, re-used while its
deployment key is the same), apply the mode to its endpoints (all or nothing, verified, the
pre-change state on disk first), sample every counter at 1 Hz while the kind measures, restore
the interfaces whatever happens, and write the point's files, its summary row and the manifest.
The runner starts the sampler; a kind marks its windows and stops it through the point context
(tierbench/kinds/contract.py); the kinds know nothing of modes or the results layout.

Results: results/<experiment>/<run-id>/ with experiment.yml (resolved), plan.json (the points in
run order), manifest.json (provenance, per point the interfaces before/during/after, the report
section), summary.csv, and points/<id>/ (samples.jsonl, per_second.csv, the tool's raw output,
point.json). `tierbench run EXP --resume RUN_DIR` continues an interrupted run: points already
measured are kept, the others run, and the summary covers them all.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import yaml

from analysis import spec as report_spec  # pydantic only, no pandas: quick to load
from tierbench import blocks
from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.files import MAX_RECORD_BYTES, fresh_run_dir, read_text, results_root
from tierbench.interfaces import netif
from tierbench.interrupts import RunInterrupted, signals_raise
from tierbench.kinds import families, registry
from tierbench.kinds.contract import (Deployment, Experiment, Kind, Point, PointContext,
                                      PointResult, RunEnds, log)
from tierbench.measure.counters import MeasureError, node_breakdown, window
from tierbench.measure import profile
from tierbench.measure.kernelview import point_view
from tierbench.modes import apply, cpus, guard, sysctls
from tierbench.modes.model import Mode, bind, host_endpoints
from tierbench.placement import model, nodes, placer, provenance
from tierbench import space
from tierbench.placement.cluster import ClusterPlacer
from tierbench.stats import precision
# imported for what it registers: the disk systems' teardown at the end of every placer's
# down (placer.AFTER_DOWN), so a stack this runner brought up loses its disk images with it
from tierbench.tiers import diskbuild  # noqa: F401


def points_of(exp: Experiment) -> list[Point]:
    """The experiment's points in run order (with a precision target: the blocks every
    condition runs, 1 to min_repetitions; later blocks depend on what those measure)."""
    if exp.precision is not None:
        return blocks.first_blocks(exp)
    return exp.impl.points(exp, exp.seed)


def estimate_s(exp: Experiment) -> float:
    """Estimated wall time of the measured points (bring-up not included); a precision run's
    counts the blocks it is expected to measure (tierbench.blocks.expected_blocks), within its
    budget."""
    first = exp.impl.point_seconds(exp) * len(points_of(exp))
    if exp.precision is None:
        return first
    seconds = first * blocks.expected_blocks(exp) / exp.precision.min_repetitions
    if exp.precision.budget_min is not None:
        seconds = max(first, min(seconds, exp.precision.budget_min * 60))
    return seconds


def report_section(exp: Experiment) -> dict[str, Any]:
    """The kind's report section of the experiment (its family file, completed by the kind),
    checked with the analysis' model of a report spec: a family file the report would not
    accept stops the plan and the run before anything is written or started."""
    section = exp.impl.report(resolved_of(exp))
    try:
        report_spec.validate(section)
    except report_spec.SpecError as exc:
        raise ConfigError(f"{exp.name}: the report family {section.get('family')!r} of the "
                          f"{exp.kind} kind cannot be used ({exc}): correct its file in "
                          f"{families.FOLDER}") from None
    return section


def plan_lines(exp: Experiment) -> list[str]:
    """The dry-run plan: every point in run order and the estimated duration."""
    report_section(exp)
    kind = exp.impl
    points = points_of(exp)
    lines = kind.plan_header(exp, points) + exp.scaled
    # where a mode sets CPUs, every point says which platform it runs on
    platforms = any(m.cpu for m in exp.modes)
    current: Any = _NOTHING
    for p in points:
        key = kind.deployment_key(exp, p)
        if key != current:
            lines.append(kind.deployment_line(exp, p, current is _NOTHING))
            current = key
        lines.append(kind.point_line(exp, p)
                     + (f"  {exp.mode(p.mode).platform()}" if platforms else ""))
    if platforms:
        lines.append(cpus.clock_line())
    total = kind.point_seconds(exp) * len(points)
    if exp.precision is not None:
        return lines + blocks.plan_lines(exp, points, kind.point_seconds(exp), kind.bring_up)
    lines.append(f"estimated duration: {total / 60:.1f} min plus {kind.bring_up}")
    lines.append(interval_line(exp))
    return lines


def interval_line(exp: Experiment) -> str:
    """What the plan's repetitions can resolve."""
    mean, change = precision.expected_half_widths(exp.repetitions, exp.variation_pct)
    if mean is None:
        return ("expected 95 % intervals: none with 1 repetition (no spread to estimate); "
                "use repetitions >= 3 to compare modes")
    return (f"expected 95 % intervals with {exp.repetitions} repetitions and a run-to-run "
            f"variation of {exp.variation_pct:g} %: about ±{mean:.1f} % around each condition's "
            f"mean, ±{change:.1f} % on the change between two modes (smaller effects are not "
            "resolved)")


def space_lines(exp: Experiment) -> list[str]:
    """What the run will write where, and whether it fits (refuses when it does not)."""
    kind = exp.impl
    needs = kind.needs(exp, points_of(exp))
    check_space(exp, needs)
    cluster = exp.placer.cluster
    if cluster is None:
        return [n.line() for n in needs]
    return cluster_lines(exp) + [
        f"  space: {n.what}: {space.human(n.bytes)} in "
        + (f"{n.where}" if not n.medium else
           f"{'Docker' if n.medium == 'disk' else 'memory'} of node(s) "
           f"{', '.join(x.name for x in cluster.nodes_for(n.role)) if n.role else 'all'} "
           "(checked on the nodes when the run starts)") for n in needs]


def cluster_lines(exp: Experiment) -> list[str]:
    """Where the experiment's roles run on the cluster (refuses a role the file leaves out)."""
    where = exp.placer
    roles = exp.impl.cluster_roles(exp)
    if not roles:
        raise ConfigError(f"{exp.source}: kind {exp.kind} does not run on a cluster yet (its "
                          "services have no host-networking overlay and no roles)")
    where.cluster.require_roles(*roles)
    lines = [f"cluster {where.cluster.path}: services with host networking through each node's "
             "Docker context; modes on the nodes' data-plane interfaces over SSH (a congestion "
             "control on each node's routes to the run's other nodes only)"]
    for role in roles:
        names = [f"{n.name} ({n.interface().name} {n.interface().ip})"
                 for n in where.cluster.nodes_for(role)]
        lines.append(f"  role {role}: {', '.join(names)}")
    c = where.cluster
    addresses = ", ".join(f"{n.name} {n.address}" for n in c.nodes)
    lines.append(f"  SSH (management) to each node's address: {addresses}; "
                 + ("modes may change the interface holding it (allow_management_changes)"
                    if c.allow_management_changes else
                    "a mode changing the interface holding it is refused")
                 + f"; nodes restore by themselves {c.rollback_timeout_s:g} s after the "
                 "controller's last renewal")
    wide = sorted({m.name for m in exp.impl.modes(exp)
                   if set(m.knobs.sysctls) - {sysctls.CONGESTION}})
    if wide:  # the congestion control goes on routes; other sysctls are host-wide on a node
        lines.append(f"  mode(s) {', '.join(wide)} set host-wide sysctls on the nodes: a node "
                     "whose /proc/sys is read-only (a container, such as a lab node) cannot "
                     "take them, and the run refuses them there before anything starts")
    return lines


def node_mode_problems(exp: Experiment) -> list[str]:
    """What no node of the run can take of the experiment's modes (a sysctl its kernel lacks or
    its read-only /proc/sys keeps, a congestion control it does not have), one sentence each
    with the nodes it holds for: asked before anything starts, not at the first point."""
    cluster = exp.placer.cluster
    kind = exp.impl
    used = {n.name for role in kind.cluster_roles(exp) for n in cluster.nodes_for(role)}
    via = [nodes.transport(n) for n in cluster.nodes if n.name in used]
    groups: dict[str, list[str]] = {}
    for mode in kind.modes(exp):
        for node in via:
            for p in sysctls.node_problems(mode, node):
                key = re.sub(rf"\b{re.escape(str(node.name))}\b", "\0", p)
                groups.setdefault(key, []).append(str(node.name))
    return [key.replace("\0", ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1
                        else names[0])
            for key, names in groups.items()]


def node_needs(exp: Experiment, needs: list[space.Need]) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes of Docker's data folder and of memory each cluster node must have for the run."""
    cluster = exp.placer.cluster
    disk: dict[str, int] = {}
    mem: dict[str, int] = {}
    for n in needs:
        if n.medium not in ("disk", "memory"):
            continue
        target = disk if n.medium == "disk" else mem
        for node in cluster.nodes_for(n.role) if n.role else cluster.nodes:
            target[node.name] = target.get(node.name, 0) + n.bytes
    return disk, mem


def check_space(exp: Experiment, needs: list[space.Need] | None = None) -> None:
    """Refuse, before anything is written, a run whose files would not fit where they go (on a
    cluster the configured sizes here; the nodes' disks and memory when the run starts)."""
    kind = exp.impl
    if needs is None:
        needs = kind.needs(exp, points_of(exp))
    if exp.placer.cluster is not None:
        needs = [n for n in needs if not n.medium]
    problems = space.problems(needs)
    if problems:
        raise ConfigError(f"{exp.source}: {problems[0]}; nothing was written")


_NOTHING = object()


def new_run_dir(exp: Experiment) -> tuple[str, Path]:
    """A fresh results/<experiment>/<run-id>/ (never an existing one)."""
    path = fresh_run_dir(results_root() / exp.name)
    return path.name, path


def rollback_timeout(exp: Experiment) -> float:
    """The rollback guard's timeout: the cluster file's rollback_timeout_s, or on one host
    $TIERBENCH_ROLLBACK_TIMEOUT_S (default 30 s)."""
    cluster = exp.placer.cluster
    return cluster.rollback_timeout_s if cluster is not None else guard.local_timeout()


def write_json(path: Path, data: object) -> None:
    """Write JSON atomically (a temporary file renamed over the target)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def csv_cell(value: object) -> object:
    """A summary.csv cell: booleans as true/false, floats to 6 significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.0f}"
    return "" if value is None else value


def write_summary(path: Path, rows: list[dict], columns: list[str]) -> None:
    """summary.csv: one row per point; the kind's columns, any others sorted, then error."""
    extra = sorted({k for r in rows for k in r} - set(columns) - {"error"})
    names = columns + extra + ["error"]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: csv_cell(row.get(k)) for k in names})


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """A CSV of uniform rows (per_second.csv); an empty file when there are none."""
    with path.open("w", newline="") as fh:
        if rows:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def mode_endpoints(mode: Mode, deployment: Deployment) -> list[netif.Endpoint]:
    """Where a mode applies: its host interfaces, or the deployment tiers it covers."""
    if mode.host_interfaces:
        eps = deployment.host_endpoints(mode)
        return eps if eps is not None else host_endpoints(mode)
    eps = deployment.endpoints(mode)
    if not eps and not mode.sets_nothing:
        scope = ", ".join(mode.tiers or mode.roles or dict.fromkeys(
            x for p in mode.parts for x in p.tiers or p.roles))
        raise netif.NetifError(f"mode {mode.name} covers {scope}, which this deployment does not "
                               f"have (tiers: {', '.join(deployment.tiers)})")
    return eps


def bound(mode: Mode, deployment: Deployment) -> Mode:
    """A mode of several scoped parts with what each of the deployment's endpoints gets
    (model.bind); any other mode as it is."""
    return bind(mode, [(t.name, t.role, t.endpoints) for t in deployment.tiers.values()])


def check_modes(exp: Experiment, deployment: Deployment) -> None:
    """Capability check of every mode before the first point: refuse the run, change nothing."""
    problems = []
    cluster = exp.placer.cluster
    for m in exp.impl.modes(exp):
        m = bound(m, deployment)
        eps = mode_endpoints(m, deployment)
        if cluster is not None:
            refused = guard.management_refusal(
                m, eps, {n: itf for n in {ep.node for ep in eps if ep.node}
                         if (itf := nodes.management_interface(cluster.node(n)))},
                cluster.allow_management_changes, cluster.path or "the cluster file")
            if refused:
                problems.append(refused)
        problems += once_per_setting(apply.check_mode(m, eps,
                                                      containers=deployment.cpu_containers(m)),
                                     [ep.label for ep in eps])
    if problems:
        raise netif.NetifError("; ".join(problems))


def once_per_setting(problems: list[str], labels: list[str]) -> list[str]:
    """The problems that differ only in the interface they name, said once with the number of
    the others (a setting veth lacks fails on every veth of the deployment the same way)."""
    pattern = re.compile("|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True))
                         ) if labels else None
    groups: dict[str, list[str]] = {}
    for p in problems:
        groups.setdefault(pattern.sub("<interface>", p) if pattern else p, []).append(p)
    return [same[0] + (f" (and the same on {len(same) - 1} more interface"
                       f"{'s' if len(same) > 2 else ''})" if len(same) > 1 else "")
            for same in groups.values()]


class Run:
    """One execution of an experiment, writing results/<experiment>/<run-id>/."""

    def __init__(self, exp: Experiment, resume: Path | None = None) -> None:
        self.exp = exp
        self.kind: Kind = exp.impl
        self.points = points_of(exp)
        self.resume = resume
        self.dir: Path | None = None
        self.run_id = ""
        self.rows: list[dict] = []
        self.manifest: dict = {}
        self.done: dict[str, dict] = {}  # point id -> its point.json (resume)
        self.state = netif.StateFile()
        self.deployment: Deployment | None = None
        self.prepared: Any = None
        self.point_times: list[float] = []  # wall time of each point measured (budget)
        self.deploy_s = 0.0  # time spent bringing deployments up
        self.deployment_index = 0  # a precision run's bring-up (blocks.deployment_of)

    # -- the run
    def execute(self) -> Path:
        """Run every point (those not measured yet, on resume); returns the run directory.
        Interfaces are restored on any exit."""
        exp, kind = self.exp, self.kind
        report_section(exp)
        check_space(exp)
        rollback_timeout(exp)  # a bad $TIERBENCH_ROLLBACK_TIMEOUT_S refused before anything
        kind.preflight(exp, self.points)
        where = exp.placer
        if where.cluster is not None:  # every node checked before anything changes anywhere
            cluster_lines(exp)
            disk, mem = node_needs(exp, kind.needs(exp, self.points))
            log(f"tierbench: checking {len(where.cluster.nodes)} node(s) of {where.name}")
            cast(ClusterPlacer, where).check(disk, mem)
            problems = node_mode_problems(exp)
            if problems:
                raise netif.NetifError("; ".join(problems) + "; nothing was started")
        if self.resume is not None:
            self._open_for_resume(self.resume)
        else:
            self.run_id, self.dir = new_run_dir(exp)
            (self.dir / "experiment.yml").write_text(
                yaml.safe_dump(resolved_of(exp), sort_keys=False))
            write_json(self.dir / "plan.json", self._plan_json())
        assert self.dir is not None
        self.prepared = kind.prepare(exp, self.dir)
        todo = [p for p in self.points if p.id not in self.done]
        per_point = kind.point_seconds(exp)
        log(f"tierbench: run {self.run_id} of {exp.name}: {len(todo)} points"
            + (f" ({len(self.done)} measured before)" if self.done else "")
            + (" (and more blocks until resolved)" if exp.precision else "")
            + f", about {per_point * len(todo) / 60:.1f} min; results in {self.dir}")
        if not todo and exp.precision is None:
            self._finish("complete")
            return self.dir
        status = "complete"
        try:
            with signals_raise():
                if exp.precision is None:
                    self._run_points(todo)
                else:
                    self._run_blocks()
            note = kind.end_note(self.rows)
            if note:
                log(note)
        except RunInterrupted as exc:
            status = f"interrupted by {exc}"
            raise
        except netif.NetifError:
            status = "failed: a mode could not be applied"
            raise
        except RunEnds as exc:
            status = f"failed: {exc}"
            raise RunEnds(f"{exc}; results so far are in {self.dir}") from None
        except Exception as exc:
            status = f"failed: {exc}"
            raise
        finally:
            if self.manifest:
                self._finish(status)
            if self.deployment is not None:
                self._release(self.deployment)
        return self.dir

    def _release(self, deployment: Deployment) -> None:
        """The kind's services that admit whoever connects stopped (Kind.finish); a failure
        is a line, not the run's end: the run's own outcome matters more."""
        try:
            for note in self.kind.finish(self.exp, deployment):
                log(f"tierbench: {note}")
        except TierbenchError as exc:
            log(f"tierbench: {exc}")

    def _deployed(self, point: Point) -> Deployment:
        """The deployment a point needs: brought up (the first time, with the manifest's
        provenance), replaced when its deployment key differs, else the one that is up."""
        exp, kind = self.exp, self.kind
        key = kind.deployment_key(exp, point)
        t0 = time.monotonic()
        try:
            return self._deploy(key, point)
        finally:
            self.deploy_s += time.monotonic() - t0

    def _deploy(self, key: Any, point: Point) -> Deployment:
        exp, kind = self.exp, self.kind
        fresh = self._next_bring_up(point)  # a precision run's next deployment
        if self.deployment is None:
            self.deployment = kind.deploy(exp, key, self.prepared, None, point)
            check_modes(exp, self.deployment)
            self._open_manifest(self.deployment)
        elif fresh:
            log(f"tierbench: block {point.repetition}: fresh bring-up {self.deployment_index} "
                "(blocks nested in deployments)")
            self.deployment = kind.redeploy(exp, key, self.prepared, self.deployment, point)
            check_modes(exp, self.deployment)
        elif key != self.deployment.key:
            self.deployment = kind.deploy(exp, key, self.prepared, self.deployment, point)
            check_modes(exp, self.deployment)
        if fresh:
            self.manifest.setdefault("deployments", []).append(
                {"deployment": self.deployment_index, "first_point": point.id,
                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        return self.deployment

    def _next_bring_up(self, point: Point) -> bool:
        """Whether a precision run's point starts a bring-up other than the one up (its
        block's, blocks.deployment_of), which it then becomes."""
        if self.exp.precision is None:
            return False
        index = blocks.deployment_of(self.exp, point.repetition)
        changed = index != self.deployment_index
        self.deployment_index = index
        return changed

    def _open_manifest(self, deployment: Deployment) -> None:
        exp, kind = self.exp, self.kind
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if self.done:
            self.manifest.setdefault("resumed", []).append(started)
        else:
            resolved = resolved_of(exp)
            self.manifest = {
                "run_id": self.run_id, "started": started, "finished": None,
                "status": "running", "kind": exp.kind, "experiment": resolved,
                **provenance.collect(deployment.containers, exp.placer),
                **kind.provenance(exp, deployment),
                **self._cluster_record(exp.placer),
                "report": report_section(exp),
                **({"profile": exp.profile} if exp.profile else {}),
                "points": {},
            }
        self.manifest["status"] = "running"
        self._save()

    def _run_points(self, todo: list[Point], block: int | None = None) -> None:
        """Measure the points in order, with a progress line each."""
        exp, kind = self.exp, self.kind
        for n, point in enumerate(todo, 1):
            deployment = self._deployed(point)
            t0 = time.monotonic()
            row = self._point(point, deployment, self.prepared)
            self.point_times.append(time.monotonic() - t0)
            left = (len(todo) - n) * (time.monotonic() - t0)
            where = f"block {block}, {n}/{len(todo)}" if block else f"{n}/{len(todo)}"
            log(f"[{where}] {kind.point_title(exp, point)}: {kind.brief(row)}"
                + (f"; about {left / 60:.1f} min left" if left and not block else ""))
            kind.after_point(exp, point, row, deployment)

    def _run_blocks(self) -> None:
        """A precision run: blocks 1 to min_repetitions for every condition, then one block
        more at a time for the conditions whose comparisons are not yet resolved, until all
        are, or max_repetitions blocks, or the budget is spent (tierbench.stats.precision)."""
        exp = self.exp
        target = exp.precision
        assert target is not None
        schedule = blocks.Schedule(exp, self.points, [m.name for m in exp.modes],
                                   baseline_of(exp))
        started, deployed_before = time.monotonic(), self.deploy_s
        spent_before = float(self.manifest.get("precision", {}).get("spent_s", 0.0))

        def spent() -> float:  # measuring time: bring-ups and restarts are not counted
            return spent_before + time.monotonic() - started - (self.deploy_s - deployed_before)

        planned, block = len(self.points), 0
        for block, todo in schedule.run(self.rows, set(self.done), spent, self._block_seconds):
            if len(self.points) > planned:
                planned = len(self.points)
                assert self.dir is not None
                write_json(self.dir / "plan.json", self._plan_json())
            if todo:
                log(f"tierbench: block {block}: {len(todo)} points, "
                    f"{len({blocks.condition_of(p) for p in todo})} condition(s)")
                self._run_points(todo, block)
            self.manifest["precision"] = schedule.record(self.rows, block, spent())
            self._save()
        self.manifest["precision"] = schedule.record(self.rows, block, spent())
        self._save()
        log(schedule.summary_line(self.manifest["precision"]))

    def _block_seconds(self, points: list[Point]) -> float:
        """Expected time of a block: the mean time of the points measured so far."""
        times = self.point_times
        per_point = sum(times) / len(times) if times else self.kind.point_seconds(self.exp)
        return per_point * len(points)

    def _point(self, point: Point, deployment: Deployment, prepared: Any) -> dict:
        exp, kind = self.exp, self.kind
        assert self.dir is not None
        mode = bound(kind.point_mode(exp, point), deployment)
        pdir = self.dir / "points" / point.id
        if pdir.exists():  # a point a resumed run had started but not finished
            shutil.rmtree(pdir)
        pdir.mkdir(parents=True)
        eps = mode_endpoints(mode, deployment)
        record: dict = {"point": point.id, "mode": point.mode, "repetition": point.repetition}
        if mode.name != point.mode:  # the point's mode layered over another (net cases)
            record["applied_mode"] = mode.name
        self.manifest["points"][point.id] = record
        row = dict(kind.identity(exp, point))
        if exp.precision is not None:  # the bring-up its block ran on (blocks nested in them)
            row["deployment"] = record["deployment"] = self.deployment_index
        try:
            with apply.mode_applied(mode, eps, deployment.watched(), self.state, record,
                                    exp.settle_s, self._save, deployment.cpu_containers(mode),
                                    rollback_s=rollback_timeout(exp)):
                sampler = deployment.sampler(pdir / "samples.jsonl")
                try:
                    sampler.start()
                except TierbenchError as exc:  # on a cluster: a node that stopped answering
                    why = exp.placer.engines_answer() or str(exc)
                    raise RunEnds(f"{why} during {point.id}; the run ends here") from None
                with profile.Recording(pdir, exp.profile == "categories",
                                       deployment.counters) as perf:
                    try:
                        result: PointResult = kind.run_point(PointContext(
                            exp, point, deployment, pdir, record, sampler, prepared, log))
                    finally:
                        sampler.stop()
                    row.update(perf.finish(result.window))
                row.update(result.values)
                row.update(node_figures(sampler.samples, result.window))
                row.update(point_view(sampler.samples, result.window, pdir))
                if result.error:
                    row["error"] = result.error
                if result.per_second is not None:
                    write_rows(pdir / "per_second.csv", result.per_second)
                record["complete"] = True
        finally:
            if record.get("rollback_fired"):  # measured partly without the mode: measure again
                record["complete"] = False
            record["summary"] = row
            self.rows.append(row)
            write_json(pdir / "point.json", record)
            self.manifest["points"][point.id] = apply.without_snapshots(record)
            self._save()
        return row

    # -- files
    def _plan_json(self) -> dict[str, Any]:
        plan: dict[str, Any] = {"experiment": self.exp.name, "seed": self.exp.seed}
        if self.exp.precision is not None:
            plan["design"] = {"blocks": "every mode of a condition once per block; block b "
                              "shuffled with seed x 1000 + b; the repetition is the block",
                              "planned_blocks": max((p.repetition for p in self.points),
                                                    default=0)}
        plan["points"] = [{"point": p.id, "mode": p.mode, "repetition": p.repetition,
                           "factors": p.factors} for p in self.points]
        return plan

    def _open_for_resume(self, run_dir: Path) -> None:
        """Reopen an interrupted run of the same experiment: its finished points are kept."""
        exp = self.exp
        where = f"--resume {run_dir}"
        recorded_path = run_dir / "experiment.yml"
        if not recorded_path.is_file():
            raise ConfigError(f"{where}: no experiment.yml there; give a results/<experiment>/"
                              "<run-id> folder of an earlier run")
        recorded = yaml.safe_load(read_text(recorded_path, "experiment file"))
        now = json.loads(json.dumps(resolved_of(exp), default=str))
        if _without_source(recorded) != _without_source(now):
            key = next((k for k in sorted(set(recorded) | set(now))
                        if k != "source" and recorded.get(k) != now.get(k)), "?")
            raise ConfigError(f"{where}: the run was of a different experiment (its {key} "
                              f"differs from {exp.source}); resume needs the same experiment")
        plan_path = run_dir / "plan.json"
        if plan_path.is_file():
            plan = json.loads(read_text(plan_path, "plan", MAX_RECORD_BYTES))
            theirs = plan.get("points") or []
            if exp.precision is not None:  # the blocks after the minimum, as the run chose them
                for block in range(exp.precision.min_repetitions + 1,
                                   max((int(p["repetition"]) for p in theirs), default=0) + 1):
                    chosen = {json.dumps(p["factors"], sort_keys=True, default=str)
                              for p in theirs if int(p["repetition"]) == block}
                    self.points += blocks.block_points(exp, block, chosen,
                                                       len(self.points) + 1)
            ours = json.loads(json.dumps(self._plan_json()["points"], default=str))
            if theirs != ours:
                raise ConfigError(f"{where}: the points of {exp.source} differ from the run's "
                                  "plan.json; resume needs the same plan")
        else:
            write_json(plan_path, self._plan_json())
        manifest_path = run_dir / "manifest.json"
        self.manifest = json.loads(read_text(manifest_path, "manifest", MAX_RECORD_BYTES)) \
            if manifest_path.is_file() else {}
        self.run_id, self.dir = run_dir.name, run_dir
        kept: dict[str, dict] = {}
        for p in self.points:
            path = run_dir / "points" / p.id / "point.json"
            if path.is_file():
                record = json.loads(read_text(path, "point record", MAX_RECORD_BYTES))
                if record.get("complete"):
                    kept[p.id] = record
        self.done = kept
        points = self.manifest.setdefault("points", {})
        for pid in list(points):
            if pid not in kept:
                del points[pid]
        self.rows = [kept[p.id]["summary"] for p in self.points if p.id in kept]

    def _cluster_record(self, where: placer.Placer) -> dict[str, Any]:
        """The cluster: file, roles, and per node its provenance (NICs before the run)."""
        if where.cluster is None:
            return {}
        where = cast(ClusterPlacer, where)
        return {"cluster": {"file": where.cluster.path, "workdir": where.cluster.workdir,
                            "roles": where.cluster.placement(),
                            "services": {s: list(h) for s, h in where.placed.items()},
                            "images": where.images_by_node()},
                "nodes": where.provenance("before")}

    def _finish(self, status: str) -> None:
        nodes = self.manifest.get("nodes")
        where = self.exp.placer
        if isinstance(nodes, dict) and where.cluster is not None:
            try:
                for name, after in where.provenance("after").items():
                    nodes.setdefault(name, {}).update(after)
            except Exception as exc:  # noqa: BLE001 - the run's status matters more
                self.manifest["nodes_after_error"] = str(exc)
        self.manifest["status"] = status
        self.manifest["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._save()

    def _save(self) -> None:
        assert self.dir is not None
        write_json(self.dir / "manifest.json", self.manifest)
        order = {p.id: i for i, p in enumerate(self.points)}
        rows = sorted(self.rows, key=lambda r: order.get(str(r.get("point")), len(order)))
        write_summary(self.dir / "summary.csv", rows,
                      [c.name for c in self.kind.columns(self.exp)])


def baseline_of(exp: Experiment) -> str:
    """The mode the others are compared with: the report's choice
    (tierbench.stats.precision.baseline_mode)."""
    resolved = resolved_of(exp)
    names = [m.name for m in exp.modes]
    return precision.baseline_mode(names, resolved,
                                   exp.impl.report(resolved)) or names[-1]


def resolved_of(exp: Experiment) -> dict[str, Any]:
    """The experiment as the run records it: the kind's resolved settings (scaled ones, after
    --scale), the precision target and the scale when there are."""
    resolved = exp.impl.resolved(exp)
    if exp.precision is not None:
        resolved["precision"] = exp.precision.model_dump()
    if exp.scale != 1:
        resolved["scale"] = exp.scale
    return resolved


def _without_source(resolved: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resolved.items() if k != "source"}


def node_figures(samples: list[dict], span: tuple[float, float] | None) -> dict[str, float]:
    """Each cluster node's CPU over the point's window (none on one host)."""
    if span is None or not samples or "nodes" not in samples[-1]:
        return {}
    try:
        first, last = window(samples, *span)
    except MeasureError:
        return {}
    return node_breakdown(first, last)


def write_report(run_dir: Path) -> Path | None:
    """report.html of a run folder, with the kind's report section when the manifest lacks it.
    (The analysis package is imported here, not at start-up: it takes seconds to load, which
    every other command would pay.)"""
    from analysis import load, report

    if not (run_dir / "summary.csv").is_file():
        return None
    spec = None
    try:
        resolved = yaml.safe_load((run_dir / "experiment.yml").read_text())
        spec = registry.kind(registry.kind_of(resolved)).report(resolved)
    except (OSError, yaml.YAMLError, TierbenchError, AttributeError, TypeError):
        spec = None  # the report falls back to a generic section
    try:
        return report.write_report(run_dir, load.stderr_progress("tierbench: report: samples"),
                                   spec=spec)
    except load.LayoutError as exc:
        raise ConfigError(str(exc)) from None


def clean(where: placer.Placer, keep_stack: bool = False, every: bool = False) -> list[str]:
    """Restore interfaces a crashed run of this checkout left changed, then remove its stack (on
    every node of the cluster ``where`` places services on; ``every``: every checkout's
    containers, networks, volumes and tmpfs); returns notes."""
    notes = []
    for kind in registry.kinds().values():
        try:
            notes += kind.clean(where)
        except TierbenchError as exc:  # a node that does not answer: restore the others anyway
            notes.append(f"{kind.name}: {exc}")
    state = netif.StateFile()
    saved = state.load()
    if saved:
        problems = apply.restore_state(saved)
        real = [p for p in problems if "gone, nothing to restore" not in p]
        notes += [f"restore: {p}" for p in problems]
        if real:
            raise netif.NetifError("some interface settings could not be restored: "
                                   + "; ".join(real))
        notes.append("restored the interface and sysctl settings saved before a change")
        state.clear()
    elif saved is None:
        notes.append("no interface settings were left changed")
    if keep_stack:
        notes.append("left the stack running (--keep-stack)")
    else:
        where.down(every)
        notes.append(f"removed {'every checkout' if every else 'this checkout'}'s stack "
                     f"({'tierbench*' if every else model.PROJECT}): containers, networks and "
                     f"volumes on {where.name}")
        notes += where.clean()
    return notes
