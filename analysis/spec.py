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
from collections.abc import Callable, Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import ErrorDetails

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
    "records_requests", "engine_requests", "threads_apart_s", "requests_per_client_asked",
    "page_cache_hit_ratio", "rate_short", "p90_ms", "p999_ms", "p*_ms_sent",
    "unsteady", "unsteady_why", "deployment",
    "web_disk_read_mb", "web_cache_mb", "web_memory_mb", "storage_read_mb", "tps_*", "p50_ms_*",
    "cycles_*", "softirq_bound_cpu", "stack_*", "node_*_stack_*", "cat_*",
)

LABELS = {  # default labels of well-known columns
    "tps": "TPS", "mb_per_s": "MB/s", "p50_ms": "p50 ms", "p90_ms": "p90 ms", "p99_ms": "p99 ms",
    "p999_ms": "p99.9 ms",
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

# Factors a generic spec looks for (in this order) when they vary within a run.
SWEEPS = ("io_servers", "filesystem", "case", "users", "clients", "threads", "streams",
          "connections", "write_size", "buffer", "docroot")
# What a generic spec (a run without one) reports of the summary's columns: the well-known
# measured ones it has (LABELS' order, conditions aside) in its tables; the CPU costs per KB
# it has as costs and, the client's and the server's, as the relative CPU benefit. A kind's
# report spec names its own columns: there are no default columns.
CONDITIONS = (*SWEEPS, "trace", "phase", "mode", "alpha")
MEASURED = tuple(c for c in LABELS if c not in CONDITIONS)
COSTS = ("host_cpu_us_per_kb", "server_cpu_us_per_kb", "client_cpu_us_per_kb")
BENEFIT = ("client_cpu_us_per_kb", "server_cpu_us_per_kb")

class SpecError(ValueError):
    """A report spec that cannot be used; the message is one sentence naming the bad key."""


# --------------------------------------------------------------------------- the model
# Every field's type says how to read it; the checks below word each refusal in the report's
# voice ("report spec: <where> <what>"), and `sentence` turns pydantic's first error into that.


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _checked(test: Callable[[Any], bool], what: str) -> BeforeValidator:
    """A check run before the type's own: refuses a value for which test(value) is false."""
    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(what)
        return value
    return BeforeValidator(check)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number or null, got {value!r}")
    return float(value)


def _scale(value: Any) -> float:
    return _number(value) or 1.0  # null (or 0) is no scaling


def _named(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _column_item(value: Any) -> Any:
    return {"column": value} if isinstance(value, str) else value


def _series(value: Any) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(_named(v) for v in names):
        raise ValueError("must be a list of column names")
    if not names:
        raise ValueError("must name at least one column")
    return names


def _phases(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(_named(v) for v in value):
        raise ValueError("must be a list of column names")
    if not value:
        raise ValueError("must name at least one column")
    bad = [p for p in value if not re.fullmatch(r"[a-z][a-z0-9]*", p)]
    if bad:
        raise ValueError(f"must be lower-case words (column prefixes), got {bad[0]!r}")
    return value


def _where(value: Any) -> bool:
    return value is None or isinstance(value, dict)


Text = Annotated[str, _checked(lambda v: isinstance(v, str), "must be text")]
Named = Annotated[str, _checked(_named, "must be non-empty text")]
Column = Annotated[str, _checked(_named, "must name a column")]
Names = Annotated[list[Column], _checked(lambda v: isinstance(v, list),
                                         "must be a list of column names")]
Number = Annotated[float | None, BeforeValidator(_number)]
Scale = Annotated[float, BeforeValidator(_scale)]
Flag = Annotated[bool, _checked(lambda v: isinstance(v, bool), "must be true or false")]
Value = Annotated[Any, _checked(lambda v: _scalar(v) or (isinstance(v, list) and all(
    _scalar(x) for x in v)), "must be a value or a list of values")]
WHERE = "must be a mapping {column: value or [values]}"
Where = Annotated[dict[Column, Value] | None, _checked(_where, WHERE)]
Values = Annotated[list[Any], _checked(lambda v: isinstance(v, list) and all(
    _scalar(x) for x in v), "must be a list of values")]


class Part(BaseModel):
    """A mapping of the spec: unknown keys refused by name; the keys in `WHEN_GIVEN` are in
    the checked spec only when the spec gives them."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, serialize_by_alias=True)
    SHAPE: ClassVar[str] = "must be a mapping"
    WHEN_GIVEN: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def keys(cls) -> list[str]:
        return [f.alias or name for name, f in cls.model_fields.items()]

    @classmethod
    def unknown(cls, key: str) -> str:
        return f"has unknown key {key!r} (known: {', '.join(cls.keys())})"

    @model_validator(mode="before")
    @classmethod
    def known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError(cls.SHAPE)
        unknown = [k for k in data if k not in cls.keys()]
        if unknown:
            raise ValueError(cls.unknown(unknown[0]))
        return data

    @model_serializer(mode="wrap")
    def given_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        for name in self.WHEN_GIVEN:
            if name not in self.model_fields_set:
                out.pop(type(self).model_fields[name].alias or name, None)
        return out


class ColumnSpec(Part):
    """A column of a table or a cost: `{column, label, where, scale, unit}`."""

    SHAPE = "must be a column name or a mapping with a 'column' key"
    WHEN_GIVEN = ("scale", "unit")
    column: Column
    label: Text | None = None  # default: the column's well-known label
    where: Where = None
    scale: Number = None
    unit: Text | None = None

    @model_validator(mode="after")
    def default_label(self) -> ColumnSpec:
        if self.label is None:
            self.label = LABELS.get(self.column, self.column)
        return self


ColumnItem = Annotated[ColumnSpec, BeforeValidator(_column_item)]
Columns = Annotated[list[ColumnItem], _checked(
    lambda v: isinstance(v, list), "must be a list of column names or {column, label} mappings")]


class Primary(Part):
    """The measured quantity compared between modes."""

    SHAPE = "must be a mapping with column, label and unit"
    column: Column
    label: Text | None = None  # default: the column's well-known label
    unit: Text | None = None  # default: its well-known unit

    @model_validator(mode="after")
    def defaults(self) -> Primary:
        self.label = LABELS.get(self.column, self.column) if self.label is None else self.label
        self.unit = UNITS.get(self.column, "") if self.unit is None else self.unit
        return self


class Panel(Part):
    """What every panel of the family figure has."""

    SHAPE = "must be a mapping with a 'type' key"
    WHEN_GIVEN = ("title", "xlabel", "ylabel")
    type: str  # one of PANEL_TYPES: each kind of panel declares its own
    series: Annotated[list[str], BeforeValidator(_series)] = ["mode"]
    facet: Annotated[str | None, _checked(lambda v: v is None or _named(v),
                                          "must be a column name or null")] = None
    where: Where = None
    title: Text | None = None
    xlabel: Text | None = None
    ylabel: Text | None = None
    logx: Annotated[Literal[True, False, "auto"], _checked(
        lambda v: isinstance(v, bool) or v == "auto", 'must be true, false or "auto"')] = False
    scale: Scale = 1.0


class Chart(Panel):
    """Bars (categories of x in the experiment's order) or lines (numeric x)."""

    type: Literal["bars", "lines"]
    x: Column
    y: Column


class Table(Panel):
    """Rows x columns, each cell the values' means and 95 % CI half-widths."""

    type: Literal["table"]
    rows: Column
    columns: Column
    values: Annotated[list[ColumnItem], _checked(
        lambda v: isinstance(v, list) and bool(v), "must list the columns shown in each cell")]


Figure = Annotated[Chart | Table, Field(discriminator="type"),
                   _checked(lambda v: isinstance(v, dict), Panel.SHAPE)]


class Sides(Part):
    """The values measured as the paper's "with" and "without"."""

    SHAPE = "must be {column, with, without}"
    column: Column
    with_: Any = Field(alias="with")
    without: Any


class Row(Part):
    """One of the paper's numbers (or its words for a change) and what it compares with."""

    WHEN_GIVEN = ("column", "sides", "change")
    x: Named
    quantity: Named
    unit: Text = ""
    with_: Number = Field(None, alias="with")
    without: Number = None
    match: Annotated[dict[Column, Value], BeforeValidator(lambda v: {} if v is None else v),
                     _checked(_where, WHERE)] = {}
    column: Column | None = None
    scale: Scale = 1.0
    measure: Annotated[str, _checked(lambda v: v in MEASURES,
                                     f"must be one of {', '.join(MEASURES)}")] = "change"
    sides: Sides | None = None
    change: Annotated[str | None, _checked(
        lambda v: isinstance(v, str), "must be text (the paper's own words for the change)")] = None


class Reference(Part):
    """The paper's numbers beside the measured ones."""

    SHAPE = "must be a mapping with figure, labels, rows and note"
    figure: Annotated[str, _checked(_named, "must name the paper's figure or table")]
    labels: Annotated[list[str], _checked(
        lambda v: isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v),
        "must be two texts: [with, without]")] = ["with offload", "without offload"]
    rows: Annotated[list[Row], _checked(lambda v: isinstance(v, list), "must be a list")] = []
    note: Text = ""


class ReportSpec(Part):
    """A workload kind's report section (analysis/README.md, "The report spec")."""

    SHAPE = "must be a mapping (a JSON object)"
    kind: Named
    family: Named
    title: Named
    description: Text = ""
    phases: Annotated[list[str] | None, BeforeValidator(_phases)] = None
    factors: Names = []
    order: Annotated[dict[str, Values], _checked(
        lambda v: isinstance(v, dict),
        "must be a mapping {column: [values in the experiment's order]}")] = {}
    sections: Names | None = None  # default: phase (with phases) and the first factor
    primary: Primary  # the kind's: no default column
    columns: Columns
    costs: Columns
    benefit: Columns
    baseline: Annotated[str | None, _checked(lambda v: v is None or _named(v),
                                             "must be a mode name or null")] = None
    figures: Annotated[list[Figure], _checked(lambda v: isinstance(v, list),
                                              "must be a list of panels")] = []
    reference: Reference | None = None
    header: Names = []
    optional: Names = []
    checks: Names = []
    samples: Flag | None = None  # default: true without phases

    @classmethod
    def unknown(cls, key: str) -> str:
        return f"{key!r} is not a report spec key (known: {', '.join(cls.keys())})"

    @model_validator(mode="after")
    def defaults(self) -> ReportSpec:
        if self.sections is None:
            self.sections = (["phase"] if self.phases else []) + self.factors[:1]
        if self.samples is None:
            self.samples = self.phases is None
        return self


def where_of(loc: tuple[int | str, ...]) -> str:
    """A pydantic error's location as the spec's path, figures[0].y (a panel's type tag and a
    mapping's key marker left out)."""
    out = ""
    for i, step in enumerate(loc):
        if isinstance(step, int):
            out += f"[{step}]"
        elif step == "[key]" or (i and isinstance(loc[i - 1], int) and step in PANEL_TYPES):
            continue
        elif not step.strip():
            out += f"[{step!r}]"
        else:
            out += f".{step}" if out else str(step)
    return out


def sentence(error: ErrorDetails) -> str:
    """One of pydantic's errors as one sentence in the report's voice."""
    where, kind = where_of(error["loc"]), error["type"]
    ctx = error.get("ctx") or {}
    if kind == "value_error":
        what = str(ctx.get("error", error["msg"]))
    elif kind == "missing":
        what = "is required"
    elif kind == "union_tag_invalid":
        where, what = f"{where}.type", (f"must be one of {', '.join(PANEL_TYPES)}, got "
                                        f"{ctx.get('tag')!r}")
    elif kind == "union_tag_not_found":
        where, what = f"{where}.type", f"is required (one of {', '.join(PANEL_TYPES)})"
    else:
        what = f"is not valid ({error['msg'][:1].lower()}{error['msg'][1:]})"
    return f"report spec: {where} {what}" if where else f"report spec: {what}"


def validate(spec: Any) -> dict[str, Any]:
    """A checked copy of a report spec with every default filled in; SpecError names a bad key."""
    try:
        return ReportSpec.model_validate(copy.deepcopy(spec)).model_dump()
    except ValidationError as exc:
        raise SpecError(sentence(exc.errors()[0])) from None


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
    spec["columns"] = [c for c in MEASURED if c in present and c != primary]
    spec["costs"] = [c for c in COSTS if c in present]
    spec["benefit"] = [c for c in BENEFIT if c in present]
    if phases:
        spec["samples"] = False
    if "integrity" in cols:
        spec["checks"] = ["integrity"]
    return validate(spec)
