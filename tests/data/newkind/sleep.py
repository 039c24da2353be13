"""The sleep kind: each point runs `sleep` on this host for its duration while the runner
samples the host's CPU. The smallest kind the contract admits: what it declares here is all a
kind must (its settings, tier, axes, the time of a point, a deployment and a point's run); the
plan's lines, the resolved experiment, the summary's columns, the progress line and the report
section are the contract's defaults (tierbench/kinds/contract.py).

It lives outside tierbench/kinds/ only so that the shipped kinds stay as they are: this folder
is laid out as tierbench/kinds/ is (the module here, its family in families/), and
tests/test_new_kind.py adds it to the kinds package's path, as adding this module to
tierbench/kinds/ would.
"""

from __future__ import annotations

import subprocess
from collections.abc import Hashable
from typing import Annotated, Any

from tierbench.config.models import Model, number, one_or_many
from tierbench.kinds.contract import (SERVER, Deployment, Experiment, Kind, Point, PointContext,
                                      PointResult, Tier)
from tierbench.measure.counters import busy_pct


class SleepBlock(Model):
    """The `sleep:` block: how long each point sleeps (a factor)."""

    seconds: Annotated[list[float], one_or_many(number(0.1, 60), "number of seconds")] = [1.0]


class SleepSettings(Model):
    """The keys of a sleep experiment besides the common ones."""

    sleep: SleepBlock


class SleepKind(Kind[SleepSettings, None, None]):
    """`sleep` on this host while its CPU is sampled."""

    name = "sleep"
    description = "sleep on this host while its CPU is sampled (the smallest kind)"
    model = SleepSettings
    block = "sleep"
    tiers = ("sleep",)

    def axes(self, exp: Experiment[SleepSettings]) -> list[tuple[str, list[Any]]]:
        """seconds x mode x repetition."""
        return [("seconds", list(exp.settings.sleep.seconds)),
                ("mode", [m.name for m in exp.modes]),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def point_seconds(self, exp: Experiment[SleepSettings]) -> float:
        """settle, the longest sleep, a second of start and stop."""
        return exp.settle_s + max(exp.settings.sleep.seconds) + 1

    def deploy(self, exp: Experiment[SleepSettings], key: Hashable, prepared: None,
               previous: Deployment[None] | None, point: Point) -> Deployment[None]:
        """Nothing to bring up: the tier is this host (no interfaces, no containers)."""
        return Deployment(key, {"sleep": Tier("sleep", SERVER, [])}, {}, {})

    def run_point(self, ctx: PointContext[SleepSettings, None, None]) -> PointResult:
        """`sleep` between two marks of the sampler: the time slept and the host's busy CPU."""
        first = ctx.mark()
        subprocess.run(["sleep", f"{ctx.point['seconds']:g}"], check=True)
        last = ctx.mark()
        return PointResult({"slept_s": last["t"] - first["t"],
                            "host_busy_pct": busy_pct(first["host"], last["host"])},
                           window=(first["t"], last["t"]))
