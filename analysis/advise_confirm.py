"""The merged configuration and its confirmation in the advice (advice.csv's rows "merged",
"confirmation" and "configuration"; advice.html's card), from advise.json's ``confirmation``
(written by tierbench.advise.run: the workloads' weighted votes, each round's paired
intervals of the configuration against the current one per workload, what was dropped and
why). Reads result files only.
"""

from __future__ import annotations

from typing import Any

ROLES = ("throughput", "latency", "tail", "cpu")


def _votes(record: dict[str, Any], knob: str, state: str) -> str:
    """Each workload's vote on a change with its weight: 'first +1 (x1)'."""
    conf = record.get("confirmation") or {}
    weights = conf.get("weights") or {}
    return ", ".join(f"{v['workload']} {v['vote']:+d} (x{weights.get(v['workload'], 1):g})"
                     for v in conf.get("votes") or []
                     if v.get("knob") == knob and v.get("state") == state)


def rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """advice.csv's rows of the merge and the confirmation (none before a run merged)."""
    conf = record.get("confirmation") or {}
    if "merged" not in conf:
        return []
    merged = conf.get("merged") or {}
    out: list[dict[str, Any]] = []
    for s in conf.get("scores") or []:
        inside = merged.get(s["knob"]) == s["state"]
        out.append({"workload": "(all)", "row": "merged", "knob": s["knob"],
                    "tested": s["state"],
                    "recommendation": "merged" if inside else "left out",
                    "reason": f"{s.get('why')} (votes: better +1, worse -1, undecided 0: "
                              f"{_votes(record, s['knob'], s['state'])})"})
    for n, rnd in enumerate(conf.get("rounds") or []):
        for w, o in (rnd.get("workloads") or {}).items():
            row: dict[str, Any] = {
                "workload": w, "row": "confirmation", "knob": f"configuration (round {n + 1})",
                "tested": ", ".join(o.get("taken") or []), "confidence": 0.95,
                "blocks": o.get("blocks"), "method": "stein",
                "recommendation": o.get("verdict"), "reason": o.get("text")}
            for role in ROLES:
                e = (o.get("effects") or {}).get(role) or {}
                row.update({f"{role}_effect_pct": e.get("effect_pct"),
                            f"{role}_low_pct": e.get("low_pct"),
                            f"{role}_high_pct": e.get("high_pct")})
            out.append(row)
    confirmed = conf.get("confirmed") or {}
    for knob, state in confirmed.items():
        out.append({"workload": "(all)", "row": "configuration", "knob": knob,
                    "recommended_state": state, "recommendation": "confirmed",
                    "reason": conf.get("status")})
    for d in conf.get("dropped") or []:
        knob, _, state = str(d["change"]).partition(" ")
        out.append({"workload": "(all)", "row": "configuration", "knob": knob,
                    "tested": state, "recommendation": "dropped",
                    "reason": f"round {d.get('round')}: {d.get('because')}"})
    if not confirmed:
        out.append({"workload": "(all)", "row": "configuration", "knob": "(none)",
                    "recommendation": "current configuration kept",
                    "reason": conf.get("status")})
    return out


def view(record: dict[str, Any], table: list[dict[str, Any]]) -> dict[str, Any] | None:
    """advice.html's card of the configuration: its status, the rounds' intervals per
    workload, what was dropped (None before a run merged)."""
    conf = record.get("confirmation") or {}
    if "merged" not in conf:
        return None
    return {"status": conf.get("status"), "merged": conf.get("merged") or {},
            "confirmed": conf.get("confirmed") or {}, "dropped": conf.get("dropped") or [],
            "weights": conf.get("weights") or {},
            "rounds": [r for r in table if r.get("row") == "confirmation"]}
