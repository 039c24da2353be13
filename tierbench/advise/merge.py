"""One configuration from the workloads' verdicts, and what its confirmation keeps of it.

Each workload's knob rows (analysis.advise: the rule under Holm's control) are votes on a
change (a knob in its tested state): +1 when the workload recommends it (better beyond the
threshold), -1 when it keeps the current state because the change is worse beyond the
threshold, 0 when it decides nothing; with the change's effect on the workload's primary
metric. A change is in the merged configuration when at least one workload recommends it,
none finds it worse beyond the threshold (whatever the weights: a configuration that makes
one worse is not recommended), and its mean effect weighted by the workloads' weights
(``--weights name=w,...``; default equal; weight 0: the workload does not count) is above 0.

The confirmation (tierbench.advise.confirm) measures the merged configuration against the
current one on every workload; when one is worse beyond the threshold (its interval's near end),
``drop`` takes out the change that looked worst on that workload, and the rest is measured
again; what is left when no workload is worse is the confirmed configuration.
``interfaces`` spreads it over the interfaces of the workloads that can change each knob.
Pure functions over the record and the advice's rows; written to config.json by
``write_config``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierbench.advise import knobs
from tierbench.config.errors import ConfigError

CONFIG = "config.json"


@dataclass(frozen=True)
class Vote:
    """One workload's verdict on one change: ``vote`` +1 better, -1 worse, 0 undecided;
    ``effect_pct``: the change's effect on the workload's primary metric, signed so that
    positive is better (None: not measured)."""

    workload: str
    knob: str
    state: str
    vote: int
    effect_pct: float | None = None


@dataclass
class Merged:
    """The merged configuration: the changes (knob -> state) with their weighted scores, and
    every change voted on with its votes (for the advice)."""

    changes: dict[str, str] = field(default_factory=dict)
    scores: dict[tuple[str, str], float] = field(default_factory=dict)
    votes: list[Vote] = field(default_factory=list)
    why: dict[tuple[str, str], str] = field(default_factory=dict)

    def names(self) -> list[str]:
        """The changes as the advice says them: 'gro on'."""
        return [f"{k} {s}" for k, s in self.changes.items()]


def parse_weights(text: str | None, names: list[str]) -> dict[str, float]:
    """``name=w,...`` as weights of the workloads (those not named: 1); one sentence when a
    name is not a workload of the run or a weight is not a number at least 0."""
    out = dict.fromkeys(names, 1.0)
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in out:
            raise ConfigError(f"--weights: {name!r} is not a workload of this run (workloads: "
                              f"{', '.join(names)})")
        try:
            w = float(value)
        except ValueError:
            w = -1.0
        if not w >= 0 or w != w or w == float("inf"):
            raise ConfigError(f"--weights: {name}={value.strip()!r} is not a weight (a number "
                              "at least 0)")
        out[name] = w
    if names and not any(out.values()):
        raise ConfigError("--weights: every weight is 0: at least one workload must count")
    return out


def vote_of(workload: str, knob: dict[str, Any], row: dict[str, Any], better: str) -> Vote | None:
    """A workload's vote on its knob's change from the knob's advice row (None: the knob was
    not measured or cannot change)."""
    tested, now = knob.get("target"), knob.get("state")
    rec, state = row.get("recommendation") or "", row.get("recommended_state") or ""
    if tested not in ("on", "off") or rec in ("", "cannot change", "not measured"):
        return None
    vote = 1 if state == tested and state != now else \
        -1 if rec in ("enable", "disable") and state == now else 0
    raw = row.get("effect_pct")
    effect = None if raw in (None, "") else float(raw) * (1 if better == "higher" else -1)
    return Vote(workload, str(knob["knob"]), str(tested), vote, effect)


def votes(record: dict[str, Any], table: list[dict[str, Any]]) -> list[Vote]:
    """Every measured workload's votes, from its knob rows of advice.csv."""
    out = []
    for w in record.get("workloads") or []:
        primary = str(w.get("primary"))
        metric = (w.get("metrics") or {}).get(primary) or {}
        rows = {r["knob"]: r for r in table if r.get("workload") == w.get("name")
                and r.get("row") == "knob"}
        for k in w.get("knobs") or []:
            r = rows.get(k["knob"])
            if r is None:
                continue
            v = vote_of(str(w["name"]), k, {**r, "effect_pct": r.get(f"{primary}_effect_pct")},
                        str(metric.get("better", "higher")))
            if v is not None:
                out.append(v)
    return out


