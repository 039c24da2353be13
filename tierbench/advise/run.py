"""`tierbench advise`: discover the knobs, measure each workload with them, write the advice.

For each workload of the suite, in order (results/advise/<run-id>/advise.json records it all):

1. its deployment is brought up through its kind (as a run would) and every endpoint that
   carries the tiers' traffic is read (knobs.read_endpoint); the knobs every endpoint can
   change are planned;
2. each knob's mode is tried once on the real interfaces (applied, verified, restored, as a
   point does; once per set of drivers): a setting the driver refuses is reported as such,
   and all-on and all-off are made of the knobs that held;
3. a latency-at-load workload (rate_of_baseline_max) first measures the baseline's maximum
   (one closed-loop point) and offers every mode of its runs (knobs, 2 x 2, confirmation)
   that fraction of it, one absolute rate (advise.json: the workload's "rate");
   one precision run measures the baseline (nothing changed), every knob's mode, all-on and
   all-off, once per block, until every comparison is resolved or the workload's share of the
   budget is spent (plan.share); then, when its share still holds the least of it, a 2 x 2
   run of the two changes the advice recommends (analysis.advise.candidates);
4. the workloads' verdicts are merged into one configuration (merge: weighted votes) and
   confirmed against the current one on every measured workload (confirm: a paired run per
   workload and round; a change that makes one worse beyond the threshold is dropped), within
   the part of the budget kept back for it at the start (plan.confirm_cost);
5. advice.csv, advice.html, config.json and the persistent forms are written.

Every interface is restored after every point by the runner, and after every trial here.
With ``--from MODE`` (a stated starting configuration: interface settings only) discovery reads
the interfaces with that mode applied (``started``), and every mode of the session, the
baseline's included, is that mode with its own settings over it (knobs.over: a mode of parts).
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from tierbench import runner
from tierbench.advise import confirm, forms, knobs, merge, pilot, plan
from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.files import fresh_run_dir, results_root
from tierbench.interfaces import netif
from tierbench.kinds import registry
from tierbench.kinds.contract import Deployment, Experiment, log
from tierbench.kinds.web import maxrate
from tierbench.modes import apply
from tierbench.modes.model import Mode, load_mode
from tierbench.placement import nodes
from tierbench.placement.cluster import ClusterPlacer
from tierbench.placement.local import LocalPlacer
from tierbench.placement.placer import Placer

# A point's wall time over its kind's estimate before one was measured here: the kind's own
# estimate (0.6 to 0.8 of it was measured for the suite's short points on the shared 2-core
# development host; a lower prior left the first workload a share too small for its third
# block); learnt from every run's measured points after that.
PRIOR_RATIO = 1.0


def now() -> str:
    """The time as the record writes it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_dir() -> Path:
    """A fresh results/advise/<run-id>/."""
    return fresh_run_dir(results_root() / "advise")


def save(folder: Path, record: dict[str, Any]) -> None:
    """advise.json, written atomically."""
    runner.write_json(folder / "advise.json", record)


