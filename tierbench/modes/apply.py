"""Apply a whole mode to endpoints, all or nothing: snapshot, check, apply, verify, restore.

A mode's settings go to three kinds of target, each with its module doing the same five steps
(snapshot, check, change, read back, restore): every endpoint it covers (`endpoint`: features,
MTU, channels, rings, coalescing, RSS, RPS/XPS, the root qdisc), the network namespaces or hosts
its sysctls live in (`sysctls`), and the containers or platform its cpu: sets (`cpus`). This
module runs the steps over all targets of a mode, all or nothing.

The state dict written to :class:`netif.StateFile` before the first change holds everything
``restore_state`` needs, so a later process (``tierbench clean``) can restore after a SIGKILL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes import cpus, endpoint, sysctls
from tierbench.modes.cpus import Containers
from tierbench.modes.guard import Guard
from tierbench.modes.model import Mode
from tierbench.transport import Transport

__all__ = [
    "SNAPSHOT_KEYS",
    "STATE_KIND",
    "apply_mode",
    "check_mode",
    "mode_applied",
    "restore_state",
    "snapshot_mode",
    "state_view",
    "verify_mode",
    "without_snapshots",
]


STATE_KIND = "tierbench-mode-state"


APPLY_PASSES = 2

# The keys of a point's record that hold the interfaces' and the modes' state before, during and
# after it: the bulk of the record (a few hundred KB a point on the 004 data center), kept in
# the point's point.json and, while the point runs, in the manifest (crash-safe)
SNAPSHOT_KEYS = ("interfaces_", "mode_state_")


def without_snapshots(record: dict) -> dict:
    """The record without its snapshot keys: the manifest's entry of a finished point, whose
    whole record is its point.json (the manifest would otherwise be rewritten whole, tens of
    MB, several times a point)."""
    return {k: v for k, v in record.items() if not k.startswith(SNAPSHOT_KEYS)}


def snapshot_mode(mode: Mode, endpoints: list[Endpoint],
                  containers: Containers | None = None,
                  taken: dict[str, dict] | None = None) -> dict[str, Any]:
    """Everything ``mode`` may touch on ``endpoints`` and in their netns/host sysctls (JSON);
    ``containers`` (label, node, PID on the node): on a cluster, the containers a cpu: mode
    covers (on one host they are those behind the endpoints' namespaces); ``taken``: endpoint
    snapshots (endpoint.snapshot) just taken, by label, used instead of reading again."""
    taken = taken or {}
    state: dict[str, Any] = {"version": 2, "kind": STATE_KIND, "mode": mode.name,
                             "endpoints": {ep.label: taken.get(ep.label)
                                           or endpoint.snapshot(ep, mode)
                                           for ep in endpoints},
                             "sysctls": sysctls.snapshot(mode, endpoints)}
    if mode.cpu:
        state.update(cpus.snapshot(mode, endpoints, containers))
    return state


def check_mode(mode: Mode, endpoints: list[Endpoint], state: dict | None = None,
               containers: Containers | None = None) -> list[str]:
    """Every reason ``mode`` cannot be applied to ``endpoints`` ([] = ok); changes nothing.

    ``state`` is a snapshot from :func:`snapshot_mode`; without one a snapshot is taken.
    ``containers``: as for snapshot_mode.
    """
    problems: list[str] = []
    if state is None:
        state = {"endpoints": {}}
        for ep in endpoints:
            try:
                state["endpoints"][ep.label] = endpoint.snapshot(ep, mode)
            except NetifError as exc:
                problems.append(f"{ep.label} cannot be read: {exc}")
    for ep in endpoints:
        snap = state["endpoints"].get(ep.label)
        if snap is None:
            if not any(p.startswith(f"{ep.label} cannot be read") for p in problems):
                problems.append(f"{ep.label}: no snapshot was taken before checking")
            continue
        problems += endpoint.problems(snap, mode)
    nodes = sysctls.nodes(endpoints)
    kernels: list[Transport | None] = [*nodes] if nodes else [None]  # or this host's
    for node in kernels:
        qp = endpoint.qdisc_problem(mode, node)
        if qp and qp not in problems:
            problems.append(qp)
    if mode.cpu and nodes and not containers and "cpu" not in state:
        problems.append(f"mode {mode.name} sets the CPUs of containers (cpu:), and no container "
                        "it covers was given for the cluster's nodes")
    elif mode.cpu:
        problems += cpus.problems(mode, state if "cpu" in state else
                                  {"cpu": cpus.targets(endpoints, containers)})
    return problems + sysctls.problems(mode, endpoints)


def apply_mode(mode: Mode, endpoints: list[Endpoint], state: dict) -> None:
    """Check, apply, read back; on any failure restore ``state`` and raise NetifError."""
    problems = check_mode(mode, endpoints, state)
    if problems:
        raise NetifError(f"mode {mode.name} cannot be applied, nothing was changed: "
                         + "; ".join(problems))
    failure: str | None = None
    mismatches: list[str] = []
    for _ in range(APPLY_PASSES):
        try:
            for ep in endpoints:
                endpoint.change(ep, state["endpoints"][ep.label], mode)
            sysctls.change(mode, state)
            cpus.change(mode, state)
        except NetifError as exc:
            failure = str(exc)
            ep_snap = next((s for s in state["endpoints"].values()
                            if failure.startswith(s.get("label", "") + ":")), None)
            if ep_snap is not None:
                failure += f" (driver {ep_snap.get('driver', 'unknown')})"
            break
        mismatches = verify_mode(mode, endpoints, state)
        if not mismatches:
            return
    leftovers = [p for p in restore_state(state) if "gone, nothing to restore" not in p]
    msg = f"could not apply mode {mode.name}: " + "; ".join(
        ([failure] if failure else []) + mismatches)
    if leftovers:
        msg += "; restoring the snapshot also failed: " + "; ".join(leftovers)
    else:
        msg += "; the previous settings were restored"
    raise NetifError(msg)


def verify_mode(mode: Mode, endpoints: list[Endpoint], state: dict | None = None,
                fresh: dict | None = None) -> list[str]:
    """Re-read every setting of ``mode`` (sub-features included; ``fresh``: a mode state just
    taken by snapshot_mode, compared instead of reading again); return mismatches."""
    out: list[str] = []
    snaps = (state or {}).get("endpoints", {})
    now = (fresh or {}).get("endpoints", {})
    for ep in endpoints:
        try:
            out += endpoint.mismatches(ep, mode, snaps.get(ep.label), now.get(ep.label))
        except NetifError as exc:
            out.append(f"{ep.label}: could not re-read the settings: {exc}")
    out += sysctls.mismatches(mode, endpoints, state, (fresh or {}).get("sysctls"))
    if mode.cpu:
        out += cpus.mismatches(mode, state or snapshot_mode(mode, endpoints))
    return out


def restore_state(state: dict) -> list[str]:
    """Put back everything in ``state``; return problems ([] = done; gone ones are reported).

    Accepts the mode state of :func:`snapshot_mode` and the older {label: snapshot} form.
    Lines about endpoints or namespaces that no longer exist contain "gone, nothing to restore".
    """
    if state.get("kind") != STATE_KIND:
        return netif.restore(state)
    problems: list[str] = []
    for label, snap in state.get("endpoints", {}).items():
        try:
            problems += endpoint.restore(snap)
        except Exception as exc:  # noqa: BLE001 - restore must carry on with the others
            problems.append(f"{label}: restore failed unexpectedly: {exc}")
    for target, info in state.get("sysctls", {}).items():
        try:
            problems += sysctls.restore(target, info)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{target}: restore failed unexpectedly: {exc}")
    return problems + cpus.restore(state)


def state_view(state: dict) -> dict[str, Any]:
    """Compact manifest form: per endpoint settings_view plus the extras, and the sysctls."""
    if state.get("kind") != STATE_KIND:
        return {label: netif.settings_view(s) for label, s in state.items()}
    return {"endpoints": {label: endpoint.view(snap)
                          for label, snap in state.get("endpoints", {}).items()},
            "sysctls": {t: sysctls.view(i) for t, i in state.get("sysctls", {}).items()},
            **cpus.view(state)}


@contextmanager
def mode_applied(mode: Mode, eps: list[Endpoint], watched: list[Endpoint],
                 state_file: netif.StateFile, record: dict, settle_s: float,
                 save: Callable[[], None],
                 containers: Containers | None = None,
                 rollback_s: float | None = None) -> Iterator[None]:
    """Apply a mode to its endpoints for the body of the `with`, verified, and restore it after,
    whatever happens. ``record`` (the point's manifest entry) gets the interfaces and the mode's
    settings before, during and after; the pre-change state is on disk (``state_file``) before
    the first change, so `tierbench clean` can restore after a crash, and with ``rollback_s``
    the rollback guard is armed on every node the mode changes (and this host) before the
    first change, so that they restore by themselves ``rollback_s`` seconds after the
    controller stops renewing it (:mod:`tierbench.modes.guard`). ``containers``: as for
    snapshot_mode."""
    watched = watched + [ep for ep in eps if ep not in watched]

    def interfaces() -> tuple[dict, dict[str, dict]]:
        """The watched interfaces' views, and the snapshots of the mode's endpoints (taken
        once, for both). An endpoint whose container stopped (a failure test, a crash) is
        recorded as gone."""
        views, snaps = {}, {}
        for ep in watched:
            try:
                snap = endpoint.snapshot(ep, mode) if ep in eps else netif.snapshot(ep)
            except NetifError as exc:
                views[ep.label] = {"gone": str(exc)}
                continue
            views[ep.label] = netif.settings_view(snap)
            if ep in eps:
                snaps[ep.label] = snap
        return views, snaps

    def present(views: dict) -> dict:
        return {k: v for k, v in views.items() if "gone" not in v}

    record["endpoints"] = [ep.label for ep in eps]
    record["interfaces_before"], taken = interfaces()
    state = snapshot_mode(mode, eps, containers, taken)
    record["mode_state_before"] = state_view(state)
    state_file.save(state)
    save()
    problems: list[str] = []
    armed = Guard(rollback_s) if rollback_s and not mode.sets_nothing else None
    try:
        if armed is not None:
            armed.arm(state, mode)
            record["rollback"] = {"timeout_s": rollback_s,
                                  "agents": {n.name or "this host": folder
                                             for n, folder in armed.armed}}
        apply_mode(mode, eps, state)
        time.sleep(settle_s)
        record["interfaces_during"], taken = interfaces()
        during = snapshot_mode(mode, eps, containers, taken)
        record["mode_state_during"] = state_view(during)
        mismatches = verify_mode(mode, eps, state, during)
        record["mode_verified"] = not mismatches
        if mismatches:
            raise NetifError(f"mode {mode.name} did not hold: {'; '.join(mismatches)}")
        yield
    finally:
        problems = [p for p in restore_state(state) if "gone, nothing to restore" not in p]
        if armed is not None:
            fired = armed.disarm()
            if fired:  # the controller's renewals stopped reaching it (a cut path)
                record["rollback_fired"] = fired
        record["interfaces_after"], taken = interfaces()
        live = [ep for ep in eps if "gone" not in record["interfaces_after"].get(ep.label, {})]
        try:
            record["mode_state_after"] = state_view(snapshot_mode(mode, live, containers,
                                                                  taken))
        except NetifError as exc:  # a container (on a node) that stopped: nothing to read
            record["mode_state_after"] = {"error": str(exc)}
        after = present(record["interfaces_after"])
        record["restored"] = not problems and (
            after == {k: v for k, v in record["interfaces_before"].items() if k in after}
            and _endpoints_subset(record["mode_state_after"], record["mode_state_before"]))
        if problems:
            record["restore_problems"] = problems
        else:
            state_file.clear()
    if record.get("rollback_fired"):
        raise NetifError(f"the rollback guard put mode {mode.name}'s settings back by itself "
                         f"during {record.get('point', 'the point')} (the controller's renewals "
                         f"stopped reaching it: {'; '.join(record['rollback_fired'])}), so the "
                         "point did not measure the mode; check the link to that node")
    if problems:
        raise NetifError("interfaces could not be restored after "
                         f"{record.get('point', 'the point')}: {'; '.join(problems)}; "
                         "run `tierbench clean`")


def _endpoints_subset(after: dict, before: dict) -> bool:
    """The mode's state after equals the state before wherever it could still be read (an
    endpoint or netns whose container stopped has nothing left to compare)."""
    return all({k: before.get(part, {}).get(k) for k in after.get(part, {})} == after.get(part, {})
               for part in ("endpoints", "sysctls", "cpu", "platform"))
