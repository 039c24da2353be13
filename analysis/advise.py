"""The advice of an advise run (`tierbench advise`): advice.csv and advice.html beside advise.json.

advise.json (written by tierbench.advise.run) names per workload the knobs the interfaces can
change and those they cannot (with why), the mode that tested each knob, and the precision
runs that measured them. From each run's summary.csv this module computes every knob's effect
on the workload's metrics (throughput, latency, tail latency, CPU per unit of work) against
the baseline, paired within blocks with the spread of the run's first blocks, as the run's own
comparisons do (analysis.precision), and decides a recommendation by one rule (``RULE``).
Reads result files only.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from markupsafe import Markup

from analysis import load, markup, precision

ROLES = ("throughput", "latency", "tail", "cpu")
BASELINE = "baseline"
MIN_EFFECT_PCT = 2.0  # a smaller effect, however precise, is not worth changing a NIC for
RULE = ("Each knob's mode (the knob in its other state, every other setting as it is) is "
        "compared with the baseline (nothing changed), paired within blocks, with 95 % "
        "intervals. On the workload's primary metric (throughput, or latency for "
        "request/response): an interval wholly on the better side of zero recommends the state "
        "tested, wholly on the worse side the current state, either only when the effect is "
        f"at least {MIN_EFFECT_PCT:g} % (a smaller one is not worth changing a NIC for). When "
        "the primary metric decides nothing, the CPU per unit of work decides in the same way "
        "(the same work for less CPU). When neither decides: no measurable effect at this "
        "precision, and the current state is kept. A knob whose recommended state differs "
        "from its current one is in the recommended configuration, with the commands that set "
        "it on each interface.")
NO_EFFECT = "no measurable effect at this precision"
COLUMNS = ["workload", "row", "knob", "label", "current", "tested", "tested_settings",
           *(f"{r}_{part}" for r in ROLES for part in ("metric", "effect_pct", "low_pct",
                                                        "high_pct")),
           "blocks", "method", "resolved", "target_half_width_pct", "recommendation",
           "recommended_state", "reason", "commands"]

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
    """A mode's paired change over another on a column (analysis.precision)."""
    return precision.paired_change(column(values, mode, name), column(values, base, name),
                                   spread)


def knob_effects(run_dir: Path | str, name: str, modes: list[str]) -> dict[str, float]:
    """Each mode's effect (%) over the baseline on a column (the 2 x 2's choice)."""
    values, spread = run_values(run_dir)
    out = {}
    for m in modes:
        c = change(values, m, BASELINE, name, spread)
        if c.effect_pct is not None:
            out[m] = c.effect_pct
    return out


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
    return precision.paired_change(ratios, dict.fromkeys(ratios, 1.0), spread)


# --------------------------------------------------------------------------- the rule


def direction(c: precision.Change, better: str, least_pct: float = MIN_EFFECT_PCT) -> int:
    """+1 when the interval lies wholly on the better side of zero and the effect is at least
    ``least_pct``, -1 the same on the worse side, 0 else."""
    lo, hi, eff = c.low_pct, c.high_pct, c.effect_pct
    if lo is None or hi is None or eff is None or abs(eff) < least_pct:
        return 0
    sign = 1 if lo > 0 else -1 if hi < 0 else 0
    return sign if better == "higher" else -sign


def _interval(c: precision.Change) -> str:
    if c.effect_pct is None:
        return "not measured"
    if c.low_pct is None or c.high_pct is None:
        return f"{c.effect_pct:+.1f} % (no interval: one block)"
    return f"{c.effect_pct:+.1f} % [{c.low_pct:+.1f}, {c.high_pct:+.1f}]"