class Advisor:
    """One advise run: the suite's workloads one after another within one budget."""

    def __init__(self, workloads: list[str] | None, budget_min: float,
                 half_width_pct: float = 5.0, suite_path: Path = plan.SUITE,
                 placer: Placer | None = None, weights: str | None = None,
                 window_s: float | None = None, profile: str | None = None,
                 start: str | None = None) -> None:
        if not budget_min > 0:
            raise TierbenchError(f"--budget-min must be above 0, got {budget_min:g}")
        self.suite = plan.with_window(plan.load(suite_path), window_s)
        self.suite_path = suite_path
        self.workloads = plan.chosen(self.suite, workloads)
        self.weights = merge.parse_weights(weights, [w.name for w in self.workloads])
        self.reserve_s = 0.0  # kept back for the confirmation
        self.budget_s = budget_min * 60
        self.half_width_pct = half_width_pct
        self.remaining_s = self.budget_s
        self.ratios: dict[str, float] = {}  # kind -> measured / estimated point time
        self.trials: dict[str, str | None] = {}  # (drivers, mode settings) -> refusal
        self.modes_seen = 0  # the modes of the last workload discovered (for estimates)
        self.rates: dict[str, float] = {}  # workload -> the rate its modes are offered
        self.windows: dict[str, float] = {}  # workload -> the window its design chose (pilot)
        self.folder: Path | None = None
        self.record: dict[str, Any] = {}
        self.where = placer or LocalPlacer()  # where the workloads run
        self.profile = profile  # --profile: every run's points profiled (what moved)
        self.start = starting(start)  # --from: every mode over it, the baseline included

    # -- estimates
    def ratio(self, kind: str) -> float:
        """Measured over estimated point time for a kind (another kind's, or the prior, until
        one of its own was measured)."""
        if kind in self.ratios:
            return self.ratios[kind]
        return sum(self.ratios.values()) / len(self.ratios) if self.ratios else PRIOR_RATIO

    def point_s(self, exp: Experiment) -> float:
        """The expected wall time of one point of an experiment on this host."""
        return exp.impl.point_seconds(exp) * self.ratio(exp.kind)

    def learn(self, exp: Experiment, times: list[float]) -> None:
        """Calibrate the kind's ratio from the point times a run measured."""
        if times:
            est = exp.impl.point_seconds(exp)
            self.ratios[exp.kind] = (sum(times) / len(times)) / est

    def settle_s(self) -> float:
        """How long a point waits after its mode is applied: a cluster's NICs may reset."""
        cluster = self.where.cluster is not None
        return self.suite.cluster_settle_s if cluster else self.suite.settle_s

    # -- the run
    def run(self) -> Path:
        """Every workload, then the advice; returns the results folder."""
        self.folder = new_dir()
        self.record = {
            "started": now(), "finished": None, "status": "running",
            "budget_min": self.budget_s / 60, "half_width_pct": self.half_width_pct,
            "profile": self.profile,
            "from": None if self.start is None else {
                "mode": self.start.name, "description": self.start.description,
                "nic": knobs.nic_block(self.start)},
            "suite": str(self.suite_path), "placement": self.where.name,
            "cluster": self.where.cluster.path if self.where.cluster else None,
            "catalogue": [{"knob": k, "label": knobs.label(k)} for k in knobs.KNOBS],
            "workloads": [self.entry(w) for w in self.workloads],
            "confirmation": {"status": "planned", "weights": self.weights}}
        save(self.folder, self.record)
        log(f"tierbench: advise: {len(self.workloads)} workload(s), budget "
            f"{self.budget_s / 60:g} min of measuring; record in {self.folder}")
        try:
            with runner.signals_raise():
                for n, (w, entry) in enumerate(zip(self.workloads, self.record["workloads"])):
                    log(f"tierbench: advise [{n + 1}/{len(self.workloads)}]: {w.name}")
                    self.workload(w, entry, self.workloads[n + 1:])
                    save(self.folder, self.record)
                self.remaining_s += self.reserve_s
                self.reserve_s = 0.0
                self.confirmation()
            self.record["status"] = "complete"
        except runner.RunInterrupted as exc:
            self.record["status"] = f"interrupted by {exc}"
            raise
        finally:
            self.record["finished"] = now()
            self.record["spent_s"] = round(self.budget_s - self.remaining_s - self.reserve_s, 1)
            save(self.folder, self.record)
            write_advice(self.folder)
        return self.folder

    def exp_of(self, w: plan.Workload, modes: list[Mode], settle_s: float) -> Experiment:
        """A workload's experiment with these modes, at the rate measured for it (a workload
        with rate_of_baseline_max before its maximum is known: the closed loop)."""
        return plan.experiment(self.suite, plan.windowed(w, self.windows.get(w.name)),
                               self.over(modes), settle_s, str(self.suite_path), self.where,
                               self.rates.get(w.name))

    def over(self, modes: list[Mode]) -> list[Mode]:
        """The modes over the stated starting configuration (--from), or as they are."""
        return [knobs.over(self.start, m) for m in modes]

    def baseline_exp(self, w: plan.Workload) -> Experiment:
        """A workload's experiment with the baseline alone (for its estimates)."""
        return self.exp_of(w, [knobs.baseline()], self.settle_s())

    def confirmation(self) -> None:
        """Merge the workloads' verdicts and confirm the configuration (confirm.settle)."""
        from analysis import advise as advice

        assert self.folder is not None
        votes = merge.votes(self.record, advice.rows(self.record))
        merged = merge.merge(votes, self.weights)
        conf = self.record["confirmation"]
        conf.update(merged=merged.changes, votes=[vars(v) for v in votes], scores=[
            {"knob": k, "state": s, "score": v, "why": merged.why[(k, s)]}
            for (k, s), v in merged.scores.items()])
        measured = [(w, e) for w, e in zip(self.workloads, self.record["workloads"])
                    if e.get("status") == "complete"]
        log(f"tierbench: advise: merged configuration: {', '.join(merged.names()) or 'none'}")
        conf.update(confirm.settle(merged.changes, votes,
                                   lambda changes, n: self.confirm_round(measured, changes, n)))
        unmeasured = [e["name"] for e in self.record["workloads"]
                      if e.get("status") != "complete"]
        if unmeasured and conf.get("is_confirmed"):
            conf["status"] += f"; not measured on {', '.join(unmeasured)} (not run)"
        log(f"tierbench: advise: {conf['status']}")
        save(self.folder, self.record)

    def confirm_round(self, measured: list[tuple[plan.Workload, dict[str, Any]]],
                      changes: dict[str, str], n: int) -> confirm.Outcomes | str:
        """One round of the confirmation: per measured workload a run of the baseline and the
        configuration's changes its interfaces take; or why the budget cannot hold it."""
        from analysis import advise as advice

        todo = [(w, e, merge.settings(e, changes)) for w, e in measured]
        todo = [t for t in todo if t[2][2]]
        if not todo:
            return "no measured workload's interfaces take these changes"
        least = [plan.confirm_cost(self.point_s(self.baseline_exp(w))) for w, _, _ in todo]
        if self.remaining_s < sum(least):
            return (f"{self.remaining_s / 60:.1f} min of the budget were left, round {n} "
                    f"needs about {sum(least) / 60:.1f} min ({plan.MIN_BLOCKS} blocks of 2 "
                    f"modes on {len(todo)} workload(s))")
        # one mode per workload: of one part per side where the sides need different settings
        modes = [knobs.side_mode(confirm.MODE, "the merged configuration: " + ", ".join(taken),
                                 merge.by_side(e, changes)) for _, e, (_, _, taken) in todo]
        out: confirm.Outcomes = {}
        for i, ((w, entry, (_, _, taken)), mode) in enumerate(zip(todo, modes)):
            exp = self.exp_of(w, [knobs.baseline(), mode], self.settle_s())
            exp.name = f"advise-{w.name}-confirm{n}"
            share = max(least[i], self.remaining_s * least[i] / sum(least[i:]))
            run = self.run_one(plan.with_target(exp, w, self.half_width_pct, share))
            entry["runs"][f"confirm{n}"] = str(run.dir) if run.dir else None
            if run.dir is None:
                continue
            values, spread = advice.run_values(run.dir)
            out[w.name] = {**confirm.judge(entry, values, spread), "taken": taken,
                           "run": str(run.dir)}
        return out

    @staticmethod
    def entry(w: plan.Workload) -> dict[str, Any]:
        """A workload's part of the record, before it runs."""
        return {"name": w.name, "description": w.description, "kind": w.experiment.get("kind"),
                "primary": w.primary,
                "metrics": {role: m.model_dump() for role, m in w.metrics.items()},
                "status": "planned", "endpoints": [], "knobs": [], "all": {}, "runs": {},
                "pair": None, "budget": {}}

    def workload(self, w: plan.Workload, entry: dict[str, Any],
                 later: list[plan.Workload]) -> None:
        """Discover, try, measure one workload (its outcome written into ``entry``)."""
        assert self.folder is not None
        settle = self.settle_s()
        try:
            base = self.exp_of(w, [knobs.baseline()], settle)
            guess = plan.cost(self.point_s(base), self.modes_seen, plan.max_points(w))
            if self.modes_seen and plan.share(self.remaining_s, [guess]) is None and \
                    self.remaining_s < self.pilot_least(w, settle):
                # not worth a bring-up: neither the defaults (the modes of the last workload's
                # interfaces, estimated) nor a pilot and one knob fit
                entry["status"] = self.not_run(self.pilot_least(w, settle))
                log(f"tierbench: advise: {w.name}: {entry['status']}")
                return
            t0 = time.monotonic()
            dep = discovery_deployment(base, self.folder / "discovery" / w.name)
            with self.started(base, dep, entry):
                snaps = [{**knobs.read_endpoint(ep, container_of(dep, ep)),
                          "side": side(dep, ep)} for ep in dep.watched()]
            entry["endpoints"] = [endpoint_view(s) for s in snaps]
            plans = knobs.plan(snaps)
            self.try_knobs(plans, dep, snaps)
            modes, ends = knobs.modes(plans)
            refused = self.try_modes([m for m in modes if m.name.startswith("all-")], dep, snaps)
            modes = [m for m in modes if m.name not in refused]
            entry["all"] = {s: (None if ends[s] in refused else ends[s]) for s in ends}
            entry["all_refused"] = refused
            entry["knobs"] = [p.as_dict() for p in plans]
            entry["discovery_s"] = round(time.monotonic() - t0, 1)
            save(self.folder, self.record)
            if len(modes) < 2:
                entry["status"] = "nothing to measure: no knob the interfaces can change"
                return
            exp = self.exp_of(w, modes, settle)
            self.modes_seen = len(modes)
            self.measure(w, entry, exp, plans, later)
        except runner.RunInterrupted:
            entry["status"] = "interrupted"
            raise
        except TierbenchError as exc:
            entry["status"] = f"failed: {exc}"
            log(f"tierbench: advise: {w.name}: {exc}")
            if "could not be restored" in str(exc):
                raise

    def measure(self, w: plan.Workload, entry: dict[str, Any], exp: Experiment,
                plans: list[knobs.Plan], later: list[plan.Workload]) -> None:
        """The knob run within the workload's share (after the baseline's maximum, for a
        workload with rate_of_baseline_max), then the 2 x 2 when the share holds it."""
        point_s = {w.name: self.point_s(exp)}
        for lw in later:
            point_s[lw.name] = self.point_s(self.exp_of(lw, [knobs.baseline()], exp.settle_s))
        if not self.ratios:  # the first workload: what the budget buys, once the modes are known
            for line in plan.plan_lines([w, *later], self.remaining_s / 60, point_s,
                                        len(exp.modes)):
                log(f"tierbench: advise: {line}")
        costs = [plan.cost(point_s[x.name], len(exp.modes), plan.max_points(x))
                 for x in [w, *later]]
        mine = costs[0]
        share = plan.share(self.remaining_s, costs)
        entry["budget"] = {"point_s": round(point_s[w.name], 2), "share_s": share,
                           "remaining_s": round(self.remaining_s, 1)}
        first = 0.0
        if share is None:  # the defaults do not fit: a pilot, and the design it buys
            picked = self.design(w, entry, exp)
            if picked is None:
                return
            exp, mine, share = picked
            entry["budget"]["share_s"] = round(share, 1)
        knob_s, pair_s, conf_s = plan.split(share, mine)
        self.remaining_s -= conf_s  # kept back for the confirmation after every workload
        self.reserve_s += conf_s
        if w.rate_of_baseline_max is not None and w.name not in self.rates:
            first = self.baseline_max(w, entry)
            knob_s -= first
            exp = self.exp_of(w, exp.modes, exp.settle_s)
        run = self.run_one(plan.with_target(exp, w, self.half_width_pct, knob_s))
        entry["runs"]["knobs"] = str(run.dir) if run.dir else None
        spent = spent_s(run)
        entry["budget"].update(knobs_s=round(knob_s, 1), knobs_spent_s=spent,
                               confirm_s=round(conf_s, 1))
        entry["status"] = "complete"
        left = share - conf_s - first - spent
        pair = self.pair_for(w, entry, plans, run)
        if pair is None:
            return
        if left < mine.pair * plan.MARGIN:
            entry["pair"] = {**pair, "skipped": f"the workload's share had {left / 60:.1f} min "
                             f"left, {plan.MIN_BLOCKS} blocks of the 2 x 2 need about "
                             f"{mine.pair * plan.MARGIN / 60:.1f} min"}
            return
        a, b = (next(p for p in plans if p.knob == k) for k in (pair["a"], pair["b"]))
        both = knobs.pair_mode(a, b)  # of two parts when a and b change different sides
        modes = [knobs.baseline(), *(m for m in exp.modes if m.name in (a.mode, b.mode)), both]
        pexp = self.exp_of(w, modes, exp.settle_s)
        pexp.name = f"advise-{w.name}-pair"
        prun = self.run_one(plan.with_target(pexp, w, self.half_width_pct, left))
        entry["runs"]["pair"] = str(prun.dir) if prun.dir else None
        entry["pair"] = {**pair, "mode": modes[-1].name}
        entry["budget"]["pair_spent_s"] = spent_s(prun)

    def design(self, w: plan.Workload, entry: dict[str, Any],
               exp: Experiment) -> tuple[Experiment, plan.Cost, float] | None:
        """When what remains cannot hold the workload at the defaults: the workload gets what
        remains; the baseline's maximum first (a latency-at-load workload), then the pilot,
        then the design it buys (pilot.design: the window and the knobs measured, the rest
        named as not measured within the budget). Returns the experiment of the design, its
        cost and the share left for it; None (the status says why, in one sentence) when
        nothing fits, before anything is measured when even the pilot and one knob do not."""
        settle = exp.settle_s

        def point_s(window_s: float) -> float:
            return self.window_point_s(w, window_s, settle)

        order = pilot.ranked(entry["knobs"])
        ends = sum(m.name.startswith("all-") for m in exp.modes)
        least = self.pilot_least(w, settle)
        entry["design"] = {"defaults_s": round(plan.cost(point_s(plan.window_of(w)),
                                                         len(exp.modes)).least * plan.MARGIN),
                           "budget_s": round(self.remaining_s, 1)}
        if self.remaining_s < least:
            entry["status"] = self.not_run(least)
            log(f"tierbench: advise: {w.name}: {entry['status']}")
            return None
        log(f"tierbench: advise: {w.name}: at the defaults ({plan.MIN_BLOCKS} blocks of its "
            f"{len(exp.modes)} modes at {plan.window_of(w):g}-s windows) it needs about "
            f"{entry['design']['defaults_s'] / 60:.1f} min, {self.remaining_s / 60:.1f} are "
            "left: a pilot of the baseline first, to choose the window and the knobs")
        if w.rate_of_baseline_max is not None:
            self.baseline_max(w, entry)
        model = self.pilot(w, entry)
        d = pilot.design(model, point_s, order, ends, self.remaining_s, plan.window_of(w))
        entry["design"].update(d.as_dict(), fit={"a": model.a, "b": model.b, "df": model.df,
                                                 "source": model.source})
        for line in d.why:
            log(f"tierbench: advise: {w.name}: {line}")
        if not d.fits:
            entry["status"] = d.why[0]
            return None
        self.windows[w.name] = d.window_s
        reason = next((x for x in d.why if x.startswith("not measured within")), "")
        for k in entry["knobs"]:
            if k["knob"] in d.left_out:
                k["left_out"] = reason
        kept = {knobs.BASELINE, *(k["mode"] for k in entry["knobs"] if k["knob"] in d.knobs)}
        modes = [m for m in exp.modes if m.name in kept or
                 (d.ends == 2 and m.name.startswith("all-"))]
        exp = self.exp_of(w, modes, settle)
        return exp, plan.cost(self.point_s(exp), len(modes)), self.remaining_s

    def window_point_s(self, w: plan.Workload, window_s: float, settle_s: float) -> float:
        """A point's expected time for the workload at a window."""
        one = plan.experiment(self.suite, plan.windowed(w, window_s), [knobs.baseline()],
                              settle_s, str(self.suite_path), self.where, self.rates.get(w.name))
        return self.point_s(one)

    def pilot_least(self, w: plan.Workload, settle_s: float) -> float:
        """The least a workload off its defaults needs: its pilot, and the baseline and one knob
        at the shortest window with the confirmation (and its baseline's maximum)."""
        def point_s(window_s: float) -> float:
            return self.window_point_s(w, window_s, settle_s)

        return pilot.pilot_cost_s(point_s) + pilot.least_s(point_s(min(pilot.WINDOWS)), 2,
                                                           plan.max_points(w))

    def pilot(self, w: plan.Workload, entry: dict[str, Any]) -> pilot.Fit:
        """The pilot: pilot.PILOT_BLOCKS blocks of the baseline twice at each pilot window
        (runs advise-<workload>-pilot, recorded as runs pilot<window>); the fitted model."""
        from analysis import advise as advice

        column = w.metrics[w.primary].column
        pairs: dict[float, list[float]] = {}
        again = knobs.make_mode(pilot.PILOT_MODE, "the baseline again (the pilot): nothing is "
                                "changed", {})
        for window_s in pilot.PILOT_WINDOWS:
            self.windows[w.name] = window_s
            exp = self.exp_of(w, [knobs.baseline(), again], self.settle_s())
            exp.name = f"advise-{w.name}-pilot"
            run = self.run_one(registry.with_precision(
                exp, half_width_pct=self.half_width_pct, metric=column,
                min_repetitions=pilot.PILOT_BLOCKS, max_repetitions=pilot.PILOT_BLOCKS))
            entry["runs"][f"pilot{window_s:g}"] = str(run.dir) if run.dir else None
            entry["budget"]["pilot_spent_s"] = round(
                entry["budget"].get("pilot_spent_s", 0.0) + spent_s(run), 2)
            values = advice.run_values(run.dir)[0] if run.dir else {}
            pairs[window_s] = pilot.log_ratios(values, knobs.BASELINE, pilot.PILOT_MODE, column)
        self.windows.pop(w.name, None)
        return pilot.fit(pairs)

    def baseline_max(self, w: plan.Workload, entry: dict[str, Any]) -> float:
        """Measure the baseline's maximum (one point of its closed loop: the same engine,
        clients and windows without a rate) and set the workload's rate to its fraction
        (kinds.web.maxrate.offered); recorded in ``entry`` ("rate", runs "maximum", and the
        description the advice shows). Returns the seconds it measured (from the budget)."""
        fraction = w.rate_of_baseline_max
        assert fraction is not None
        exp = plan.experiment(self.suite, plan.windowed(w, self.windows.get(w.name)),
                              self.over([knobs.baseline()]), self.settle_s(),
                              str(self.suite_path), self.where)  # no rate: the closed loop
        exp.name = f"advise-{w.name}-maximum"
        log(f"tierbench: advise: {w.name}: the baseline's maximum (a closed loop), for its "
            f"rate ({fraction:g} of it)")
        run = self.run_one(exp)
        spent = sum(run.point_times)
        self.remaining_s -= spent
        entry["runs"]["maximum"] = str(run.dir) if run.dir else None
        entry["budget"]["maximum_spent_s"] = round(spent, 2)
        row = run.rows[-1] if run.rows else {}
        tps = float(row.get(plan.MAX_COLUMN) or 0.0)
        if row.get("error") or not tps > 0:
            raise TierbenchError(f"the closed loop that measures the baseline's maximum gave no "
                                 f"{plan.MAX_COLUMN} ({row.get('error') or 'no request served'})")
        rate = maxrate.offered(fraction, {"tps": tps})
        self.rates[w.name] = rate
        entry["rate"] = {"rate_of_baseline_max": fraction, "baseline_max": round(tps, 3),
                         "column": plan.MAX_COLUMN, "rate": rate, "run": entry["runs"]["maximum"]}
        entry["description"] = (f"{w.description}; offered {rate:,.0f} requests/s to every "
                                f"mode: {fraction:g} of the baseline's maximum, {tps:,.0f} "
                                "requests/s, measured first by a closed loop of the same clients")
        log(f"tierbench: advise: {w.name}: the baseline's maximum {tps:,.1f} requests/s; every "
            f"mode is offered {rate:,.1f} requests/s")
        return spent

    def not_run(self, least_s: float) -> str:
        """Why a workload is not run: the budget left and the least a run of it needs off its
        defaults (``least_s``: pilot_least, its pilot and one knob at the shortest window with
        the confirmation; a workload that fits at the defaults is never refused)."""
        return (f"not run: {self.remaining_s / 60:.1f} min of the budget were left; its pilot "
                f"and one knob at {min(pilot.WINDOWS):g}-s windows need about "
                f"{least_s / 60:.1f} min with its confirmation")

    def run_one(self, exp: Experiment) -> runner.Run:
        """One precision run through the runner (its report written); the budget and the
        point time learnt from it. With --profile, its points are profiled too."""
        exp.profile = self.profile
        r = runner.Run(exp)
        try:
            r.execute()
        finally:
            self.remaining_s -= spent_s(r)
            self.learn(exp, r.point_times)
            if r.dir is not None and r.rows:
                runner.write_report(r.dir)
        return r

    def pair_for(self, w: plan.Workload, entry: dict[str, Any], plans: list[knobs.Plan],
                 run: runner.Run) -> dict[str, Any] | None:
        """The two changes the advice recommends (largest primary effect first), for the
        2 x 2 (analysis.advise.candidates: the rule, Holm and the side effects applied)."""
        from analysis import advise as advice  # pandas: loaded when a run needs it

        if run.dir is None:
            return None
        picked = advice.candidates(entry, run.dir)
        if len(picked) < 2:
            entry["pair"] = {"skipped": f"{len(picked)} change(s) recommended: a 2 x 2 needs "
                                        "two"}
            return None
        return {"a": picked[0], "b": picked[1], "metric": w.metrics[w.primary].column}

    # -- trials
    def try_knobs(self, plans: list[knobs.Plan], dep: Deployment, snaps: list[dict]) -> None:
        """Each planned knob's mode applied once, verified and restored: a knob whose trial
        fails (the driver refuses it, a read-only sysfs, a path that does not carry its frames)
        is no longer planned (its sentence says why)."""
        for p in plans:
            if not p.changeable:
                continue
            mode = knobs.make_mode(f"{p.knob}-{p.target}", f"trial of {p.knob}",
                                   p.setting(p.target), p.side)
            problem = self.trial(mode, dep, snaps)
            if problem:
                p.changeable, p.why = False, f"its trial failed: {problem}"

    def try_modes(self, modes: list[Mode], dep: Deployment, snaps: list[dict]) -> dict[str, str]:
        """Trials of several modes; the refused ones with why."""
        out = {}
        for m in modes:
            problem = self.trial(m, dep, snaps)
            if problem:
                out[m.name] = problem
        return out

    def started(self, exp: Experiment, dep: Deployment,
                entry: dict[str, Any]) -> AbstractContextManager[None]:
        """The stated starting configuration (--from) applied to the deployment's interfaces,
        verified, under the rollback guard, for the body of the `with` (discovery reads the
        interfaces as the modes will start from them) and restored after; nothing without one.
        The runner's checks first (a mode a driver refuses, a management interface)."""
        if self.start is None:
            return nullcontext()
        mode = runner.bound(knobs.over(self.start, knobs.baseline()), dep)
        runner.check_modes(dataclasses.replace(exp, modes=[mode]), dep)
        record: dict[str, Any] = {"point": f"the discovery under {self.start.name}"}
        entry["from_applied"] = record
        return apply.mode_applied(mode, runner.mode_endpoints(mode, dep), dep.watched(),
                                  netif.StateFile(), record, self.settle_s(), lambda: None,
                                  dep.cpu_containers(mode), runner.rollback_timeout(exp))

    def trial(self, mode: Mode, dep: Deployment, snaps: list[dict]) -> str | None:
        """Apply a mode (over the starting configuration, --from) to its endpoints, verify,
        restore (once per drivers and settings); the refusal, or None. Interfaces that cannot
        be restored end the advisor."""
        key = json.dumps([sorted({(s.get("node"), s.get("driver")) for s in snaps}),
                          settings_of(mode.as_dict())], sort_keys=True, default=str)
        if key in self.trials:
            return self.trials[key]
        record: dict[str, Any] = {"point": f"the trial of {mode.name}"}
        mode = runner.bound(knobs.over(self.start, mode), dep)
        eps = runner.mode_endpoints(mode, dep)
        try:
            with apply.mode_applied(mode, eps, dep.watched(), netif.StateFile(), record, 0.0,
                                    lambda: None, dep.cpu_containers(mode)):
                if mode.nic.mtu is not None:
                    path_check(mode.nic.mtu, eps, self.where)
            result = None
        except netif.NetifError as exc:
            if record.get("restored") is False:
                raise
            result = str(exc)
        log(f"tierbench: advise: trial of {mode.name}: " + (f"refused ({result})" if result
                                                            else "applied and restored"))
        self.trials[key] = result
        self.record.setdefault("trials", []).append({
            "mode": mode.name, "endpoints": record.get("endpoints"), "refused": result,
            "verified": record.get("mode_verified"), "restored": record.get("restored")})
        return result


