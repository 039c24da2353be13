"""Offered rates as fractions of a mode's measured maximum (`load.rate_of_max`): the maximum is
what a closed loop of the same engine, users, processes and windows delivers with the mode
set, measured once per run and condition (mode, trace, users, docroot, placement: every factor
but the fraction and the repetition) by the first point that needs it, before its own load, and
kept in the run's MAX_FILE so that the condition's other points (other fractions, other
repetitions, a resumed run) offer their fractions of the same maximum."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from tierbench.kinds.web.load import LoadgenError, LoadResult, LoadSpec, served_between

MAX_FILE = "max_rate.json"  # in the run's folder: {condition key: the maximum's record}


def condition_key(mode: str, factors: dict[str, Any]) -> str:
    """The condition a maximum belongs to: the mode and every factor but the fraction and the
    repetition (a trace by its name), as one JSON string."""
    out = {"mode": mode}
    for k, v in sorted(factors.items()):
        if k in ("rate_of_max", "repetition"):
            continue
        out[k] = v["name"] if k == "trace" and isinstance(v, dict) else v
    return json.dumps(out, sort_keys=True)


def maximum(run_dir: Path, key: str, spec: LoadSpec, point_id: str, point_dir: Path,
            run_closed: Callable[[LoadSpec, Path], LoadResult]) -> dict[str, Any]:
    """The condition's maximum ({"tps", "point", ...}): from MAX_FILE when an earlier point
    measured it (`"reused": True`), else measured now by `run_closed` (the engine run of a
    closed loop: spec without its rate) into point_dir/max and recorded in MAX_FILE."""
    path = run_dir / MAX_FILE
    known = json.loads(path.read_text()) if path.is_file() else {}
    if key in known:
        return {**known[key], "reused": True}
    sub = point_dir / "max"
    sub.mkdir(exist_ok=True)
    sub.chmod(point_dir.stat().st_mode & 0o777)
    result = run_closed(replace(spec, rate=None), sub)
    lo, hi = result.window
    served = served_between(result, lo, hi)
    if hi <= lo or served <= 0:
        raise LoadgenError("the closed loop that measures the maximum for rate_of_max answered "
                           f"no request in its {hi - lo:.1f} s window")
    entry = {"tps": round(served / (hi - lo), 3), "point": point_id, "engine": spec.engine,
             "users": spec.users, "processes": spec.processes, "window_s": round(hi - lo, 3),
             "measured_at": round(time.time(), 3), "files": "max/"}
    known[key] = entry
    path.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    return {**entry, "reused": False}


def offered(fraction: float, entry: dict[str, Any]) -> float:
    """The rate a fraction offers: of the maximum, at least 1 request/s."""
    return max(1.0, round(fraction * float(entry["tps"]), 3))
