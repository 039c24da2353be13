"""The report spec: what a workload kind's report shows, declared as data (a JSON-able dict).

The runner writes it into every run's manifest.json under "report" (each workload kind declares
its own); `write_report` reads it from there, else takes the one it is given, else builds a
generic one from summary.csv's columns (`generic`). `validate` checks a spec and fills in the
defaults; a bad spec is refused with one sentence naming the key. The schema is documented in
analysis/README.md ("The report spec").
"""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Iterable
from typing import Any

HARDWARE = "2004-2008 hardware"  # the seed papers' hardware, named beside every paper number
PANEL_TYPES = ("bars", "lines", "table")
MEASURES = ("change", "benefit")

# Columns that may be empty in a point's row because they do not apply to it: the advice of a
# point that was not client-bound, the settings of an engine or load shape the point did not
# use, the per-site numbers of a trace that is not a mix, the count cross-check of an engine
# that keeps per-request records. Never reported as missing values.
OPTIONAL = (
    "error", "client_bound_advice", "target_rate", "achieved_rate", "late_requests", "workers",
    "remote_workers", "generator_cpu_scope", "generator_allowance_cores", "count_mismatch",
    "records_requests", "engine_requests", "threads_apart_s", "page_cache_hit_ratio",
    "web_disk_read_mb", "tps_*", "p50_ms_*", "cycles_*",
)

LABELS = {  # default labels of well-known columns
    "tps": "TPS", "mb_per_s": "MB/s", "p50_ms": "p50 ms", "p99_ms": "p99 ms",
    "mean_ms": "mean ms",
    "server_cpu_us_per_req": "server CPU µs/req", "server_cpu_us_per_kb": "server CPU µs/KB",
    "host_cpu_us_per_kb": "host CPU µs/KB", "host_cpu_us_per_req": "host CPU µs/req",
    "client_cpu_us_per_kb": "client CPU µs/KB", "client_cpu_pct": "client CPU %",
    "server_cpu_pct": "server CPU %", "server_cpu_util": "server CPU utilisation",
    "generator_cpu_pct": "generator CPU %", "server_cycles_per_kb": "server cycles/KB",
    "host_cycles_per_kb": "host cycles/KB", "client_cycles_per_kb": "client cycles/KB",
    "tps_foreground": "foreground TPS", "users": "users", "clients": "clients",
    "io_servers": "I/O servers", "streams": "streams", "buffer": "buffer (bytes)",
    "filesystem": "file system", "docroot": "docroot", "trace": "trace", "phase": "phase",
    "alpha": "Zipf alpha", "connections": "connections", "write_size": "write size",
    "case": "case", "mode": "mode",
}

UNITS = {"tps": "requests/s", "mb_per_s": "MB/s", "tps_foreground": "requests/s"}

WEB_COLUMNS = ["p50_ms", "p99_ms", "server_cpu_us_per_req", "server_cpu_us_per_kb",
               "host_cpu_us_per_kb", "mb_per_s"]
PHASE_COLUMNS = ["client_cpu_pct", "server_cpu_pct", "client_cpu_us_per_kb",
                 "server_cpu_us_per_kb"]
WEB_BENEFIT = [{"column": "server_cpu_util", "label": "server CPU utilisation"},
               {"column": "server_cpu_us_per_kb", "label": "server CPU per KB"}]
# Factors a generic spec looks for (in this order) when they vary within a run.
SWEEPS = ("io_servers", "filesystem", "case", "users", "clients", "threads", "streams",
          "connections", "write_size", "buffer", "docroot")

KEYS = ("kind", "family", "title", "description", "phases", "factors", "order", "sections",
        "primary", "columns", "costs", "benefit", "baseline", "figures", "reference", "header",
        "optional", "checks", "samples")
PANEL_KEYS = ("type", "x", "y", "series", "facet", "where", "title", "xlabel", "ylabel", "logx",
              "scale", "rows", "columns", "values")
REFERENCE_KEYS = ("figure", "labels", "rows", "note")
ROW_KEYS = ("x", "quantity", "unit", "with", "without", "match", "column", "scale", "measure",
            "sides", "change")


class SpecError(ValueError):
    """A report spec that cannot be used; the message is one sentence naming the bad key."""


# --------------------------------------------------------------------------- checks