def path_check(mtu: int, eps: list[netif.Endpoint], where: Placer) -> None:
    """On a cluster, that frames of ``mtu`` bytes pass between the endpoints' nodes as they
    are (a switch, or a peer the advisor does not set, may carry less): a ping that must not
    fragment, from each node to the next one's interface; NetifError when one does not pass
    or cannot be sent. On one host every end of every veth is an endpoint: nothing to check."""
    cluster = where.cluster
    names = list(dict.fromkeys(ep.node for ep in eps if ep.node))
    if cluster is None or len(names) < 2:
        return
    for a, b in zip(names, names[1:] + names[:1]):
        target = cluster.node(b).interface().ip
        done = nodes.run_on_node(cluster.node(a), f"ping -M do -s {mtu - 28} -c 2 -W 2 "
                                 f"{target}", timeout=30, check=False)
        why = " ".join((done.stderr or done.stdout).split())[-200:] or f"exit {done.returncode}"
        if done.returncode == 127 or "not found" in why:
            raise netif.NetifError(f"cannot check that {mtu}-byte frames pass from {a} to {b}: "
                                   f"ping is not installed on {a} (iputils-ping)")
        if done.returncode != 0:
            raise netif.NetifError(f"{mtu}-byte frames did not pass from {a} to {b} "
                                   f"({target}) with the MTU set on both: {why}")