def merge(all_votes: list[Vote], weights: dict[str, float]) -> Merged:
    """The changes at least one workload (of weight above 0) recommends, none finds worse
    beyond the threshold, and whose weighted mean effect on the workloads' primary metrics
    (signed: positive is better) is above 0; of a knob merged in both states, the higher. In
    the order first voted on; every change voted on gets its score and why in ``why``."""
    keys = list(dict.fromkeys((v.knob, v.state) for v in all_votes))
    out = Merged(votes=list(all_votes))
    for key in keys:
        mine = [v for v in all_votes if (v.knob, v.state) == key
                and weights.get(v.workload, 1.0) > 0]
        worse = [v.workload for v in mine if v.vote < 0]
        told = [(weights.get(v.workload, 1.0), v.effect_pct) for v in mine
                if v.effect_pct is not None]
        total = sum(w for w, _ in told)
        score = sum(w * (e or 0.0) for w, e in told) / total if total > 0 else 0.0
        out.scores[key] = score
        if worse:
            out.why[key] = f"worse beyond the threshold on {', '.join(worse)}: left out"
        elif not any(v.vote > 0 for v in mine):
            out.why[key] = "no workload measured it better beyond the threshold: left out"
        elif score <= 0:
            out.why[key] = f"weighted mean effect {score:+.1f} %: left out"
        else:
            out.why[key] = (f"better on {', '.join(v.workload for v in mine if v.vote > 0)}, "
                            f"worse on none; weighted mean effect {score:+.1f} %: merged")
    for (knob, state), score in out.scores.items():
        other = (knob, "off" if state == "on" else "on")
        if out.why[(knob, state)].endswith(": merged") and not (
                out.why.get(other, "").endswith(": merged") and out.scores[other] > score):
            out.changes[knob] = state
    return out


def drop(changes: dict[str, str], offenders: list[str], all_votes: list[Vote]) -> str:
    """The change to take out when the configuration made ``offenders`` worse: the one whose
    own effect on them looked worst (summed over them; a change not measured there counts 0;
    ties: the last merged)."""
    def harm(knob: str) -> float:
        return sum(v.effect_pct or 0.0 for v in all_votes
                   if v.knob == knob and v.state == changes[knob] and v.workload in offenders)

    order = list(changes)
    return min(reversed(order), key=harm)


def settings(entry: dict[str, Any], changes: dict[str, str],
             side: str | None = None) -> tuple[dict, dict, list[str]]:
    """A workload's `nic:` block of the changes its interfaces can make, the block that puts
    back what they replace, and the changes it takes (knob state); ``side`` (server or
    client): only the changes of knobs planned for that side or for both (None or both: every
    change)."""
    plans = {k["knob"]: k for k in entry.get("knobs") or [] if k.get("changeable")}
    on, back, taken = [], [], []
    for knob, state in changes.items():
        k = plans.get(knob)
        if k is None or k.get("state") == state or not k.get(state):
            continue
        if side in knobs.SIDES and k.get("side", knobs.BOTH) not in (side, knobs.BOTH):
            continue
        on.append(k[state])
        taken.append(f"{knob} {state}")
        if k.get("state") in ("on", "off") and k.get(k["state"]):
            back.append(k[k["state"]])
    return knobs.merged(on), knobs.merged(back), taken


