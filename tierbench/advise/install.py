"""`tierbench advise apply RUN`: the confirmed configuration of an advise run (config.json,
merge.read_config) set on interfaces of this host or of a cluster node, kept only when the
controller still reaches them.

Per interface, as a point applies a mode: a snapshot of what the configuration sets; the
rollback guard armed with the commands that put the snapshot back (tierbench.modes.guard: the
node-side dead-man agent restores by itself when the controller stops renewing it); the
settings applied and read back (tierbench.modes.apply); then the reachability check (the node
answers over its transport, its interface is up, and ``--check-address`` answers a ping when
given); only then the guard is disarmed and the settings stay. When the check fails, the
controller restores the snapshot, and when it cannot, the node restores it by itself at the
guard's timeout. The snapshot's restore commands are written as a revert script beside the
advice (applied/<where>-<interface>.revert.sh) before anything changes.

Not persistent by itself: the settings last until a reboot or a link reset; the persistent
forms are under persist/confirmed/ of the run.
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierbench.advise import knobs, merge
from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes import apply as modes_apply
from tierbench.modes import guard as rollback
from tierbench.modes.model import Mode
from tierbench.transport import LOCAL, Transport, TransportError

MODE = "advise-apply"
SETTLE_S = 2.0  # after the change, before the reachability check (a NIC may reset)


@dataclass(frozen=True)
class Target:
    """One interface to set and the `nic:` block it takes."""

    ep: Endpoint
    nic: dict[str, Any]


def targets(config: dict[str, Any], names: list[str] | None, via: Transport = LOCAL
            ) -> list[Target]:
    """The interfaces to set: ``names`` on this host or the node (the whole configuration on
    each), else the interfaces config.json lists on it that are not a container's."""
    if names:
        return [Target(Endpoint("host", n, None, via), dict(config.get("nic") or {}))
                for n in names]
    here = [i for i in config.get("interfaces") or []
            if i.get("node") == via.name and not i.get("container")]
    if not here:
        where = f"node {via.name}" if via.name else "this host"
        raise ConfigError(f"the confirmed configuration names no interface of {where} (the run "
                          "measured containers' or other nodes' interfaces): name the ones to "
                          "set with --interface")
    return [Target(Endpoint("host", str(i["ifname"]), None, via), dict(i["nic"])) for i in here]


def revert_script(state: dict[str, Any], mode: Mode) -> str:
    """The commands that put a snapshot back, as a shell script (those of the guard's plan)."""
    lines = ["#!/bin/sh", "# written by tierbench advise apply: puts back the settings the "
             "interface had before", "set -e"]
    for where in rollback.plan(state, mode).values():
        node = where["record"].get("node")
        for c in where["commands"]:
            line = " ".join(shlex.quote(str(a)) for a in c["argv"])
            if c.get("pid") is not None and c.get("enter", True):
                line = f"nsenter -t {int(c['pid'])} -n {line}"
            lines.append(f"# {c['what']}" + (f" (on node {node})" if node else ""))
            lines.append(line)
    return "\n".join(lines) + "\n"


def reachable(ep: Endpoint, address: str | None) -> str | None:
    """Why the interface's host is not reachable as before, or None: its transport answers,
    the interface is up, and ``address`` answers a ping through it."""
    try:
        done = ep.via.run(["true"], timeout=20)
        if done.returncode != 0:
            return f"{ep.via.name or 'this host'} did not answer ({done.returncode})"
        up = ep.via.run(["cat", f"/sys/class/net/{ep.ifname}/operstate"], timeout=20)
        state = (up.stdout or "").strip()
        if up.returncode != 0 or state not in ("up", "unknown"):
            return f"{ep.ifname} is {state or 'gone'} after the change"
        if address:
            return answers(ep, address)
    except TransportError as exc:
        return str(exc)
    return None


CONNECT = ("import socket, sys\n"
           "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()")


def answers(ep: Endpoint, address: str) -> str | None:
    """Why ``address`` does not answer from the interface's host, or None: ADDR:PORT a TCP
    connection (python3 there), ADDR two pings through the interface."""
    host, _, port = address.rpartition(":")
    if port.isdigit() and host and ":" not in host.strip("[]"):
        python = "python3" if ep.via.remote else sys.executable
        done = ep.via.run([python, "-c", CONNECT, host.strip("[]"), port], timeout=20)
        return None if done.returncode == 0 else \
            f"{address} did not take a TCP connection after the change"
    done = ep.via.run(["ping", "-c", "2", "-W", "2", "-I", ep.ifname, address], timeout=20)
    if done.returncode == 127 or "not found" in (done.stderr or ""):
        return f"cannot check {address}: ping is not installed (iputils-ping), give ADDR:PORT"
    return None if done.returncode == 0 else \
        f"{address} did not answer a ping through {ep.ifname}"


