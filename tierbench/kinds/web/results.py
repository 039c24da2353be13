"""What a web point leaves in summary.csv and on the progress line: the values that identify it
(trace facts, the platform a CPU mode gives), the columns in order, one line per point and the
run's last line."""

from __future__ import annotations

from typing import Any

from tierbench.interfaces.cpu import parse as cpuparse
from tierbench.kinds.contract import Column, Experiment, Point
from tierbench.kinds.web import webmetrics
from tierbench.kinds.web.settings import WebSettings, has_dynamic
from tierbench.modes.model import Mode
from workloads import traces as tracelib

APP_DB_COLUMNS = ["dyn_tps", "db_tps", "db_rows_read", "db_rows_written", "db_blocks_read",
                  "db_rows_read_per_dyn", "db_statements_per_dyn",
                  "writes_ok", "rows_written", "write_check"]


def identity(exp: Experiment[WebSettings], point: Point) -> dict[str, Any]:
    """point, trace, mode, repetition, engine, users, docroot, what the trace is (its kind,
    size, alpha, class, hit ratio: tracelib.facts); with dynamic requests what
    the trace asks for (content, dynamic_share, query); with CPU modes the platform the
    mode gives the tiers it covers (cpus, cpu_time: CPUs of time, the limit or the count)."""
    s = exp.settings
    out = {"point": point.id, "trace": point["trace"]["name"], "mode": point.mode,
           "repetition": point.repetition, "engine": s.engine,
           "users": point["users"], "docroot": point["docroot"],
           **({"placement": point.factors["placement"]}
              if "placement" in point.factors else {}),
           **{k: v for k, v in tracelib.facts(point["trace"]).items() if v is not None}}
    if has_dynamic(s):
        dyn = point["trace"].get("dynamic") or {}
        out.update({"content": tracelib.content(point["trace"]),
                    "dynamic_share": float(dyn.get("share", 0.0)),
                    "query": dyn.get("query", "") if dyn.get("share") else ""})
    if any(m.cpu for m in exp.modes):
        out.update(platform(exp.mode(point.mode)))
    return out

def columns(exp: Experiment[WebSettings]) -> list[Column]:
    """webmetrics.SUMMARY_COLUMNS (docroot and per-site columns follow, sorted), with the
    dynamic requests' and the application and database tiers' columns when they run."""
    s = exp.settings
    names = list(webmetrics.SUMMARY_COLUMNS)

    def after(column: str, new: list[str]) -> None:
        at = names.index(column) + 1
        names[at:at] = new

    if any(m.cpu for m in exp.modes):
        after("users", ["cpus", "cpu_time"])
    if has_dynamic(s):
        after("users", ["content", "dynamic_share", "query"])
        after("cpu_s_web", ["cpu_s_app", "cpu_s_db"])
        names += APP_DB_COLUMNS
    return [Column(c) for c in names]

def brief(row: dict[str, Any]) -> str:
    """TPS, MB/s, server CPU per KB, generator CPU (and the database's TPS, the write
    check when it did not pass)."""
    if "error" in row:
        return f"FAILED ({row['error']})"
    flag_ = (" CLIENT-BOUND" if row.get("client_bound") else "") + \
        (" UNSTEADY" if row.get("unsteady") else "") + \
        (" COLD-CACHE" if row.get("cold_cache") else "")
    db = f", database {row['db_tps']:.0f} TPS" if "db_tps" in row else ""
    check = row.get("write_check")
    check = f"; WRITE CHECK: {check}" if check not in (None, "ok") else ""
    errors = f", {row['errors']:g} errors" if row.get("errors") else ""
    return (f"{row['tps']:.0f} TPS, {row['mb_per_s']:.0f} MB/s, server CPU "
            f"{row['server_cpu_us_per_kb']:.2f} us/KB, generator "
            f"{row['generator_cpu_pct']:.0f} %{db}{errors}{flag_}{check}")

def point_title(exp: Experiment[WebSettings], point: Point) -> str:
    """How the progress line names a point (users and docroot when they vary)."""
    s = exp.settings
    extra = (f" {point['users']} users" if len(s.load.users) > 1 else "") + \
        (f" at {point['rate']:g} requests/s" if len(s.load.rate or []) > 1 else "") + \
        (f" at {point['rate_of_max']:g}x max" if len(s.load.rate_of_max or []) > 1 else "") + \
        (f" on {point['docroot']}" if len(s.stack.docroot) > 1 else "") + \
        (f" placed {point.factors['placement']}" if "placement" in point.factors else "")
    return f"{point.id} {point['trace']['name']}{extra} {point.mode} rep {point.repetition}"


def end_note(rows: list[dict[str, Any]]) -> str | None:
    """How many points were client-bound, and what to do about it; how many windows were not
    shown steady (tierbench.measure.steady); how many missed the caches (cold_cache)."""
    bound = [r for r in rows if r.get("client_bound")]
    unsteady = [r for r in rows if r.get("unsteady")]
    notes = []
    if bound:
        notes.append(f"tierbench: {len(bound)} of {len(rows)} points were client-bound: "
                     f"{bound[-1].get('client_bound_advice', '')}")
    if unsteady:
        notes.append(f"tierbench: {len(unsteady)} of {len(rows)} points' windows were not "
                     f"steady ({unsteady[-1].get('unsteady_why', '')}): use load.warmup: "
                     "steady, a longer warmup_max_s or a longer measure_s")
    cold = [r for r in rows if r.get("cold_cache")]
    if cold:
        notes.append(f"tierbench: {len(cold)} of {len(rows)} points missed the caches for more "
                     f"than {100 * webmetrics.COLD_CACHE_SHARE:.0f} % of their window (first touches of "
                     "a cold cache, or a working set above it): measure longer, or warm the "
                     "cache first (load.warm_pass; a study's --scale recommended does)")
    return "\n".join(notes) or None



def platform(mode: Mode) -> dict[str, Any]:
    """The CPUs a mode's `cpu:` gives the tiers it covers: how many (its cpuset) and how much
    of their time (cpu_time: its limit, else the count); empty without a cpuset."""
    cpu = mode.cpu or {}
    if not cpu.get("cpuset"):
        return {"cpus": None, "cpu_time": cpu.get("limit")}
    count = len(cpuparse(str(cpu["cpuset"])))
    return {"cpus": count, "cpu_time": cpu.get("limit") or float(count)}

