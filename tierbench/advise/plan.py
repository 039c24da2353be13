"""The advisor's suite (experiments/advise/suite.yml), its experiments with the modes the
interfaces allow, and how the budget is split over the workloads.

Each workload of the suite is an experiment of an existing kind (web, net) written without its
modes; ``experiment`` adds the generated modes and validates it as an experiment file would be
(for a latency-at-load workload, rate_of_baseline_max, the rate the advisor measured, or no
rate: the closed loop that measures the baseline's maximum).
The budget (minutes of measuring, as a precision run counts them) is split in the suite's order
(``share``): a workload gets what remains in proportion to what its minimum costs against what
the workloads still to run minimum cost, so that what a workload resolved early and did not
spend goes to those after it; no less than its least worth running (MIN_BLOCKS blocks of its
modes) while that fits, and nothing (the workload is not run) when it does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import model_validator

from tierbench.config.errors import ConfigError
from tierbench.config.files import EXPERIMENTS_DIR, read_yaml
from tierbench.config.models import Model, choice, number, problem, text, validate, whole
from tierbench.kinds import registry
from tierbench.kinds.contract import Experiment
from tierbench.modes.model import Mode
from tierbench.placement.placer import Placer

SUITE = EXPERIMENTS_DIR / "advise" / "suite.yml"
ROLES = ("throughput", "latency", "tail", "cpu")
MIN_BLOCKS = 8  # blocks every mode runs: the least worth running. The rule's intervals are at
# Holm's levels (1 - 0.05/k over about ten comparisons): with 3 blocks (t with 2 df at
# 1 - 0.0025 is about 14) they decide nothing; with 8 (7 df, t about 4.5) a +10 % knob at a
# block sd of 0.04 is recommended in more than 80 % of runs (tests/test_advise_rule.py)
PAIR_MODES = 4  # the 2 x 2: baseline, each knob, both
CONFIRM_MODES = 2  # the confirmation: baseline and the merged configuration
TYPICAL_MODES = 12  # a workload's modes before its interfaces are read (veth's: a baseline,
# nine knobs, all-on, all-off)
MARGIN = 1.15  # a block may take this much longer than estimated
MAX_BLOCKS = 20
MAX_COLUMN = "tps"  # the summary column of the closed loop that gives the baseline's maximum


class Metric(Model):
    """A summary column the advice weighs, and which way is better."""

    column: Annotated[str, text(r"^[\w.-]+$", "tps")]
    label: str
    unit: str = ""
    better: Annotated[str, choice("higher", "lower")]


class Workload(Model):
    """One class of traffic: an experiment of an existing kind without its modes."""

    name: Annotated[str, text(r"^[a-z][a-z0-9-]*$", "small-static")]
    description: str
    primary: Annotated[str, choice("throughput", "latency", "tail")]
    metrics: dict[str, Metric]
    experiment: dict[str, Any]
    # latency at a load: every mode's open loop offers this fraction of the baseline's maximum
    # (a closed loop of the baseline with the same clients and windows, measured first), one
    # absolute rate for every mode of the workload (load.rate of its runs)
    rate_of_baseline_max: Annotated[float, number(0.01, 2)] | None = None

    @model_validator(mode="after")
    def _roles(self) -> Workload:
        unknown = sorted(set(self.metrics) - set(ROLES))
        if unknown:
            raise problem("unknown metric {key} (allowed: {allowed})", sub="metrics",
                          key=repr(unknown[0]), allowed=", ".join(ROLES))
        if self.primary not in self.metrics:
            raise problem("names {primary}, which metrics does not give", sub="primary",
                          primary=self.primary)
        for key in ("modes", "precision", "repetitions", "name"):
            if key in self.experiment:
                raise problem("the advisor sets {key}: remove it", sub="experiment", key=key)
        if self.rate_of_baseline_max is not None:
            load = self.experiment.get("load")
            if not isinstance(load, dict):
                raise problem("sets an open loop's load.rate: the experiment needs a load block",
                              sub="rate_of_baseline_max")
            for key in ("rate", "rate_of_max"):
                if key in load:
                    raise problem("the advisor sets load.rate from rate_of_baseline_max: remove "
                                  "load.{key}", sub="experiment", key=key)
        return self


class Suite(Model):
    """The suite file."""

    seed: Annotated[int, whole(0)] = 30
    settle_s: Annotated[float, number(0)] = 0.2
    cluster_settle_s: Annotated[float, number(0)] = 2
    workloads: list[Workload]


def load(path: Path = SUITE) -> Suite:
    """The suite file, validated (one sentence per problem)."""
    suite = validate(Suite, read_yaml(path, "suite file"), str(path))
    names = [w.name for w in suite.workloads]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: workloads: a name is listed twice")
    return suite


def chosen(suite: Suite, names: list[str] | None) -> list[Workload]:
    """The workloads asked for (all when none), in the suite's order."""
    if not names:
        return list(suite.workloads)
    known = [w.name for w in suite.workloads]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--workloads: no workload {unknown[0]!r} in the suite (workloads: "
                          f"{', '.join(known)})")
    return [w for w in suite.workloads if w.name in names]