def by_side(entry: dict[str, Any], changes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A workload's `nic:` block per side of its interfaces (server and client where they are
    separate, else both): what knobs.side_mode makes one mode of, when it can."""
    sides = {ep.get("side") for ep in entry.get("endpoints") or []}
    if not (sides and sides <= set(knobs.SIDES)):
        return {knobs.BOTH: settings(entry, changes)[0]}
    return {side: settings(entry, changes, side)[0] for side in sorted(sides)}


def start_nic(record: dict[str, Any]) -> dict[str, Any]:
    """The `nic:` block of the stated starting configuration (advise --from), or {}."""
    return dict((record.get("from") or {}).get("nic") or {})


def interfaces(record: dict[str, Any], changes: dict[str, str],
               taking: Callable[[dict[str, Any], dict[str, str], str | None],
                                tuple[dict, dict, list[str]]] | None = None
               ) -> list[dict[str, Any]]:
    """The configuration per interface (node and label): the changes of every workload whose
    endpoints include it (``taking``: what a workload's interface of a side takes, settings
    by default); over the starting configuration (--from) on every interface, when the run
    had one."""
    start = start_nic(record)
    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    for w in record.get("workloads") or []:
        for ep in w.get("endpoints") or []:
            nic, back, taken = (taking or settings)(w, changes, ep.get("side"))
            if not taken and not (start and w.get("status") == "complete"):
                continue
            key = (ep.get("node"), ep.get("label"))
            item = out.setdefault(key, {
                "node": ep.get("node"), "label": ep.get("label"), "ifname": ep.get("ifname"),
                "driver": ep.get("driver"), "container": ep.get("container"),
                "side": ep.get("side") or knobs.BOTH, "cpu_mask": ep.get("cpu_mask"),
                "workloads": [], "changes": [], "nic": {}, "revert": {}})
            item["workloads"].append(w["name"])
            item["changes"] = list(dict.fromkeys(item["changes"] + taken))
            item["nic"] = knobs.merged([item["nic"], nic])
            item["revert"] = knobs.merged([item["revert"], back])
    for item in out.values():
        item["nic"] = knobs.merged([start, item["nic"]])
    return list(out.values())


def current(entry: dict[str, Any], changes: dict[str, str],
            side: str | None = None) -> tuple[dict, dict, list[str]]:
    """What keeping the measured configuration pins on a workload's interface (``side`` as
    for settings; ``changes`` unused): the current state of every knob its run measured (not
    left out by the design, changed by the trials, on or off now), so that a driver's or
    kernel's default cannot move it; nothing to revert."""
    del changes
    on, taken = [], []
    for k in entry.get("knobs") or []:
        state = k.get("state")
        if not k.get("changeable") or k.get("left_out") or state not in ("on", "off") or \
                not k.get(state):
            continue
        if side in knobs.SIDES and k.get("side", knobs.BOTH) not in (side, knobs.BOTH):
            continue
        on.append(k[state])
        taken.append(f"{k['knob']} {state} (kept)")
    return knobs.merged(on), {}, taken


def kept(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The configuration kept when nothing is confirmed, per interface of the workloads
    measured: each measured knob's current state (current), over the starting configuration
    (--from) when there was one; what persist/kept/ pins."""
    done = {**record, "workloads": [w for w in record.get("workloads") or []
                                    if w.get("status") == "complete"]}
    return interfaces(done, {}, current)


def union(record: dict[str, Any], changes: dict[str, str]) -> dict[str, Any]:
    """The whole configuration as one `nic:` block (what `advise apply --interface` sets)."""
    return knobs.merged([w["nic"] for w in interfaces(record, changes)])


def write_config(folder: Path, record: dict[str, Any]) -> Path:
    """config.json: the merged and the confirmed configuration, per interface, with the
    confirmation's verdict (what `tierbench advise apply` reads)."""
    conf = record.get("confirmation") or {}
    confirmed = conf.get("confirmed") or {}
    is_confirmed = bool(conf.get("is_confirmed")) and bool(confirmed)
    data = {"run": folder.name, "weights": conf.get("weights"), "from": record.get("from"),
            "merged": conf.get("merged") or {}, "status": conf.get("status", "not run"),
            "confirmed": is_confirmed, "changes": confirmed, "dropped": conf.get("dropped") or [],
            "nic": union(record, confirmed) if confirmed else {},
            "interfaces": interfaces(record, confirmed) if confirmed else []}
    if not is_confirmed:  # what is kept instead, pinned (persist/kept/)
        items = kept(record)
        data["kept"] = {"nic": knobs.merged([i["nic"] for i in items]), "interfaces": items}
    path = folder / CONFIG
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of an advise folder, confirmed; ConfigError (one sentence) when there is
    none or it holds no confirmed configuration."""
    path = folder / CONFIG
    if not (folder / "advise.json").is_file():
        raise ConfigError(f"{folder} is not an advise run's folder (no advise.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{folder} has no confirmed configuration (no {CONFIG}: the run "
                          "predates the confirmation, or did not finish)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    if not data.get("confirmed"):
        raise ConfigError(f"{folder} has no confirmed configuration to apply "
                          f"({data.get('status') or 'not confirmed'})")
    return dict(data)