def decide(changes: Mapping[str, precision.Change], metrics: Mapping[str, Mapping[str, Any]],
           primary: str, tested: str, current: str) -> tuple[str, str, str]:
    """The rule (``RULE``): (recommendation, recommended state, reason). ``tested`` is the
    state measured against ``current`` (on, off, or other/mixed for the current one)."""
    order = [primary] + (["cpu"] if "cpu" in changes and primary != "cpu" else [])
    for role in order:
        c = changes.get(role)
        if c is None:
            continue
        d = direction(c, str(metrics[role]["better"]))
        if d == 0:
            continue
        state = tested if d > 0 else current
        word = "better" if d > 0 else "worse"
        why = (f"{metrics[role]['label']} {_interval(c)} with it {tested}: {word}")
        if role != primary:
            why = (f"{metrics[primary]['label']} {_interval(changes[primary])} decides "
                   f"nothing; {why}")
        rec = {"on": "enable", "off": "disable"}.get(state, "keep as is")
        return rec, state, why
    c = changes.get(primary)
    half = None if c is None else c.half_width_pct
    why = ("not measured" if c is None or c.effect_pct is None else
           f"{metrics[primary]['label']} {_interval(c)}" + (
               "" if half is None else f": an effect within about ±{half:.0f} % would not "
                                       "have been seen"))
    return NO_EFFECT, current, why


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
          target: float | None) -> None:
    for role in ROLES:
        c = changes.get(role)
        row[f"{role}_metric"] = metrics[role]["column"] if role in metrics else None
        row[f"{role}_effect_pct"] = None if c is None else c.effect_pct
        row[f"{role}_low_pct"] = None if c is None else c.low_pct
        row[f"{role}_high_pct"] = None if c is None else c.high_pct
    p = changes.get(primary)
    if p is not None:
        row.update(blocks=p.n, method=p.method,
                   resolved=None if target is None else p.resolved(target),
                   target_half_width_pct=target)


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
    for knob in entry.get("knobs") or []:
        row: dict[str, Any] = {"workload": entry["name"], "row": "knob", "knob": knob["knob"],
                               "label": knob.get("label"), "current": _current(knob)}
        mode = knob.get("mode")
        if not knob.get("changeable"):
            row.update(recommendation="cannot change", reason=knob.get("why"))
        elif not values or mode not in values:
            row.update(tested=knob.get("target"), recommendation="not measured",
                       reason=f"the workload's runs did not measure it ({entry.get('status')})")
        else:
            changes = {r: change(values, mode, BASELINE, metrics[r]["column"], spread)
                       for r in metrics}
            _fill(row, changes, metrics, primary, target)
            rec, state, why = decide(changes, metrics, primary, knob["target"],
                                     knob.get("state") or "current")
            commands = (knob.get("commands") or {}).get(state, []) \
                if state != knob.get("state") and state in ("on", "off") else []
            row.update(tested=knob["target"], tested_settings=_settings(knob, knob["target"]),
                       recommendation=rec, recommended_state=state, reason=why,
                       commands=" ; ".join(commands))
        rows.append(row)
    ends = entry.get("all") or {}
    if values and ends.get("on") in values and ends.get("off") in values:
        changes = {r: change(values, ends["on"], ends["off"], metrics[r]["column"], spread)
                   for r in metrics}
        row = {"workload": entry["name"], "row": "all", "knob": "all",
               "label": "every knob the interfaces can change, on against off",
               "current": "off (all-off)", "tested": "on",
               "tested_settings": f"{ends['on']} against {ends['off']}"}
        _fill(row, changes, metrics, primary, target)
        rec, state, why = decide(changes, metrics, primary, "on", "off")
        row.update(recommendation={"enable": "all on", "disable": "all off"}.get(rec, rec),
                   recommended_state=state, reason=why)
        rows.append(row)
    rows += pair_rows(entry, target)
    return rows


def pair_rows(entry: dict[str, Any], target: float | None) -> list[dict[str, Any]]:
    """The 2 x 2's interaction of its two knobs, on each metric."""
    pair = entry.get("pair") or {}
    run = (entry.get("runs") or {}).get("pair")
    if not pair.get("a"):
        return []
    metrics, primary = entry.get("metrics") or {}, str(entry.get("primary"))
    row: dict[str, Any] = {"workload": entry["name"], "row": "interaction",
                           "knob": f"{pair['a']} x {pair['b']}",
                           "label": "the two knobs with the largest effects, together against "
                                    "their separate effects multiplied"}
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
    if direction(c, "higher"):
        rec = "they interact: set them together"
        why = (f"{metrics[primary]['label']}: together {_interval(c)} against their separate "
               "effects multiplied")
    else:
        rec = "no interaction measurable at this precision"
        why = f"{metrics[primary]['label']}: {_interval(c)}"
    row.update(tested=f"{a} and {b}", recommendation=rec, reason=why)
    return [row]


def rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of advice.csv."""
    target = markup.number(record.get("half_width_pct"))
    return [r for w in record.get("workloads") or []
            for r in workload_rows(w, target, record.get("catalogue"))]


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
                         for k in ("knobs_spent_s", "pair_spent_s")) / 60,
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
        workloads=[workload_view(w, table, folder) for w in record.get("workloads") or []])


def write_advice(folder: Path | str) -> tuple[Path, Path]:
    """advice.csv and advice.html of an advise folder (its advise.json)."""
    folder = Path(folder)
    record = json.loads((folder / "advise.json").read_text(encoding="utf-8"))
    table = rows(record)
    out_csv = write_csv(folder / "advice.csv", table)
    out_html = folder / "advice.html"
    out_html.write_text(render(record, table, folder), encoding="utf-8")
    return out_csv, out_html