WINDOW_KEYS = ("load", "net")  # the blocks of the suite's kinds (web, net) that hold measure_s


def with_window(suite: Suite, window_s: float | None) -> Suite:
    """The suite with every workload's measured window ``window_s`` seconds (None: as the
    suite file says, 10 s); one sentence below 2 s."""
    if window_s is None:
        return suite
    if not window_s >= 2:
        raise ConfigError(f"--window-s must be at least 2 seconds, got {window_s:g}")
    return suite.model_copy(update={"workloads": [windowed(w, window_s)
                                                  for w in suite.workloads]})


def windowed(w: Workload, window_s: float | None) -> Workload:
    """The workload with its measured window ``window_s`` seconds (None: as it is)."""
    if window_s is None:
        return w
    out = w.model_copy(deep=True)
    value = int(window_s) if float(window_s).is_integer() else window_s  # net's are whole
    for key in WINDOW_KEYS:
        if isinstance(out.experiment.get(key), dict):
            out.experiment[key] = {**out.experiment[key], "measure_s": value}
    return out


def window_of(w: Workload) -> float:
    """The workload's measured window as its experiment says (10 s when it says none)."""
    for key in WINDOW_KEYS:
        part = w.experiment.get(key)
        if isinstance(part, dict) and part.get("measure_s") is not None:
            return float(part["measure_s"])
    return 10.0


def experiment(suite: Suite, w: Workload, modes: list[Mode], settle_s: float,
               where: str = str(SUITE), placer: Placer | None = None,
               rate: float | None = None) -> Experiment:
    """The workload's experiment with these modes (validated as its file would be), to run on
    ``placer`` (None: this host); its metrics must be summary columns of its kind. A workload
    with rate_of_baseline_max offers ``rate`` (load.rate, requests/s) to every mode, or is the
    closed loop that measures the baseline's maximum when ``rate`` is None (no rate, no
    arrival)."""
    data = {**w.experiment, "name": f"advise-{w.name}", "description": w.description,
            "seed": suite.seed, "settle_s": settle_s, "modes": [m.name for m in modes]}
    if w.rate_of_baseline_max is not None:
        load = {k: v for k, v in w.experiment["load"].items() if k != "arrival"}
        data["load"] = load if rate is None else {**w.experiment["load"], "rate": rate}
    exp = registry.experiment_from(data, f"{where}: {w.name}", data["name"], lambda _: modes,
                                   placer)
    columns = [c.name for c in exp.impl.columns(exp)]
    for role, metric in w.metrics.items():
        if metric.column not in columns:
            raise ConfigError(f"{where}: {w.name}: metrics: {role}: {metric.column!r} is not a "
                              f"summary column of a {exp.kind} experiment")
    return exp


def with_target(exp: Experiment, w: Workload, half_width_pct: float,
                budget_s: float) -> Experiment:
    """The experiment with its precision target: the primary metric within the half-width,
    MIN_BLOCKS to MAX_BLOCKS blocks, within the budget."""
    return registry.with_precision(exp, half_width_pct=half_width_pct,
                                   metric=w.metrics[w.primary].column,
                                   min_repetitions=MIN_BLOCKS, max_repetitions=MAX_BLOCKS,
                                   budget_min=max(budget_s, 1.0) / 60)


