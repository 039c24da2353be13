"""A workload kind for tests, with no Docker and nothing to measure: each point draws its value
from a known effect and known noise, with a host that drifts over time, so that what the runner
and the report state about precision can be checked against the truth.

The value of a point (column ``tps``) is ``level x (1 + effect) x exp(noise)``: ``effect`` is
the condition's true effect for the treatment mode (0 for the baseline), ``noise`` a normal
draw of sd ``noise`` (on the log scale) seeded by the point, and ``level`` falls linearly by
``drift`` (a fraction) over ``drift_points`` points, as a shared host slowing down would.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any

import yaml

from tierbench.config.models import Model, number, text, whole
from tierbench.kinds import registry
from tierbench.kinds.contract import (
    Column,
    Deployment,
    Experiment,
    Kind,
    Point,
    PointContext,
    PointResult,
    Tier,
)

BASELINE, TREATMENT = "sim-off", "sim-on"


class Condition(Model):
    """One condition, its true effect (a fraction: 0.1 = +10 %) and its own noise (None: the
    settings' noise)."""

    name: Annotated[str, text(r"^[\w.-]+$", "small")]
    effect: Annotated[float, number(-0.9, 10)] = 0.1
    noise: Annotated[float, number(0, 2)] | None = None


class SimSettings(Model):
    """The `sim:` block."""

    conditions: list[Condition]
    noise: Annotated[float, number(0, 2)] = 0.05
    drift: Annotated[float, number(0, 0.9)] = 0.3
    drift_points: Annotated[int, whole(1)] = 100
    level: Annotated[float, number(1)] = 1000.0
    sleep_s: Annotated[float, number(0, 1)] = 0  # wall time of a point (for budgets)


class Sim(Model):
    """The kind's keys."""

    sim: SimSettings


BRING_UPS: list[str] = []  # the points fresh bring-ups (redeploy) started at


class SimKind(Kind):
    """Points whose values come from a known model."""

    name = "sim"
    description = "simulated points of known effect and noise (tests)"
    model = Sim
    tiers = ("sim",)

    def resolved(self, exp: Experiment) -> dict[str, Any]:
        """The experiment with its settings."""
        return {"name": exp.name, "kind": self.name, "source": exp.source, "seed": exp.seed,
                "repetitions": exp.repetitions, "modes": [m.name for m in exp.modes],
                **exp.settings.model_dump()}

    def axes(self, exp: Experiment) -> list[tuple[str, list[Any]]]:
        """condition x mode x repetition."""
        return [("condition", [c.name for c in exp.settings.sim.conditions]),  # type: ignore
                ("mode", [m.name for m in exp.modes]),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def point_seconds(self, exp: Experiment) -> float:
        """A simulated point takes no time worth counting."""
        return 0.01

    def plan_header(self, exp: Experiment, points: list[Point]) -> list[str]:
        """One line."""
        return [f"experiment {exp.name}: {len(points)} simulated points"]

    def point_line(self, exp: Experiment, point: Point) -> str:
        """One line per point."""
        return f"  {point.id}  condition={point['condition']} mode={point.mode}"

    def deploy(self, exp: Experiment, key: Hashable, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """Nothing to bring up."""
        return Deployment(key, {"sim": Tier("sim", "server", [])}, {}, {})

    def redeploy(self, exp: Experiment, key: Hashable, prepared: Any,
                 previous: Deployment, point: Point) -> Deployment:
        """A fresh bring-up: nothing to remove (never the placer's stack), counted."""
        BRING_UPS.append(point.id)
        return self.deploy(exp, key, prepared, None, point)

    def value(self, exp: Experiment, point: Point) -> float:
        """The point's value from the model (deterministic for a seed and point)."""
        s: SimSettings = exp.settings.sim  # type: ignore[attr-defined]
        cond = next(c for c in s.conditions if c.name == point["condition"])
        effect, noise = cond.effect, s.noise if cond.noise is None else cond.noise
        rng = random.Random(exp.seed * 1_000_003 + point.index)
        level = s.level * (1 - s.drift * min(point.index, s.drift_points) / s.drift_points)
        return level * (1 + (effect if point.mode == TREATMENT else 0.0)) * \
            math.exp(rng.gauss(0.0, noise))

    def run_point(self, ctx: PointContext) -> PointResult:
        """The model's value as the point's TPS."""
        seconds = ctx.exp.settings.sim.sleep_s  # type: ignore[attr-defined]
        time.sleep(seconds)
        CLOCK[0] += seconds
        return PointResult({"tps": self.value(ctx.exp, ctx.point)})

    def identity(self, exp: Experiment, point: Point) -> dict[str, Any]:
        """point, condition, mode, repetition."""
        return {"point": point.id, "condition": point["condition"], "mode": point.mode,
                "repetition": point.repetition}

    def columns(self, exp: Experiment) -> list[Column]:
        """The identity and the value."""
        return [Column(c) for c in ("point", "condition", "mode", "repetition", "tps")]

    def brief(self, row: dict[str, Any]) -> str:
        """The value."""
        return f"{row.get('tps', 0):.1f}"

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """A bar chart of TPS by condition and mode."""
        return {"kind": "sim", "family": "sim", "title": "Simulated TPS by condition",
                "factors": ["condition"],
                "primary": {"column": "tps", "label": "TPS", "unit": "requests/s"},
                "columns": [], "costs": [], "benefit": [], "baseline": BASELINE,
                "figures": [{"type": "bars", "x": "condition", "y": "tps", "series": "mode"}],
                "samples": False}


CLOCK = [0.0]  # seconds the sim's points have taken, for a runner on the sim's clock


class _SimTime:
    """The time module as the runner sees it under ``use_sim_clock``: monotonic() is the sim's
    points' own seconds, so a budget ends after the same points however loaded the machine."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def monotonic() -> float:
        return CLOCK[0]


def use_sim_clock(monkeypatch: Any) -> None:
    """The runner's clock counts only the sim points' sleep_s (budget tests)."""
    from tierbench import runner
    CLOCK[0] = 0.0
    monkeypatch.setattr(runner, "time", _SimTime())


def use(monkeypatch: Any) -> None:
    """Make the registry know the sim kind for this test."""
    found = dict(registry.kinds())
    found["sim"] = SimKind()
    monkeypatch.setattr(registry, "kinds", lambda: found)


def write_experiment(folder: Path, conditions: dict[str, float | tuple[float, float]],
                     noise: float = 0.05,
                     drift: float = 0.3, seed: int = 1, drift_points: int = 100,
                     sleep_s: float = 0.0,
                     precision: dict[str, Any] | None = None,
                     repetitions: int | None = None) -> tuple[Path, Path]:
    """An experiment file of the sim kind and its two mode files (which set nothing); returns
    (experiment file, modes folder). A condition is its effect, or (effect, its own noise)."""
    modes = folder / "modes"
    modes.mkdir(parents=True, exist_ok=True)
    for name in (TREATMENT, BASELINE):
        (modes / f"{name}.yml").write_text(f"description: simulated mode {name}\n")
    data: dict[str, Any] = {
        "name": "sim", "kind": "sim", "seed": seed, "settle_s": 0,
        "modes": [TREATMENT, BASELINE],
        "sim": {"conditions": [{"name": n, "effect": e[0], "noise": e[1]}
                               if isinstance(e, tuple) else {"name": n, "effect": e}
                               for n, e in conditions.items()],
                "noise": noise, "drift": drift, "drift_points": drift_points,
                "sleep_s": sleep_s}}
    if precision is not None:
        data["precision"] = precision
    if repetitions is not None:
        data["repetitions"] = repetitions
    path = folder / "sim.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, modes
