"""The advice of an advise run (`tierbench advise`): advice.csv and advice.html beside advise.json.

advise.json (written by tierbench.advise.run) names per workload the knobs the interfaces can
change and those they cannot (with why), the mode that tested each knob, and the precision
runs that measured them. From each run's summary.csv this module computes every knob's effect
on the workload's metrics (throughput, latency, tail latency, CPU per unit of work) against
the baseline, paired within blocks with the spread of the run's first blocks (Stein's
procedure: tierbench.stats.precision.paired_change(stein=True), valid for every comparison of
the family, where the run's own comparisons take the spread of the later blocks), and decides
a recommendation by one rule (``RULE``).
Reads result files only.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from analysis import advise_confirm, kernelview, load, markup
from tierbench.stats import precision, quantiles

ROLES = ("throughput", "latency", "tail", "cpu")
BASELINE = "baseline"
MIN_EFFECT_PCT = 2.0  # a smaller effect, however precise, is not worth changing a NIC for
ALPHA = 0.05  # the family-wise error over a workload's comparisons (Holm)
RULE = ("Each knob's mode (the knob in its other state, every other setting as it is) is "
        "compared with the baseline (nothing changed), paired within blocks. A change is "
        "recommended only when an interval's near end clears the practical threshold "
        f"({MIN_EFFECT_PCT:g} %): on the workload's primary metric (throughput; latency "
        "for request/response; the 99th percentile for a workload at a fixed offered load) "
        "an interval wholly beyond +threshold on the better side recommends the state "
        "tested, wholly beyond it on the worse side the current state. "
        "When the primary metric decides nothing, the CPU per unit of work decides in the "
        "same way, but only when the primary metric's interval rules out a loss beyond the "
        "threshold (non-inferior). The family-wise error over a workload's comparisons (its "
        f"knobs and all-on against all-off) is held at {ALPHA * 100:g} % by Holm's step-down: "
        "with k comparisons undecided, the intervals are at level 1 - 0.05/k, and every "
        "interval stated is at the level that decided it (the confidence column). A knob "
        "whose mode moved features it did not ask for (the kernel's dependencies: checksum "
        "or scatter-gather off also turns TSO off) is named with them; when they are another "
        "knob's, the knob is compared with that knob's mode (the dependent held the same on "
        "both sides: its own effect), and a change it would gain is kept only when the group "
        "is non-inferior against the baseline. Otherwise: no measurable effect at this "
        "precision, and the current state is kept. The 2 x 2 pairs the two recommended "
        "changes; a positive interaction beyond the threshold says set them together, a "
        "negative one that they interfere.")
NO_EFFECT = "no measurable effect at this precision"
COLUMNS = ["workload", "row", "knob", "label", "side", "interfaces", "current", "tested", "tested_settings",
           *(f"{r}_{part}" for r in ROLES for part in ("metric", "effect_pct", "low_pct",
                                                        "high_pct")),
           "confidence", "blocks", "method", "resolved", "target_half_width_pct",
           "recommendation", "recommended_state", "reason", "commands", "compared_with",
           "side_effects", "group", "group_effect_pct", "group_low_pct", "group_high_pct", "moved"]

Values = dict[str, dict[int, dict[str, float | None]]]  # mode -> block -> column -> value


# --------------------------------------------------------------------------- a run's values


def _float(text: Any) -> float | None:
    v = markup.number(text)
    return v


def run_values(run_dir: Path | str) -> tuple[Values, int | None]:
    """Every point's values by mode and block (a failed point's are None), and the blocks the
    run took its spread from (its precision target's min_repetitions)."""
    run_dir = Path(run_dir)
    out: Values = {}
    for row in load.read_summary_rows(run_dir / "summary.csv"):
        failed = bool(row.get("error"))
        try:
            block = int(float(row.get("repetition") or 0))
        except ValueError:
            continue
        out.setdefault(str(row.get("mode")), {})[block] = {
            k: (None if failed else _float(v)) for k, v in row.items()
            if k not in ("point", "mode", "repetition", "error")}
    spread = None
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        target = (manifest.get("experiment") or {}).get("precision") or {}
        spread = int(target["min_repetitions"]) if target.get("min_repetitions") else None
    except (OSError, ValueError, TypeError, KeyError):
        spread = None
    return out, spread


def column(values: Values, mode: str, name: str) -> dict[int, float | None]:
    """One mode's values of a column, by block."""
    return {b: row.get(name) for b, row in values.get(mode, {}).items()}


def change(values: Values, mode: str, base: str, name: str,
           spread: int | None) -> precision.Change:
    """A mode's paired change over another on a column (tierbench.stats.precision)."""
    return precision.paired_change(column(values, mode, name), column(values, base, name),
                                   spread, stein=True)


def interaction(values: Values, a: str, b: str, both: str, name: str,
                spread: int | None) -> precision.Change:
    """How far two knobs together differ from their separate effects multiplied: per block
    both x baseline / (a x b), paired against 1 (log scale: the interaction contrast)."""
    ratios: dict[int, float | None] = {}
    for block in values.get(BASELINE, {}):
        found = [values.get(m, {}).get(block, {}).get(name) for m in (both, BASELINE, a, b)]
        parts = [p for p in found if p is not None and p > 0]
        if len(parts) < len(found):
            ratios[block] = None
            continue
        ratios[block] = parts[0] * parts[1] / (parts[2] * parts[3])
    return precision.paired_change(ratios, dict.fromkeys(ratios, 1.0), spread, stein=True)


# --------------------------------------------------------------------------- the rule


def interval(c: precision.Change, level: float) -> tuple[float, float] | None:
    """A change's two-sided interval at ``level`` (in %), or None when it has no spread."""
    if c.center is None or c.se is None or c.df is None or not c.df > 0:
        return None
    h = quantiles.t_quantile(0.5 + level / 2.0, c.df) * c.se
    if c.log_scale:
        return 100.0 * math.expm1(c.center - h), 100.0 * math.expm1(c.center + h)
    return 100.0 * (c.center * (1.0 - h) - 1.0), 100.0 * (c.center * (1.0 + h) - 1.0)


def direction(c: precision.Change, better: str, least_pct: float = MIN_EFFECT_PCT,
              level: float = precision.LEVEL) -> int:
    """+1 when the interval at ``level`` lies wholly on the better side of +-``least_pct``
    (its near end clears the threshold), -1 the same on the worse side, 0 else."""
    ends = interval(c, level)
    if ends is None:
        return 0
    lo, hi = ends
    sign = 1 if lo > least_pct else -1 if hi < -least_pct else 0
    return sign if better == "higher" else -sign


def non_inferior(c: precision.Change | None, better: str, least_pct: float = MIN_EFFECT_PCT,
                 level: float = precision.LEVEL) -> bool:
    """Whether the interval at ``level`` rules out a loss beyond ``least_pct``."""
    ends = None if c is None else interval(c, level)
    if ends is None:
        return False
    return ends[0] > -least_pct if better == "higher" else ends[1] < least_pct


def _interval(c: precision.Change, level: float = precision.LEVEL) -> str:
    if c.effect_pct is None:
        return "not measured"
    ends = interval(c, level)
    if ends is None:
        return f"{c.effect_pct:+.1f} % (no interval: one block)"
    return f"{c.effect_pct:+.1f} % [{ends[0]:+.1f}, {ends[1]:+.1f}]"


def decide(changes: Mapping[str, precision.Change], metrics: Mapping[str, Mapping[str, Any]],
           primary: str, tested: str, current: str, level: float = precision.LEVEL,
           least_pct: float = MIN_EFFECT_PCT) -> tuple[str, str, str]:
    """The rule (``RULE``) at one confidence level: (recommendation, recommended state,
    reason). ``tested`` is the state measured against ``current`` (on, off, or other/mixed
    for the current one)."""
    first = changes.get(primary)
    lab = {r: str(metrics[r]["label"]) for r in metrics}
    for role in [primary] + (["cpu"] if "cpu" in changes and primary != "cpu" else []):
        c = changes.get(role)
        if c is None:
            continue
        d = direction(c, str(metrics[role]["better"]), least_pct, level)
        if d == 0:
            continue
        why = f"{lab[role]} {_interval(c, level)} with it {tested}: " + (
            "better" if d > 0 else "worse")
        if role != primary:
            if first is None or not non_inferior(first, str(metrics[primary]["better"]),
                                                 least_pct, level):
                shown = "not measured" if first is None else _interval(first, level)
                return (NO_EFFECT, current,
                        f"{why}, but {lab.get(primary, primary)} {shown} does not rule out a "
                        f"loss beyond {least_pct:g} %: the current state is kept")
            why = (f"{lab[primary]} {_interval(first, level)} decides nothing and rules out a "
                   f"loss beyond {least_pct:g} %; {why}")
        state = tested if d > 0 else current
        rec = {"on": "enable", "off": "disable"}.get(state, "keep as is")
        return rec, state, why
    half = None if first is None else first.half_width_pct
    why = ("not measured" if first is None or first.effect_pct is None else
           f"{lab[primary]} {_interval(first, level)}" + (
               "" if half is None else f": an effect within about ±{half:.0f} % would not "
                                       "have been seen"))
    return NO_EFFECT, current, why


Comparison = tuple[Mapping[str, precision.Change], str, str]  # changes, tested, current


def holm(family: Mapping[str, Comparison], metrics: Mapping[str, Mapping[str, Any]],
         primary: str, alpha: float = ALPHA,
         least_pct: float = MIN_EFFECT_PCT) -> dict[str, tuple[float, tuple[str, str, str]]]:
    """Holm's step-down over a workload's comparisons: with k comparisons undecided, each is
    decided by the rule on intervals at level 1 - alpha / k; those that decide leave the
    family and the rest are tried again at the next (wider-alpha) level; when none decides,
    the rest keep the level of that step. Returns each comparison's level and decision."""
    out: dict[str, tuple[float, tuple[str, str, str]]] = {}
    left = list(family)
    while left:
        level = 1.0 - alpha / len(left)
        tried = {k: decide(family[k][0], metrics, primary, family[k][1], family[k][2], level,
                           least_pct) for k in left}
        decided = [k for k in left if tried[k][0] != NO_EFFECT]
        for k in left if not decided else decided:
            out[k] = (level, tried[k])
        if not decided:
            break
        left = [k for k in left if k not in decided]
    return out


# --------------------------------------------------------------------------- rows


def _current(knob: dict[str, Any]) -> str:
    texts = list(dict.fromkeys(str(v) for v in (knob.get("current") or {}).values() if v))
    state = knob.get("state") or ""
    return (f"{state}: " if state else "") + "; ".join(texts)


def _settings(knob: dict[str, Any], state: str | None) -> str:
    if state not in ("on", "off"):
        return ""
    return str(knob.get(f"{state}_text") or state)


def _fill(row: dict[str, Any], changes: Mapping[str, precision.Change],
          metrics: Mapping[str, Mapping[str, Any]], primary: str,
          target: float | None, level: float = precision.LEVEL) -> None:
    for role in ROLES:
        c = changes.get(role)
        ends = None if c is None else interval(c, level)
        row[f"{role}_metric"] = metrics[role]["column"] if role in metrics else None
        row[f"{role}_effect_pct"] = None if c is None else c.effect_pct
        row[f"{role}_low_pct"] = None if ends is None else ends[0]
        row[f"{role}_high_pct"] = None if ends is None else ends[1]
    row["confidence"] = level
    p = changes.get(primary)
    if p is not None:
        row.update(blocks=p.n, method=p.method,
                   resolved=None if target is None else p.resolved(target),
                   target_half_width_pct=target)


def what_moved(values: Values, mode: str, base: str = BASELINE) -> str:
    """What moved from ``base``'s points to ``mode``'s by kernel category, with intervals
    (kernelview.what_moved: 'segmentation in software -0.05 µs/KB [...]; unchanged: data
    copy'); '' for a run without --profile categories or without both modes."""
    if not values.get(mode) or not values.get(base):
        return ""
    return kernelview.what_moved(pd.DataFrame(list(values[base].values())),
                                 pd.DataFrame(list(values[mode].values())))


def moved(run_dir: Path | str, mode: str) -> dict[str, str]:
    """The features whose state during a mode's points differed from the state the baseline
    ran (the interfaces_during of a baseline point of the same bring-up; without one, the
    point's interfaces_before: the same but under `advise --from`, whose baseline sets the
    stated configuration), on any endpoint: name -> state during."""
    out: dict[str, str] = {}
    recs = list(load.point_records(run_dir).values())
    ran = {r.get("deployment"): r.get("interfaces_during") for r in recs
           if r.get("mode") == BASELINE and r.get("interfaces_during")}
    for rec in recs:
        if rec.get("mode") != mode:
            continue
        before = ran.get(rec.get("deployment")) or rec.get("interfaces_before") or {}
        during = rec.get("interfaces_during") or {}
        for label, view in during.items():
            was = (before.get(label) or {}).get("features") or {}
            for name, state in ((view or {}).get("features") or {}).items():
                if name in was and str(state).split()[0] != str(was[name]).split()[0]:
                    out[name] = str(state).split()[0]
    return out


@dataclass
class Measured:
    """A knob's mode as the kernel ran it: the comparison that decides (``changes``: against
    ``held``'s mode when the mode also moved another knob's features, else the baseline), the
    mode against the baseline (``group``: what setting it gives), the features that moved
    without being asked (``side``) and the knobs they belong to (``owners``)."""

    knob: dict[str, Any]
    changes: dict[str, precision.Change]
    group: dict[str, precision.Change]
    side: dict[str, str] = field(default_factory=dict)
    owners: list[str] = field(default_factory=list)
    held: dict[str, Any] | None = None
    families: dict[str, set[str]] = field(default_factory=dict)  # knob -> its features

    def group_name(self) -> str:
        """What the mode changed, named as a group: 'checksum off (also turns tso off)'."""
        name = f"{self.knob['knob']} {self.knob.get('target')}"
        if not self.side:
            return name
        fams = self.families
        unowned = sorted(f for f in self.side if not any(f in fams[o] for o in self.owners))
        states = sorted(set(self.side.values()))
        return f"{name} (also turns {', '.join(self.owners + unowned)} {'/'.join(states)})"


def measure(entry: dict[str, Any], values: Values, spread: int | None,
            run: Path | str | None) -> dict[str, Measured]:
    """Every measured knob's comparisons, side effects attributed: a mode that moved features
    of exactly one other knob, the way that knob's own mode moves them, is compared with that
    mode (the dependent held the same on both sides); otherwise with the baseline, named as a
    group."""
    metrics = entry.get("metrics") or {}
    plans = entry.get("knobs") or []
    fams = {k["knob"]: set(k.get("features_asked") or []) for k in plans}
    sides = {k["knob"]: k.get("side", "both") for k in plans}
    modes = {k["knob"]: k for k in plans if k.get("changeable") and k.get("mode") in values}
    out = {}
    for name, k in modes.items():
        group = {r: change(values, k["mode"], BASELINE, m["column"], spread)
                 for r, m in metrics.items()}
        side = {f: st for f, st in (moved(run, k["mode"]) if run else {}).items()
                if f not in fams.get(name, set())}
        # the owners on the same interfaces: a side's knob moves features of that side only
        owners = sorted(o for o, fam in fams.items() if o != name and fam & set(side)
                        and sides[o] in (sides[name], "both"))
        m = Measured(k, group, group, side, owners, None, fams)
        other = modes.get(owners[0]) if len(owners) == 1 else None
        if other and {st for f, st in side.items() if f in fams[owners[0]]} == \
                {other.get("target")}:
            m.held = other
            m.changes = {r: change(values, k["mode"], other["mode"], c["column"], spread)
                         for r, c in metrics.items()}
        out[name] = m
    return out


def _side_text(m: Measured) -> str:
    if not m.side:
        return ""
    feats = ", ".join(f"{f} {st}" for f, st in sorted(m.side.items()))
    return f"{feats} (not asked: the kernel moved them with {m.knob['knob']})"


def _attributed(m: Measured, metrics: Mapping[str, Mapping[str, Any]], primary: str,
                level: float, decision: tuple[str, str, str]) -> tuple[str, str, str]:
    """A decision on a knob with side effects, said as what it is: with the dependent held
    (its own effect), or of the group."""
    rec, state, why = decision
    g = m.group.get(primary)
    told = "not measured" if g is None else _interval(g, level)
    lab = metrics[primary]["label"]
    if m.held is None:
        return rec, state, (f"the effect is that of the group {m.group_name()}: {why}")
    held = f"{m.held['knob']} {m.held.get('target')}"
    why = (f"{m.knob['knob']} {m.knob.get('target')} also turns {held}; with {held} on both "
           f"sides (its own effect): {why}; the group against the baseline: {lab} {told} "
           f"(mostly {m.held['knob']}'s: see its row)")
    if state != m.knob.get("state") and state in ("on", "off") and not non_inferior(
            g, str(metrics[primary]["better"]), level=level):
        return NO_EFFECT, str(m.knob.get("state") or "current"), \
            why + f"; setting it also sets {held}, which may lose more: kept as it is"
    return rec, state, why


def decisions(entry: dict[str, Any], values: Values, spread: int | None,
              run: Path | str | None) -> tuple[dict[str, Measured],
                                               dict[str, tuple[float, tuple[str, str, str]]]]:
    """Every measured knob (and all-on against all-off, as "all") decided by the rule under
    Holm's control of the family-wise error over the workload's comparisons."""
    metrics, primary = entry.get("metrics") or {}, str(entry.get("primary"))
    found = measure(entry, values, spread, run)
    family: dict[str, Comparison] = {
        n: (m.changes, str(m.knob["target"]), str(m.knob.get("state") or "current"))
        for n, m in found.items()}
    ends = entry.get("all") or {}
    if ends.get("on") in values and ends.get("off") in values and ends["on"] != ends["off"]:
        family["all"] = ({r: change(values, ends["on"], ends["off"], c["column"], spread)
                          for r, c in metrics.items()}, "on", "off")
    out = holm(family, metrics, primary)
    for n, m in found.items():
        if m.side:
            level, d = out[n]
            out[n] = (level, _attributed(m, metrics, primary, level, d))
    return found, out


def candidates(entry: dict[str, Any], run: Path | str) -> list[str]:
    """The knobs whose recommended state differs from their current one (the changes the
    advice recommends), largest primary effect first: the 2 x 2's pair."""
    values, spread = run_values(run)
    found, out = decisions(entry, values, spread, run)
    primary = str(entry.get("primary"))
    picked = [n for n, m in found.items() if out[n][1][1] != m.knob.get("state")
              and out[n][1][1] in ("on", "off")]
    return sorted(picked, key=lambda n: -abs(found[n].changes[primary].effect_pct or 0.0))


def workload_rows(entry: dict[str, Any], target: float | None,
                  catalogue: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """advice.csv's rows of one workload: one per knob of the catalogue (those of a workload
    whose interfaces were not read: not measured, and why), all-on against all-off, and the
    2 x 2's interaction."""
    metrics, primary = entry.get("metrics") or {}, str(entry.get("primary"))
    run = (entry.get("runs") or {}).get("knobs")
    values, spread = run_values(run) if run and Path(run, "summary.csv").is_file() else ({}, None)
    rows = []
    if not entry.get("knobs"):
        return [{"workload": entry["name"], "row": "knob", "knob": k["knob"],
                 "label": k.get("label"), "recommendation": "not measured",
                 "reason": str(entry.get("status"))} for k in catalogue or []]
    found, decided = decisions(entry, values, spread, run) if values else ({}, {})
    for knob in entry.get("knobs") or []:
        row: dict[str, Any] = {"workload": entry["name"], "row": "knob", "knob": knob["knob"],
                               "label": knob.get("label"), "side": knob.get("side", "both"),
                               "interfaces": " ".join(knob.get("endpoints") or []),
                               "current": _current(knob)}
        m = found.get(knob["knob"])
        if not knob.get("changeable"):
            row.update(recommendation="cannot change", reason=knob.get("why"))
        elif m is None:
            row.update(tested=knob.get("target"), recommendation="not measured",
                       reason=knob.get("left_out") or
                       f"the workload's runs did not measure it ({entry.get('status')})")
        else:
            level, (rec, state, why) = decided[knob["knob"]]
            _fill(row, m.changes, metrics, primary, target, level)
            commands = (knob.get("commands") or {}).get(state, []) \
                if state != knob.get("state") and state in ("on", "off") else []
            g = m.group.get(primary)
            ends = None if g is None else interval(g, level)
            row.update(tested=knob["target"], tested_settings=_settings(knob, knob["target"]),
                       recommendation=rec, recommended_state=state, reason=why,
                       commands=" ; ".join(commands), side_effects=_side_text(m),
                       compared_with=m.held["mode"] if m.held else BASELINE,
                       group=m.group_name(), group_effect_pct=None if g is None else g.effect_pct,
                       group_low_pct=None if ends is None else ends[0],
                       group_high_pct=None if ends is None else ends[1],
                       moved=what_moved(values, m.knob["mode"]))
        rows.append(row)
    if "all" in decided:
        ends_ = entry["all"]
        level, (rec, state, why) = decided["all"]
        changes = {r: change(values, ends_["on"], ends_["off"], metrics[r]["column"], spread)
                   for r in metrics}
        row = {"workload": entry["name"], "row": "all", "knob": "all",
               "label": "every knob the interfaces can change, on against off",
               "current": "off (all-off)", "tested": "on",
               "tested_settings": f"{ends_['on']} against {ends_['off']}"}
        _fill(row, changes, metrics, primary, target, level)
        row.update(recommendation={"enable": "all on", "disable": "all off"}.get(rec, rec),
                   recommended_state=state, reason=why,
                   moved=what_moved(values, ends_["on"], ends_["off"]))
        rows.append(row)
    rows += pair_rows(entry, target)
    return rows


def pair_rows(entry: dict[str, Any], target: float | None) -> list[dict[str, Any]]:
    """The 2 x 2's interaction of its two knobs (the two changes recommended), on each
    metric: together better than their separate effects multiplied (beyond the threshold)
    says set them together; worse says they interfere."""
    pair = entry.get("pair") or {}
    run = (entry.get("runs") or {}).get("pair")
    if not pair.get("a"):
        return []
    metrics, primary = entry.get("metrics") or {}, str(entry.get("primary"))
    row: dict[str, Any] = {"workload": entry["name"], "row": "interaction",
                           "knob": f"{pair['a']} x {pair['b']}",
                           "label": "the two recommended changes, together against their "
                                    "separate effects multiplied"}
    if pair.get("skipped") or not run or not Path(run, "summary.csv").is_file():
        row.update(recommendation="not measured", reason=pair.get("skipped") or "not run")
        return [row]
    values, spread = run_values(run)
    modes = {k["knob"]: k.get("mode") for k in entry.get("knobs") or []}
    a, b, both = modes.get(pair["a"]), modes.get(pair["b"]), pair.get("mode")
    changes = {r: interaction(values, str(a), str(b), str(both), metrics[r]["column"], spread)
               for r in metrics}
    _fill(row, changes, metrics, primary, target)
    c = changes[primary]
    row.update(tested=f"{a} and {b}", **interaction_verdict(
        c, str(metrics[primary]["better"]), str(metrics[primary]["label"])))
    return [row]


def interaction_verdict(c: precision.Change, better: str, label: str) -> dict[str, str]:
    """The 2 x 2's verdict on the primary metric (95 %, one comparison): the contrast
    together x baseline / (each alone) on the better side of the threshold: set them
    together; on the worse side: they interfere (do not count on both gains); else none."""
    d = direction(c, better)
    told = f"{label}: together {_interval(c)} against their separate effects multiplied"
    if d > 0:
        return {"recommendation": "they interact: set them together", "reason": told}
    if d < 0:
        return {"recommendation": "they interfere: together less than both gains; measure "
                                  "them together before setting both", "reason": told}
    return {"recommendation": "no interaction measurable at this precision",
            "reason": f"{label}: {_interval(c)}"}


def rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of advice.csv."""
    target = markup.number(record.get("half_width_pct"))
    return [r for w in record.get("workloads") or []
            for r in workload_rows(w, target, record.get("catalogue"))] + \
        advise_confirm.rows(record)


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


def write_csv(path: Path, table: list[dict[str, Any]]) -> Path:
    """advice.csv: COLUMNS, one row per workload and knob (and all, interaction)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in table:
            writer.writerow({k: _cell(row.get(k)) for k in COLUMNS})
    return path


# --------------------------------------------------------------------------- the page


def _effect(row: dict[str, Any], role: str) -> Markup | None:
    """A knob's effect on one metric with its interval, or None when it was not measured."""
    eff = row.get(f"{role}_effect_pct")
    if eff is None:
        return None
    return Markup(markup.ci_span(eff, row.get(f"{role}_low_pct"),
                                 row.get(f"{role}_high_pct"), 1, 1.0, " %"))


def workload_view(entry: dict[str, Any], table: list[dict[str, Any]],
                  folder: Path) -> dict[str, Any]:
    """One workload's card: its knobs' effects and recommendations, the recommended
    configuration with its commands, the knobs the interfaces cannot change, its runs."""
    metrics = entry.get("metrics") or {}
    mine = [r for r in table if r["workload"] == entry["name"]]
    head = [m for m in ROLES if m in metrics]
    measured = [{**r, "effects": [_effect(r, m) for m in head]}
                for r in mine if r.get("recommendation") != "cannot change"]
    change = [r for r in mine if r["row"] == "knob" and r.get("commands")]
    budget = entry.get("budget") or {}
    return {
        "entry": entry, "metrics": [metrics[m] for m in head], "measured": measured,
        "fixed": [r for r in mine if r.get("recommendation") == "cannot change"],
        "config": "\n".join(f"# {r['knob']}: {r['recommendation']} ({_settings_of(entry, r)})\n"
                            + r["commands"].replace(" ; ", "\n") for r in change),
        "runs": [(k, os.path.relpath(Path(d) / "report.html", folder))
                 for k, d in (entry.get("runs") or {}).items() if d],
        "interfaces": ", ".join(f"{e.get('label')} ({e.get('driver')})"
                                for e in entry.get("endpoints") or []),
        "spent_min": sum(float(budget.get(k) or 0)
                         for k in ("maximum_spent_s", "pilot_spent_s", "knobs_spent_s",
                                   "pair_spent_s")) / 60,
    }


def _settings_of(entry: dict[str, Any], row: dict[str, Any]) -> str:
    knob: dict[str, Any] = next((k for k in entry.get("knobs") or []
                                 if k["knob"] == row["knob"]), {})
    return _settings(knob, row.get("recommended_state"))


def render(record: dict[str, Any], table: list[dict[str, Any]], folder: Path) -> str:
    """advice.html (analysis/templates/advise.html.j2)."""
    return markup.render(
        "advise.html.j2", title="Offload advice", record=record, rule=RULE,
        budget_min=markup.number(record.get("budget_min")) or 0.0,
        spent_min=(markup.number(record.get("spent_s")) or 0.0) / 60,
        half_width=markup.number(record.get("half_width_pct")) or 0.0,
        workloads=[workload_view(w, table, folder) for w in record.get("workloads") or []],
        configuration=advise_confirm.view(record, table))


def write_advice(folder: Path | str) -> tuple[Path, Path]:
    """advice.csv and advice.html of an advise folder (its advise.json)."""
    folder = Path(folder)
    record = json.loads((folder / "advise.json").read_text(encoding="utf-8"))
    table = rows(record)
    out_csv = write_csv(folder / "advice.csv", table)
    out_html = folder / "advice.html"
    out_html.write_text(render(record, table, folder), encoding="utf-8")
    return out_csv, out_html