@dataclass(frozen=True)
class Cost:
    """What a workload's runs cost at least, in seconds of measuring: ``minimum`` (MIN_BLOCKS
    blocks of its modes, of the 2 x 2 and of its confirmation), the weight of its share;
    ``least`` (MIN_BLOCKS blocks of its modes and of its confirmation), the least worth
    running; ``pair`` (MIN_BLOCKS blocks of the 2 x 2); ``confirm`` (MIN_BLOCKS blocks of the
    baseline and the merged configuration: kept back for the confirmation); ``maximum`` (the
    closed-loop point that measures the baseline's maximum first, in least and minimum; 0 for
    a workload without rate_of_baseline_max)."""

    minimum: float
    least: float
    pair: float
    confirm: float = 0.0
    maximum: float = 0.0


def max_points(w: Workload) -> int:
    """The points a workload measures before its knob run: one closed loop of the baseline
    for rate_of_baseline_max, else none."""
    return 0 if w.rate_of_baseline_max is None else 1


def cost(point_s: float, modes: int, before: int = 0) -> Cost:
    """A workload's costs from the time of one point, its number of modes and the points it
    measures before its knob run (max_points)."""
    knob, conf = point_s * MIN_BLOCKS * modes, point_s * MIN_BLOCKS * CONFIRM_MODES
    pair, first = point_s * MIN_BLOCKS * PAIR_MODES, point_s * before
    return Cost(knob + pair + conf + first, knob + conf + first, pair, conf, first)


def confirm_cost(point_s: float) -> float:
    """The least of one confirmation round on a workload, in seconds of measuring (MIN_BLOCKS
    blocks of the baseline and the configuration, with MARGIN)."""
    return point_s * MIN_BLOCKS * CONFIRM_MODES * MARGIN


def share(remaining_s: float, costs: list[Cost]) -> float | None:
    """The budget of the first of ``costs`` (the workloads still to run, in order): its part of
    what remains in proportion to the minimum costs of all of them, raised to its least worth
    running (MIN_BLOCKS blocks of its modes and its confirmation, with MARGIN) while what
    remains holds that; None when it does not (the workload is not run). Called again before
    each workload: what one did not spend goes to those after it. (Sharing among only the
    workloads whose least fits gave the first all of a small budget on its first,
    uncalibrated estimate.)"""
    total = sum(c.minimum for c in costs)
    if not costs or total <= 0:
        return None
    least = costs[0].least * MARGIN
    if remaining_s < least:
        return None
    return max(least, remaining_s * costs[0].minimum / total)


def split(share_s: float, c: Cost) -> tuple[float, float, float]:
    """A workload's share over its knob run (with the baseline's maximum measured first, when
    it has one), its 2 x 2 and its confirmation: the confirmation's least is kept back first
    (for the confirmation after every workload); the 2 x 2's when the knob run still gets its
    own; otherwise the knob run gets the rest (and the 2 x 2 what it leaves, if that is
    enough)."""
    conf = c.confirm * MARGIN
    rest, keep = share_s - conf, c.pair * MARGIN
    if rest - keep >= (c.least - c.confirm) * MARGIN:
        return rest - keep, keep, conf
    return rest, 0.0, conf


def plan_lines(workloads: list[Workload], budget_min: float, point_s: dict[str, float],
               modes: int) -> list[str]:
    """What the budget buys, before anything runs: per workload its estimated least cost, and
    whether the budget holds the intervals of all of them."""
    lines = [f"budget {budget_min:g} min of measuring over {len(workloads)} workload(s); "
             f"about {modes} modes each on these interfaces (a baseline, one per knob, all-on, "
             "all-off), every mode once per block"]
    costs = [cost(point_s[w.name], modes, max_points(w)) for w in workloads]
    for w, c in zip(workloads, costs):
        first = (f" (and first a closed loop of the baseline for its maximum: offered "
                 f"{w.rate_of_baseline_max:g} of it)" if w.rate_of_baseline_max else "")
        lines.append(f"  {w.name:<18} ~{point_s[w.name]:.1f} s a point; {MIN_BLOCKS} blocks "
                     f"{c.least / 60:.1f} min with its confirmation, with the 2 x 2 "
                     f"{c.minimum / 60:.1f} min{first}")
    need = sum(c.least for c in costs) * MARGIN / 60
    if need > budget_min:
        lines.append(f"the budget holds less than {MIN_BLOCKS} blocks of every workload (about "
                     f"{need:.1f} min): a workload it cannot hold at these defaults is measured "
                     "at the design a pilot of its baseline chooses (the window, and the knobs "
                     "it can decide; docs/advise.md, \"The pilot\"), and workloads at the end "
                     "of the list may not run; raise --budget-min or choose fewer --workloads")
    return lines