def starting(name: str | None) -> Mode | None:
    """The mode --from names, loaded (a mode of modes/ or a file), when it sets interface
    settings only; ConfigError in one sentence otherwise."""
    if name is None:
        return None
    mode = load_mode(name)
    if mode.sets_nothing:
        raise ConfigError(f"--from {name}: mode {mode.name} sets nothing: the advice would "
                          "start from the interfaces as they are (leave --from out)")
    try:
        knobs.over(mode, knobs.baseline())  # a mode of parts takes interface settings only
    except ConfigError as exc:
        raise ConfigError(f"--from {name}: {exc}") from None
    return mode


def settings_of(mode: dict[str, Any]) -> dict[str, Any]:
    """A mode's record (Mode.as_dict) without its names: what it sets and where."""
    return {k: ([settings_of(p) for p in v] if k == "parts" else v) for k, v in mode.items()
            if k not in ("name", "description", "source")}


def spent_s(run: runner.Run) -> float:
    """Seconds of measuring a precision run spent (its manifest's account)."""
    record = run.manifest.get("precision") if isinstance(run.manifest, dict) else None
    return float(record.get("spent_s", 0.0)) if isinstance(record, dict) else 0.0


def discovery_deployment(exp: Experiment, scratch: Path) -> Deployment:
    """The experiment's deployment, brought up through its kind as a run brings it up (the
    same checks first), for reading its interfaces."""
    kind = exp.impl
    points = runner.points_of(exp)
    runner.check_space(exp)
    kind.preflight(exp, points)
    where = exp.placer
    if where.cluster is not None:
        runner.cluster_lines(exp)
        cast(ClusterPlacer, where).check(*runner.node_needs(exp, kind.needs(exp, points)))
    scratch.mkdir(parents=True, exist_ok=True)
    prepared = kind.prepare(exp, scratch)
    return kind.deploy(exp, kind.deployment_key(exp, points[0]), prepared, None, points[0])


