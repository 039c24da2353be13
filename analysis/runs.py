"""Every run under a results folder at a glance (`tierbench runs`): experiment, start, status,
points, where it ran, kernel and git revision, newest first; study runs and advise sessions
too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = ("started", "experiment", "status", "points", "where", "kernel", "git", "folder")


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def runs(root: Path) -> list[dict[str, str]]:
    """One row per run folder (results/<experiment>/<run-id>/ with a manifest, or a study's
    results/study-<id>/<run-id>/), newest first."""
    out = []
    for manifest in Path(root).glob("*/*/manifest.json"):
        m = _json(manifest)
        exp = got if isinstance(got := m.get("experiment"), dict) else {}
        host = got if isinstance(got := m.get("host"), dict) else {}
        git = got if isinstance(got := m.get("git"), dict) else {}
        cluster = got if isinstance(got := m.get("cluster"), dict) else {}
        points = got if isinstance(got := m.get("points"), dict) else {}
        done = sum(1 for p in points.values() if isinstance(p, dict) and p.get("complete"))
        out.append({
            "started": str(m.get("started") or ""),
            "experiment": str(exp.get("name") or manifest.parent.parent.name),
            "status": str(m.get("status") or "?"),
            "points": str(done),
            "where": f"cluster {cluster.get('file')}" if cluster else "this host",
            "kernel": str(host.get("kernel") or ""),
            "git": (str(git.get("revision") or "")[:10] + ("+" if git.get("dirty") else "")),
            "folder": str(manifest.parent)})
    for record in Path(root).glob("study-*/*/study.json"):
        s = _json(record)
        entries = [e for r in s.get("rows") or [] for e in r.get("experiments") or []]
        done = sum(e.get("status") == "complete" for e in entries)
        out.append({
            "started": str(s.get("started") or ""), "experiment": f"study {s.get('study')}",
            "status": str(s.get("status") or "?"),
            "points": f"{done}/{len(entries)} experiments", "where": "", "kernel": "",
            "git": "", "folder": str(record.parent)})
    for record in Path(root).glob("advise/*/advise.json"):
        out.append(advise_row(record, _json(record)))
    return sorted(out, key=lambda r: r["started"], reverse=True)


def advise_row(record: Path, a: dict[str, Any]) -> dict[str, str]:
    """An advise session (results/advise/<run-id>/advise.json): its workloads measured of
    those asked, and how many of its advice rows recommend a change."""
    workloads = [w for w in a.get("workloads") or [] if isinstance(w, dict)]
    done = sum(w.get("status") == "complete" for w in workloads)
    cluster = a.get("cluster")
    return {"started": str(a.get("started") or ""),
            "experiment": f"advise ({a.get('budget_min', '?'):g} min)"
            if isinstance(a.get("budget_min"), (int, float)) else "advise",
            "status": str(a.get("status") or "?"),
            "points": f"{done}/{len(workloads)} workloads", "where":
            f"cluster {cluster}" if cluster else "this host", "kernel": "", "git": "",
            "folder": str(record.parent)}


def table(rows: list[dict[str, str]]) -> str:
    """The rows as an aligned text table."""
    if not rows:
        return "no runs here"
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in COLUMNS).rstrip() for r in rows]
    return "\n".join(lines)