def apply_one(t: Target, out_dir: Path, timeout_s: float, address: str | None,
              settle_s: float = SETTLE_S) -> tuple[list[str], dict[str, Any]]:
    """Set one interface under the guard (module docstring); returns the lines to print and
    the snapshot of what it was.
    TierbenchError (one sentence) when it cannot be applied or kept: put back then."""
    mode = knobs.make_mode(MODE, "the confirmed configuration of an advise run", t.nic)
    where = t.ep.node or "host"
    try:
        state = modes_apply.snapshot_mode(mode, [t.ep])
    except NetifError as exc:
        raise TierbenchError(f"{t.ep.ifname} on {where} cannot be read: {exc}") from None
    problems = modes_apply.check_mode(mode, [t.ep], state)
    if problems:
        raise TierbenchError(f"{t.ep.ifname} on {where} cannot take the configuration, "
                             f"nothing was changed: {'; '.join(problems)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    script = out_dir / f"{where}-{t.ep.ifname}.revert.sh"
    script.write_text(revert_script(state, mode), encoding="utf-8")
    script.chmod(0o755)
    guard = rollback.Guard(timeout_s)
    try:
        guard.arm(state, mode)
        modes_apply.apply_mode(mode, [t.ep], state)
    except NetifError as exc:
        guard.disarm()
        raise TierbenchError(str(exc)) from None
    time.sleep(settle_s)
    why = reachable(t.ep, address)
    if why is not None:
        left = modes_apply.restore_state(state)
        guard.disarm()
        back = ("the previous settings were restored" if not left else
                f"restoring failed ({'; '.join(left)}): the node restores them by itself "
                f"within {timeout_s:g} s")
        raise TierbenchError(f"not kept on {t.ep.ifname} ({where}): {why}; {back}")
    fired = guard.disarm()
    if fired:
        raise TierbenchError(f"the rollback guard on {where} restored {t.ep.ifname} by itself "
                             f"before the change was confirmed ({'; '.join(fired)}): "
                             f"nothing is kept; raise {rollback.TIMEOUT_ENV}")
    return [f"{where} {t.ep.ifname}: set {knobs_text(t.nic)}; kept (reachable); revert: "
            f"{script}"], state


def knobs_text(nic: dict[str, Any]) -> str:
    """A `nic:` block as ethtool words: 'generic-receive-offload on, mtu 9000'."""
    parts = [f"{k} {'on' if v else 'off'}" for k, v in (nic.get("features") or {}).items()]
    if nic.get("mtu") is not None:
        parts.append(f"mtu {nic['mtu']}")
    parts += [f"{k} {v}" for part in ("channels", "rings", "coalesce")
              for k, v in (nic.get(part) or {}).items()]
    parts += [f"{k} {nic[k]}" for k in ("rps_cpus", "xps_cpus") if nic.get(k) is not None]
    return ", ".join(parts) or "nothing"


def check_run(folder: Path) -> dict[str, Any]:
    """An advise run's confirmed configuration (one sentence when there is none)."""
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such advise run folder")
    return merge.read_config(folder)


def apply_run(folder: Path, names: list[str] | None = None, via: Transport = LOCAL,
              address: str | None = None, settle_s: float = SETTLE_S) -> list[str]:
    """Every target of a run's confirmed configuration set in turn; one that cannot be kept
    puts back those set before it (their revert scripts) and ends it."""
    config = check_run(folder)
    timeout_s = rollback.local_timeout()
    done: list[tuple[Target, dict[str, Any]]] = []
    lines = [f"applying {', '.join(f'{k} {s}' for k, s in config['changes'].items())} "
             f"(confirmed by {folder.name})"]
    for t in targets(config, names, via):
        try:
            said, state = apply_one(t, folder / "applied", timeout_s, address, settle_s)
        except TierbenchError as exc:
            undo = [p for _, s in done for p in modes_apply.restore_state(s)]
            raise TierbenchError(f"{exc}" + ("" if not done else (
                "; the interfaces set before it were put back" if not undo else
                f"; putting back those set before it failed: {'; '.join(undo)}"))) from None
        lines += said
        done.append((t, state))
    return lines