def container_of(dep: Deployment, ep: netif.Endpoint) -> str | None:
    """The name of the container whose namespace holds an endpoint (None: the host's or a
    node's interface)."""
    if ep.netns_pid is None:
        return None
    for tier in dep.tiers.values():
        for c in tier.containers:
            if getattr(c, "pid", None) == ep.netns_pid and getattr(c, "node", None) is None:
                return str(c.name)
    return None


def side(dep: Deployment, ep: netif.Endpoint) -> str:
    """The side an endpoint is on: server or client when every tier it carries has that role,
    else both (a cluster node's NIC that carries a server and the load generator)."""
    roles = {t.role for t in dep.tiers.values() if ep in t.endpoints}
    return roles.pop() if len(roles) == 1 and roles <= set(knobs.SIDES) else knobs.BOTH


def endpoint_view(snap: dict) -> dict[str, Any]:
    """What the advice shows of an endpoint."""
    return {k: snap.get(k) for k in ("label", "tier", "side", "ifname", "driver", "node",
                                     "container", "mtu", "min_mtu", "max_mtu", "sizes",
                                     "cpu_mask")}


def write_advice(folder: Path) -> tuple[Path, Path]:
    """advice.csv and advice.html of an advise folder (analysis.advise), the persistent
    forms of the recommended changes (forms.persist: persist/<workload>/), config.json
    (merge.write_config) and the forms of the confirmed configuration (persist/confirmed/)."""
    from analysis import advise as advice

    out = advice.write_advice(folder)
    forms.persist(folder)
    record = json.loads((folder / "advise.json").read_text(encoding="utf-8"))
    merge.write_config(folder, record)
    forms.persist_confirmed(folder, record)
    return out