def _fail(where: str, what: str) -> SpecError:
    return SpecError(f"report spec: {where} {what}")


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _str_list(value: Any, where: str, allow_empty: bool = True) -> list[str]:
    if not isinstance(value, list) or not all(_is_str(v) for v in value):
        raise _fail(where, "must be a list of column names")
    if not value and not allow_empty:
        raise _fail(where, "must name at least one column")
    return list(value)


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, f"must be a number or null, got {value!r}")
    return float(value)


def _where(value: Any, where: str) -> dict[str, Any] | None:
    """A filter {column: value or [values]}."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(_is_str(k) for k in value):
        raise _fail(where, "must be a mapping {column: value or [values]}")
    for k, v in value.items():
        if not (_scalar(v) or (isinstance(v, list) and all(_scalar(x) for x in v))):
            raise _fail(f"{where}.{k}", "must be a value or a list of values")
    return dict(value)


def _column_item(value: Any, where: str) -> dict[str, Any]:
    """A column given as a name or as {column, label, ...}."""
    if _is_str(value):
        return {"column": value, "label": LABELS.get(value, value)}
    if isinstance(value, dict) and _is_str(value.get("column")):
        unknown = set(value) - {"column", "label", "where", "scale", "unit"}
        if unknown:
            raise _fail(where, f"has unknown key {sorted(unknown)[0]!r} (known: column, label, "
                               "where, scale, unit)")
        out = dict(value)
        out.setdefault("label", LABELS.get(value["column"], value["column"]))
        if not isinstance(out["label"], str):
            raise _fail(f"{where}.label", "must be text")
        out["where"] = _where(value.get("where"), f"{where}.where")
        if "scale" in out:
            out["scale"] = _number(out["scale"], f"{where}.scale")
        return out
    raise _fail(where, "must be a column name or a mapping with a 'column' key")


def _columns(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _fail(where, "must be a list of column names or {column, label} mappings")
    return [_column_item(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _panel(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, "must be a mapping with a 'type' key")
    unknown = [k for k in value if k not in PANEL_KEYS]
    if unknown:
        raise _fail(where, f"has unknown key {unknown[0]!r} (known: {', '.join(PANEL_KEYS)})")
    kind = value.get("type")
    if kind not in PANEL_TYPES:
        raise _fail(f"{where}.type", f"must be one of {', '.join(PANEL_TYPES)}, got {kind!r}")
    out = dict(value)
    series = out.get("series", "mode")
    if _is_str(series):
        series = [series]
    out["series"] = _str_list(series, f"{where}.series", allow_empty=False)
    if out.get("facet") is not None and not _is_str(out["facet"]):
        raise _fail(f"{where}.facet", "must be a column name or null")
    out["facet"] = out.get("facet")
    out["where"] = _where(out.get("where"), f"{where}.where")
    for key in ("title", "xlabel", "ylabel"):
        if key in out and not isinstance(out[key], str):
            raise _fail(f"{where}.{key}", "must be text")
    out["logx"] = out.get("logx", False)
    if out["logx"] not in (True, False, "auto"):
        raise _fail(f"{where}.logx", "must be true, false or \"auto\"")
    out["scale"] = _number(out.get("scale", 1.0), f"{where}.scale") or 1.0
    if kind == "table":
        for key in ("rows", "columns"):
            if not _is_str(out.get(key)):
                raise _fail(f"{where}.{key}", "must name a column (table panels need rows, "
                                              "columns and values)")
        if not isinstance(out.get("values"), list) or not out["values"]:
            raise _fail(f"{where}.values", "must list the columns shown in each cell")
        out["values"] = [_column_item(v, f"{where}.values[{i}]")
                         for i, v in enumerate(out["values"])]
    else:
        for key in ("x", "y"):
            if not _is_str(out.get(key)):
                raise _fail(f"{where}.{key}", f"must name a column ({kind} panels need x and y)")
    return out


def _reference(value: Any, where: str = "reference") -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(where, "must be a mapping with figure, labels, rows and note")
    unknown = [k for k in value if k not in REFERENCE_KEYS]
    if unknown:
        raise _fail(where, f"has unknown key {unknown[0]!r} (known: "
                           f"{', '.join(REFERENCE_KEYS)})")
    if not _is_str(value.get("figure")):
        raise _fail(f"{where}.figure", "must name the paper's figure or table")
    labels = value.get("labels", ["with offload", "without offload"])
    if not (isinstance(labels, list) and len(labels) == 2 and all(isinstance(x, str)
                                                                    for x in labels)):
        raise _fail(f"{where}.labels", "must be two texts: [with, without]")
    rows = value.get("rows", [])
    if not isinstance(rows, list):
        raise _fail(f"{where}.rows", "must be a list")
    out_rows = []
    for i, row in enumerate(rows):
        at = f"{where}.rows[{i}]"
        if not isinstance(row, dict):
            raise _fail(at, "must be a mapping")
        bad = [k for k in row if k not in ROW_KEYS]
        if bad:
            raise _fail(at, f"has unknown key {bad[0]!r} (known: {', '.join(ROW_KEYS)})")
        for key in ("x", "quantity"):
            if not _is_str(row.get(key)):
                raise _fail(f"{at}.{key}", "must be text")
        r = dict(row)
        r.setdefault("unit", "")
        r["with"] = _number(row.get("with"), f"{at}.with")
        r["without"] = _number(row.get("without"), f"{at}.without")
        r["match"] = _where(row.get("match"), f"{at}.match") or {}
        r["scale"] = _number(row.get("scale", 1.0), f"{at}.scale") or 1.0
        r["measure"] = row.get("measure", "change")
        if r["measure"] not in MEASURES:
            raise _fail(f"{at}.measure", f"must be one of {', '.join(MEASURES)}")
        if "column" in r and not _is_str(r["column"]):
            raise _fail(f"{at}.column", "must name a column")
        sides = row.get("sides")
        if sides is not None and not (isinstance(sides, dict) and _is_str(sides.get("column"))
                                      and "with" in sides and "without" in sides):
            raise _fail(f"{at}.sides", "must be {column, with, without}")
        if "change" in r and not isinstance(r["change"], str):
            raise _fail(f"{at}.change", "must be text (the paper's own words for the change)")
        out_rows.append(r)
    note = value.get("note", "")
    if not isinstance(note, str):
        raise _fail(f"{where}.note", "must be text")
    return {"figure": value["figure"], "labels": list(labels), "rows": out_rows, "note": note}


def validate(spec: Any) -> dict[str, Any]:
    """A checked copy of a report spec with every default filled in; SpecError names a bad key."""
    if not isinstance(spec, dict):
        raise SpecError("report spec: must be a mapping (a JSON object)")
    unknown = [k for k in spec if k not in KEYS]
    if unknown:
        raise _fail(repr(unknown[0]), f"is not a report spec key (known: {', '.join(KEYS)})")
    for key in ("kind", "family", "title"):
        if not _is_str(spec.get(key)):
            raise _fail(key, "is required and must be text")
    out: dict[str, Any] = copy.deepcopy(spec)
    out.setdefault("description", "")
    if not isinstance(out["description"], str):
        raise _fail("description", "must be text")
    phases = out.get("phases")
    if phases is not None:
        phases = _str_list(phases, "phases", allow_empty=False)
        bad = [p for p in phases if not re.fullmatch(r"[a-z][a-z0-9]*", p)]
        if bad:
            raise _fail("phases", f"must be lower-case words (column prefixes), got {bad[0]!r}")
    out["phases"] = phases
    out["factors"] = _str_list(out.get("factors", []), "factors")
    order = out.get("order", {})
    if not isinstance(order, dict):
        raise _fail("order", "must be a mapping {column: [values in the experiment's order]}")
    for col, values in order.items():
        if not isinstance(values, list) or not all(_scalar(v) for v in values):
            raise _fail(f"order.{col}", "must be a list of values")
    out["order"] = order
    sections = out.get("sections")
    if sections is None:
        sections = (["phase"] if phases else []) + out["factors"][:1]
    out["sections"] = _str_list(sections, "sections")
    primary = out.get("primary", {"column": "tps"})
    if not isinstance(primary, dict) or not _is_str(primary.get("column")):
        raise _fail("primary", "must be a mapping with column, label and unit")
    bad = set(primary) - {"column", "label", "unit"}
    if bad:
        raise _fail("primary", f"has unknown key {sorted(bad)[0]!r} (known: column, label, unit)")
    col = primary["column"]
    out["primary"] = {"column": col, "label": primary.get("label", LABELS.get(col, col)),
                      "unit": primary.get("unit", UNITS.get(col, ""))}
    default_columns = PHASE_COLUMNS if phases else WEB_COLUMNS
    out["columns"] = _columns(out.get("columns", default_columns), "columns")
    out["costs"] = _columns(out.get("costs", ["host_cpu_us_per_kb", "server_cpu_us_per_kb"]),
                            "costs")
    out["benefit"] = _columns(out.get("benefit", WEB_BENEFIT), "benefit")
    baseline = out.get("baseline")
    if baseline is not None and not _is_str(baseline):
        raise _fail("baseline", "must be a mode name or null")
    out["baseline"] = baseline
    figures = out.get("figures", [])
    if not isinstance(figures, list):
        raise _fail("figures", "must be a list of panels")
    out["figures"] = [_panel(p, f"figures[{i}]") for i, p in enumerate(figures)]
    out["reference"] = _reference(out.get("reference"))
    out["header"] = _str_list(out.get("header", []), "header")
    out["optional"] = _str_list(out.get("optional", []), "optional")
    out["checks"] = _str_list(out.get("checks", []), "checks")
    samples = out.get("samples", phases is None)
    if not isinstance(samples, bool):
        raise _fail("samples", "must be true or false")
    out["samples"] = samples
    return out


# --------------------------------------------------------------------------- helpers


def is_optional(column: str, spec: dict[str, Any]) -> bool:
    """True when a column may be empty because it does not apply (OPTIONAL + spec 'optional')."""
    return any(fnmatch.fnmatchcase(column, pat) for pat in (*OPTIONAL, *spec.get("optional", [])))


def label(column: str) -> str:
    """The display label of a column."""
    return LABELS.get(column, column)


def detect_phases(columns: Iterable[str]) -> list[str] | None:
    """Phases of a wide summary: prefixes p with a `p_mb_per_s` column (read, write)."""
    found = []
    for c in columns:
        m = re.fullmatch(r"([a-z][a-z0-9]*)_mb_per_s", c)
        if m and m.group(1) not in found:
            found.append(m.group(1))
    return found or None


def generic(columns: Iterable[str], experiment: dict[str, Any] | None = None,
            varying: Iterable[str] = ()) -> dict[str, Any]:
    """A spec built from summary.csv's columns (used when neither manifest nor caller gives one).

    `varying` names the columns whose values differ between points (factors are taken from
    SWEEPS among them). Kind: "pfs" when the summary has <phase>_mb_per_s columns, "web" when it
    has tps, else "generic"; one bar panel of the primary column by the first factor and mode.
    """
    cols = list(columns)
    varying = set(varying)
    phases = detect_phases(cols)
    name = str((experiment or {}).get("name") or "run")
    if phases:
        present = {c.split("_", 1)[1] for c in cols if c.split("_", 1)[0] in phases}
        primary = "mb_per_s"
        kind = "pfs"
    else:
        present = set(cols)
        primary = "tps" if "tps" in cols or "mb_per_s" not in cols else "mb_per_s"
        kind = "web" if "tps" in cols else "generic"
    factors = (["trace"] if "trace" in cols else []) + [c for c in SWEEPS if c in varying]
    x = factors[-1] if factors else "mode"
    spec: dict[str, Any] = {
        "kind": kind, "family": "generic",
        "title": f"{label(primary)} by {label(x)}" + (" and mode" if x != "mode" else ""),
        "description": f"Generic report of {name}: no report spec in manifest.json, so the "
                       "sections and the figure were built from summary.csv's columns.",
        "phases": phases, "factors": factors,
        "primary": {"column": primary},
        "figures": [{"type": "bars", "x": x, "y": primary,
                     "facet": "phase" if phases else (factors[0] if len(factors) > 1 else None)}],
    }
    if phases:
        spec["costs"] = [c for c in ("client_cpu_us_per_kb", "server_cpu_us_per_kb")
                         if c in present]
        spec["benefit"] = [c for c in ("client_cpu_us_per_kb", "server_cpu_us_per_kb")
                           if c in present]
        spec["samples"] = False
    if "integrity" in cols:
        spec["checks"] = ["integrity"]
    return validate(spec)
