"""Runs an experiment: bring the stack up, then for every point apply the mode, verify it,
sample while the load runs, restore the interfaces and write the point's results."""

from __future__ import annotations

import csv
import json
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from analysis import report
from tierbench import knobs, loadgen, metrics, modes, netif, provenance, stack
from tierbench.config import Experiment, Point
from tierbench.modes import Mode
from tierbench.sampler import CgroupCpu, CgroupGroup, Sampler
from workloads import traces

POINT_OVERHEAD_S = 6.0  # load generator start-up and shut-down, snapshots, restore
GENERATOR = "loadgen"


class RunInterrupted(Exception):
    """SIGINT or SIGTERM arrived during a run."""


def estimate_s(exp: Experiment) -> float:
    """Estimated wall time of the measured points (stack bring-up not included)."""
    per_point = exp.settle_s + exp.warmup_s + exp.measure_s + POINT_OVERHEAD_S
    return per_point * len(exp.points())


def plan_lines(exp: Experiment) -> list[str]:
    """The dry-run plan: every point in run order and the estimated duration."""
    per_point = exp.settle_s + exp.warmup_s + exp.measure_s + POINT_OVERHEAD_S
    lines = [f"experiment {exp.name} ({exp.source}): {len(exp.points())} points, "
             f"order shuffled with seed {exp.seed}; engine {exp.engine}, target {exp.target}"
             + (f"; Locust master + {exp.workers} worker container(s) x {exp.processes} "
                f"process(es), {exp.remote_workers} remote" if exp.workers or exp.remote_workers
                else ""),
             f"per point: settle {exp.settle_s:g} s + warm-up {exp.warmup_s:g} s + measured "
             f"{exp.measure_s:g} s + about {POINT_OVERHEAD_S:g} s overhead "
             "(mode switch, snapshots, load generator start/stop)",
             "NIC modes switch without restarting containers; server options restart the "
             "services whose settings change (points are grouped to restart as rarely as possible)"]
    current = None
    for p in exp.points():
        settings = exp.stack_for(exp.mode(p.mode), p.docroot)
        if settings != current:
            lines.append(f"  -- stack: {_settings_text(settings)}"
                         + (" (restart)" if current is not None else ""))
            current = settings
        lines.append(f"  {p.id}  trace={p.trace['name']:<14} mode={p.mode:<16} "
                     f"rep={p.repetition}  users={p.users}  ~{per_point:.0f} s")
    total = estimate_s(exp)
    lines.append(f"estimated duration: {total / 60:.1f} min plus stack bring-up "
                 "(seconds when images are built)")
    return lines


def _settings_text(settings: dict) -> str:
    return " ".join(f"{k}={'on' if v is True else 'off' if v is False else v}"
                    for k, v in settings.items())


def new_run_dir(exp: Experiment) -> tuple[str, Path]:
    """A fresh results/<experiment>/<run-id>/ (never an existing one)."""
    base = stack.results_root() / exp.name
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_id, n = stamp, 1
    while (base / run_id).exists():
        n += 1
        run_id = f"{stamp}-{n}"
    path = base / run_id
    path.mkdir(parents=True)
    return run_id, path


def trace_files(exp: Experiment, run_dir: Path) -> tuple[dict[str, Path], list[dict]]:
    """Write every trace of the experiment; returns their paths and the file sets they need."""
    folder = run_dir / "traces"
    folder.mkdir()
    paths, sets = {}, []
    for spec in exp.traces:
        for fs in traces.filesets_of(spec):
            if fs not in sets:
                sets.append(fs)
        path = folder / f"{spec['name']}.txt"
        header = (f"trace {spec['name']} of experiment {exp.name}\n"
                  f"spec: {json.dumps(spec, sort_keys=True)}\nseed: {exp.seed}")
        traces.write(path, traces.build(spec, exp.seed), header, traces.subset_size(spec))
        paths[spec["name"]] = path
    return paths, sets


def hot_sets(exp: Experiment) -> list[dict]:
    """File sets of the experiment's hot site (stack.hot_site): the parts of its mix traces."""
    site = exp.stack.get("hot_site")
    return [traces.fileset_of(part) for t in exp.traces if t["kind"] == "mix"
            for part in t["parts"] if part["site"] == site]


@contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into RunInterrupted so that every `finally` restores state."""
    def handler(signum: int, _frame: object) -> None:
        # Ignore further signals so that the restore in progress cannot itself be cut short.
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise RunInterrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class Tier:
    """What the runner knows of one tier during a run."""

    container: stack.Container
    cgroup: CgroupCpu | CgroupGroup
    endpoints: list[netif.Endpoint]
    workers: tuple[stack.Container, ...] = ()  # loadgen: its Locust worker containers


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


@contextmanager
def mode_applied(mode: Mode, eps: list[netif.Endpoint], watched: list[netif.Endpoint],
                 state_file: netif.StateFile, record: dict, settle_s: float,
                 save: Callable[[], None]) -> Iterator[None]:
    """Apply a mode to its endpoints for the body of the `with`, verified, and restore it after,
    whatever happens. ``record`` (the point's manifest entry) gets the interfaces and the mode's
    settings before, during and after; the pre-change state is on disk (``state_file``) before
    the first change, so `tierbench clean` can restore after a crash."""
    watched = watched + [ep for ep in eps if ep not in watched]

    def interfaces() -> dict:
        # An endpoint whose container stopped (a failure test, a crash) is recorded as gone.
        views = {}
        for ep in watched:
            try:
                views[ep.label] = netif.settings_view(netif.snapshot(ep))
            except netif.NetifError as exc:
                views[ep.label] = {"gone": str(exc)}
        return views

    def present(views: dict) -> dict:
        return {k: v for k, v in views.items() if "gone" not in v}

    record["endpoints"] = [ep.label for ep in eps]
    record["interfaces_before"] = interfaces()
    state = knobs.snapshot_mode(mode, eps)
    record["mode_state_before"] = knobs.state_view(state)
    state_file.save(state)
    save()
    problems: list[str] = []
    try:
        knobs.apply_mode(mode, eps, state)
        time.sleep(settle_s)
        record["interfaces_during"] = interfaces()
        record["mode_state_during"] = knobs.state_view(knobs.snapshot_mode(mode, eps))
        mismatches = knobs.verify_mode(mode, eps, state)
        record["mode_verified"] = not mismatches
        if mismatches:
            raise netif.NetifError(f"mode {mode.name} did not hold: {'; '.join(mismatches)}")
        yield
    finally:
        problems = [p for p in knobs.restore_state(state)
                    if "gone, nothing to restore" not in p]
        record["interfaces_after"] = interfaces()
        live = [ep for ep in eps if "gone" not in record["interfaces_after"].get(ep.label, {})]
        record["mode_state_after"] = knobs.state_view(knobs.snapshot_mode(mode, live))
        after = present(record["interfaces_after"])
        record["restored"] = not problems and (
            after == {k: v for k, v in record["interfaces_before"].items() if k in after}
            and _endpoints_subset(record["mode_state_after"], record["mode_state_before"]))
        if problems:
            record["restore_problems"] = problems
        else:
            state_file.clear()
    if problems:
        raise netif.NetifError("interfaces could not be restored after "
                               f"{record.get('point', 'the point')}: {'; '.join(problems)}; "
                               "run `tierbench clean`")


def _endpoints_subset(after: dict, before: dict) -> bool:
    """The mode's state after equals the state before wherever it could still be read (an
    endpoint or netns whose container stopped has nothing left to compare)."""
    return all({k: before.get(part, {}).get(k) for k in after.get(part, {})} == after.get(part, {})
               for part in ("endpoints", "sysctls"))


def generator_tier(master: Tier, workers: list[stack.Container], expected: int) -> Tier:
    """The generator as one tier: the loadgen container (Locust master) and its worker
    containers, CPU summed over their cgroups, interfaces of all of them (the clients' ends)."""
    if len(workers) != expected:
        raise stack.StackError(f"load.workers is {expected} but {len(workers)} worker "
                               f"container(s) are running: see `docker compose logs "
                               f"{stack.WORKER_SERVICE}`")
    parts = {GENERATOR: master.cgroup}
    endpoints = list(master.endpoints)
    for n, w in enumerate(workers, 1):
        name = f"{stack.WORKER_SERVICE}-{n}"
        parts[name] = CgroupCpu(w.pid)
        endpoints += netif.veth_endpoints(name, w.pid)
    return Tier(master.container, CgroupGroup(parts), endpoints, tuple(workers))


def finish(run: Any, status: str) -> None:
    """The end of any run (a DC Run or a PfsRun): status and end time in the manifest, saved,
    and the report written when a point was measured."""
    run.manifest["status"] = status
    run.manifest["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    run._save()
    if run.rows:
        report.write_report(run.dir)


class Run:
    """One execution of an experiment, writing results/<experiment>/<run-id>/."""

    def __init__(self, exp: Experiment) -> None:
        self.exp = exp
        self.run_id, self.dir = new_run_dir(exp)
        self.rows: list[dict] = []
        self.manifest: dict = {}
        self.state = netif.StateFile()
        self.sets: list[dict] = []
        self.hot_sets: list[dict] = []
        self.settings: dict = {}

    def execute(self) -> Path:
        """Run every point; returns the run directory. Interfaces are restored on any exit."""
        exp = self.exp
        (self.dir / "experiment.yml").write_text(yaml.safe_dump(exp.resolved(), sort_keys=False))
        trace_paths, sets = trace_files(exp, self.dir)
        _log(f"tierbench: run {self.run_id} of {exp.name}: {len(exp.points())} points, "
             f"about {estimate_s(exp) / 60:.1f} min; results in {self.dir}")
        _log("tierbench: bringing the stack up (file sets, healthchecks)")
        self.sets = sets
        for docroot in exp.docroots:  # every image the run will need, before the first point
            stack.check_images(exp.stack["proxy"], stack.docroot_parts(docroot)[0])
        first = exp.points()[0]
        self.settings = exp.stack_for(exp.mode(first.mode), first.docroot)
        self.hot_sets = hot_sets(exp)
        stack.up(self.settings, sets, exp.target, exp.workers, exp.remote_workers, self.hot_sets)
        tiers = self._discover()
        self._check_modes(tiers)
        self.manifest = {
            "run_id": self.run_id,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "finished": None,
            "status": "running",
            "experiment": exp.resolved(),
            **provenance.collect({t: tiers[t].container for t in tiers}),
            "filesets": sets,
            "points": {},
        }
        self._save()
        status = "complete"
        try:
            with signals_raise():
                for n, point in enumerate(exp.points(), 1):
                    t0 = time.monotonic()
                    tiers = self._restart_if_needed(point, tiers)
                    self._point(point, tiers, trace_paths[point.trace["name"]])
                    left = (len(exp.points()) - n) * (time.monotonic() - t0)
                    row = self.rows[-1]
                    _log(f"[{n}/{len(exp.points())}] {point.id} {point.trace['name']} "
                         f"{point.mode} rep {point.repetition}: " + _brief(row)
                         + (f"; about {left / 60:.1f} min left" if left else ""))
            bound = [r for r in self.rows if r.get("client_bound")]
            if bound:
                _log(f"tierbench: {len(bound)} of {len(self.rows)} points were client-bound: "
                     f"{bound[-1].get('client_bound_advice', '')}")
        except RunInterrupted as exc:
            status = f"interrupted by {exc}"
            raise
        except netif.NetifError:
            status = "failed: a mode could not be applied"
            raise
        finally:
            finish(self, status)
        return self.dir

    def _restart_if_needed(self, point: Point, tiers: dict[str, Tier]) -> dict[str, Tier]:
        """Re-up the stack when this point's server options differ from the running ones."""
        settings = self.exp.stack_for(self.exp.mode(point.mode), point.docroot)
        if settings == self.settings:
            return tiers
        _log(f"tierbench: restarting services for {point.mode}: {_settings_text(settings)}")
        if settings["docroot"] != self.settings["docroot"]:
            stack.down()  # a volume's driver cannot change in place: the docroot starts anew
        stack.up(settings, self.sets, self.exp.target, self.exp.workers, self.exp.remote_workers,
                 self.hot_sets)
        self.settings = settings
        tiers = self._discover()
        self._check_modes(tiers)
        return tiers

    def _discover(self) -> dict[str, Tier]:
        found = {}
        for name, c in stack.tier_containers().items():
            found[name] = Tier(c, CgroupCpu(c.pid), netif.veth_endpoints(name, c.pid))
        if self.exp.workers:
            found[GENERATOR] = generator_tier(found[GENERATOR], stack.worker_containers(),
                                              self.exp.workers)
        return found

    def _mode_endpoints(self, mode: Mode, tiers: dict[str, Tier]) -> list[netif.Endpoint]:
        """Where a mode applies: its host interfaces, or both ends of its tiers' veths."""
        if mode.host_interfaces:
            return modes.mode_endpoints(mode)
        return [ep for t in mode.tiers for ep in tiers[t].endpoints]

    def _check_modes(self, tiers: dict[str, Tier]) -> None:
        """Capability check of every mode before the first point: refuse the run, change nothing."""
        problems = [p for m in self.exp.modes
                    for p in knobs.check_mode(m, self._mode_endpoints(m, tiers))]
        if problems:
            raise netif.NetifError("; ".join(problems))

    def _point(self, point: Point, tiers: dict[str, Tier], trace: Path) -> None:
        exp, mode = self.exp, self.exp.mode(point.mode)
        pdir = self.dir / "points" / point.id
        pdir.mkdir(parents=True)
        eps = self._mode_endpoints(mode, tiers)
        watched = [ep for t in tiers.values() for ep in t.endpoints]
        record: dict = {"point": point.id, "trace": point.trace["name"], "mode": point.mode,
                        "repetition": point.repetition, "stack": self.settings}
        self.manifest["points"][point.id] = record
        row = {"point": point.id, "trace": point.trace["name"], "mode": point.mode,
               "repetition": point.repetition, "engine": exp.engine, "users": point.users,
               "docroot": point.docroot}
        try:
            with mode_applied(mode, eps, watched, self.state, record, exp.settle_s, self._save):
                try:
                    row.update(self._measure(point, pdir, tiers, trace, record))
                except (loadgen.LoadgenError, metrics.MetricsError) as exc:
                    row["error"] = str(exc)
                    _log(f"tierbench: {point.id} failed: {exc}")
        finally:
            record["summary"] = row
            self.rows.append(row)
            write_json(pdir / "point.json", record)
            self._save()

    def _measure(self, point: Point, pdir: Path, tiers: dict[str, Tier], trace: Path,
                 record: dict) -> dict:
        exp = self.exp
        gen = tiers[GENERATOR]
        ifaces = {ep.label: ep.ifname for t in tiers.values() for ep in t.endpoints
                  if ep.netns_pid is None}
        # Bytes delivered to the client: what the host ends of the loadgen's veths transmit.
        client_ifaces = [ep.label for ep in gen.endpoints if ep.netns_pid is None]
        spec = loadgen.LoadSpec(engine=exp.engine, users=point.users, warmup_s=exp.warmup_s,
                                measure_s=exp.measure_s, processes=exp.processes,
                                think=exp.think, rate=exp.rate, target=exp.target,
                                allow_foreign_target=exp.allow_foreign_target,
                                workers=exp.workers, remote_workers=exp.remote_workers,
                                worker_wait_s=exp.worker_wait_s)
        sampler = Sampler(pdir / "samples.jsonl", {t: v.cgroup for t, v in tiers.items()}, ifaces)
        sampler.start()
        try:
            result = loadgen.run(spec, gen.container, pdir, trace, list(gen.workers))
        finally:
            samples = sampler.stop()
        if sampler.error:
            raise metrics.MetricsError(sampler.error)
        start, end = result.window
        # Wall-clock bounds: samples and requests before measure_start are warm-up.
        record["window"] = {"load_started": result.started, "measure_start": start,
                            "measure_end": end}
        row = loadgen.summary_row(samples, result, generator=GENERATOR,
                                  bytes_label=client_ifaces)
        # The samples that bracket the numbers above: analysis recomputes from exactly these.
        first, last = metrics.window(samples, start, end)
        record["window"].update({"start": first["t"], "end": last["t"]})
        sites = traces.sites(point.trace)
        if sites:  # a mix trace: each site's TPS and latency (004 §4.4: the foreground's)
            row.update(metrics.site_figures(pdir / "requests.csv", sites, first["t"], last["t"]))
        rows = loadgen.per_second_rows(samples, result)
        with (pdir / "per_second.csv").open("w", newline="") as fh:
            if rows:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        return row

    def _save(self) -> None:
        write_json(self.dir / "manifest.json", self.manifest)
        write_summary(self.dir / "summary.csv", self.rows)


def write_summary(path: Path, rows: list[dict]) -> None:
    """summary.csv: one row per point, columns as in metrics.SUMMARY_COLUMNS (+ error)."""
    extra = sorted({k for r in rows for k in r} - set(metrics.SUMMARY_COLUMNS) - {"error"})
    columns = metrics.SUMMARY_COLUMNS + extra + ["error"]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: csv_cell(row.get(k)) for k in columns})


def csv_cell(value: object) -> object:
    """A summary.csv cell: booleans as true/false, floats to 6 significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.0f}"
    return "" if value is None else value


def _brief(row: dict) -> str:
    if "error" in row:
        return f"FAILED ({row['error']})"
    flag = " CLIENT-BOUND" if row.get("client_bound") else ""
    return (f"{row['tps']:.0f} TPS, {row['mb_per_s']:.0f} MB/s, server CPU "
            f"{row['server_cpu_us_per_kb']:.2f} us/KB, generator {row['generator_cpu_pct']:.0f} %{flag}")


def clean(keep_stack: bool = False) -> list[str]:
    """Restore interfaces a crashed run left changed, then remove the stack; returns notes."""
    notes = []
    running = stack.containers()
    if GENERATOR in running:
        loadgen.stop(running[GENERATOR])
    state = netif.StateFile()
    saved = state.load()
    if saved:
        problems = knobs.restore_state(saved)
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
        stack.down()
        notes.append("removed the stack's containers, networks and volumes")
    return notes

