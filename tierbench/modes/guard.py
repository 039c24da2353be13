"""The rollback guard: a dead-man switch on every node (and this host) a mode changes.

Before a mode's first change, :meth:`Guard.arm` starts on each node the mode touches (over its
transport; on one host, here) the small detached agent of :mod:`tierbench.modes.deadman` from
tierbench's node bundle (:mod:`tierbench.nodeapp`, put in the agent's private folder), with
the commands that put the mode's snapshot back (:func:`plan`: made from the snapshot by the
same modules that restore it, ``restore_commands`` of endpoint, sysctls and cpus). A thread of
the controller renews each agent's heartbeat every fifth of the timeout. When the controller
restores the point itself, :meth:`Guard.disarm` stops the thread and removes each agent's
folder (the agent exits). When the controller stops renewing (it was killed, its machine died,
the SSH session dropped, or the mode cut the management path), each node runs its restore
commands by itself ``timeout_s`` seconds after the last renewal.

:func:`management_refusal` is the other half of keeping a node reachable: a mode that would
change the interface carrying SSH to a node is refused unless the cluster file says so.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
from collections.abc import Mapping
from typing import Any

from tierbench import nodeapp, transport
from tierbench.config.errors import ConfigError
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes import cpus, deadman, endpoint, sysctls
from tierbench.modes.model import Knobs, Mode
from tierbench.transport import Transport, TransportError

__all__ = ["DEFAULT_TIMEOUT_S", "Guard", "changes_interfaces", "local_timeout",
           "management_refusal", "plan"]

DEFAULT_TIMEOUT_S = 30.0
MIN_TIMEOUT_S = 5.0
TIMEOUT_ENV = "TIERBENCH_ROLLBACK_TIMEOUT_S"
RENEWALS_PER_TIMEOUT = 5
BASE = "/run"  # where the agents' private folders are made (a tmpfs: gone at reboot)


def local_timeout() -> float:
    """The guard's timeout on one host: $TIERBENCH_ROLLBACK_TIMEOUT_S, or 30 s."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not MIN_TIMEOUT_S <= value <= 3600:
        raise ConfigError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds from "
                          f"{MIN_TIMEOUT_S:g} to 3600 (the rollback guard's timeout)")
    return value


def plan(state: dict, mode: Mode) -> dict[str | None, dict[str, Any]]:
    """Per node (None: this host) its transport's record and the commands that restore the
    mode state ``state`` of :func:`tierbench.modes.apply.snapshot_mode` there, whatever the
    settings are now, in the order the controller's restore runs them."""
    out: dict[str | None, dict[str, Any]] = {}

    def add(where: Mapping[str, Any], argv: list[str], what: str, pid: int | None = None,
            ino: int | None = None, enter: bool = True) -> None:
        record = transport.of(where).record()
        out.setdefault(record.get("node"), {"record": record, "commands": []})[
            "commands"].append({"argv": argv, "what": what, "pid": pid, "netns_ino": ino,
                                "enter": enter})

    for label, snap in state.get("endpoints", {}).items():
        for argv in endpoint.restore_commands(snap, mode):
            add(snap, argv, label, snap.get("netns_pid"), snap.get("netns_ino"))
    for target, info in state.get("sysctls", {}).items():
        for argv in sysctls.restore_commands(info):
            add(info, argv, target, info.get("pid"), info.get("netns_ino"))
    for info, argv in cpus.restore_commands(state):
        container = "dirs" not in info  # a platform outlives its containers
        add(info, argv, str(info.get("label", "cpu")), info["pid"] if container else None,
            info.get("netns_ino"), enter=False)
    return out


class Guard:
    """The agents of one mode's change, armed before it and disarmed after its restore."""

    def __init__(self, timeout_s: float, base: str = BASE) -> None:
        self.timeout_s = float(timeout_s)
        self.base = base.rstrip("/") or "/"
        self.armed: list[tuple[Transport, str]] = []  # (where, the agent's folder there)
        self.failures: dict[str, str] = {}  # renewals that failed, by node (the last error)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self, state: dict, mode: Mode) -> None:
        """Start an agent on every node of the plan and the thread that renews them; raise
        NetifError (one sentence naming the node) when one cannot start: nothing is changed
        then, and the agents already started are disarmed."""
        try:
            for where in plan(state, mode).values():
                node = transport.of(where["record"])
                self.armed.append((node, self.start(node, where["commands"])))
        except NetifError:
            self.disarm()
            raise
        if self.armed:
            self._thread = threading.Thread(target=self._renew, name="rollback-guard",
                                            daemon=True)
            self._thread.start()

    def start(self, node: Transport, commands: list[dict]) -> str:
        """The agent armed on ``node`` with these restore commands: the node bundle put in a
        private folder under ``base`` there, then ``deadman arm`` of it (python3 there, this
        interpreter here); its folder, or NetifError in one sentence (the folder removed)."""
        python = "python3" if node.remote else sys.executable
        where = node.name or "this host"
        folder = ""
        try:
            try:
                folder = nodeapp.put(node, self.base, deadman.PREFIX)
            except nodeapp.NotPut as exc:
                raise NetifError(f"the rollback guard could not start on {where} ({self.base} "
                                 f"writable by the SSH user is needed there): {exc}") from None
            plan_text = json.dumps({"timeout_s": self.timeout_s, "commands": commands})
            done = node.run(nodeapp.program_argv(python, folder, "deadman", "arm", folder,
                                                 plan_text), timeout=30)
            if done.returncode != 0 or done.stdout.strip().splitlines()[-1:] != [folder]:
                err = " ".join((done.stderr or done.stdout or "no output").split())[-300:]
                raise NetifError(f"the rollback guard could not start on {where} (python3 is "
                                 f"needed there): {err}")
            return folder
        except (TransportError, NetifError) as exc:
            if folder:
                try:
                    node.run(["rm", "-rf", "--", folder], timeout=30)
                except TransportError:
                    pass
            if isinstance(exc, NetifError):
                raise
            raise NetifError(f"the rollback guard could not start on {where} ({exc}), so "
                             "no mode was applied there") from None

    def renew(self) -> None:
        """Touch every agent's heartbeat now (a node that does not answer is noted)."""
        for node, folder in self.armed:
            try:
                done = node.run(["touch", "-c", f"{folder}/heartbeat"],
                                timeout=max(1.0, self.timeout_s / 2))
                if done.returncode != 0:
                    self.failures[node.name or "this host"] = " ".join(
                        (done.stderr or "").split()) or f"exit {done.returncode}"
            except TransportError as exc:
                self.failures[node.name or "this host"] = str(exc)

    def _renew(self) -> None:
        while not self._stop.wait(self.timeout_s / RENEWALS_PER_TIMEOUT):
            self.renew()

    def disarm(self) -> list[str]:
        """Stop renewing and remove every agent's folder; returns what an agent that had
        already restored by itself said ([] = none fired)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s)
        fired: list[str] = []
        for node, folder in self.armed:
            q = shlex.quote(folder)
            try:
                done = node.run(["sh", "-c", f"cat {q}/fired 2>/dev/null; rm -rf -- {q}"],
                                timeout=30)
                said = (done.stdout or "").strip()
            except TransportError as exc:
                said = f"could not be disarmed ({exc}); it restores by itself"
            if said:
                fired.append(f"{node.name or 'this host'}: {said}")
        self.armed = []
        return fired


# ------------------------------------------------------------------------ the management path


def changes_interfaces(mode: Mode) -> bool:
    """Whether the mode changes its endpoints' interfaces (features, MTU, queues, qdisc ...);
    sysctls and CPUs are not an interface's."""
    k = mode.knobs
    return bool(mode.nic.features or mode.nic.mtu is not None
                or Knobs(sysctls=dict(k.sysctls)) != k)


def management_refusal(mode: Mode, endpoints: list[Endpoint], management: Mapping[str, str],
                       allowed: bool, where: str = "the cluster file") -> str | None:
    """Why ``mode`` may not be applied (one sentence), when it changes an interface that carries
    the controller's SSH to its node (``management``: node -> interface) and ``allowed``
    (allow_management_changes) is not set; None when it may."""
    if allowed or not changes_interfaces(mode):
        return None
    hit = [ep for ep in endpoints if ep.node and management.get(ep.node) == ep.ifname]
    if not hit:
        return None
    ep = hit[0]
    return (f"mode {mode.name} would change {ep.ifname} on {ep.node}, the interface that "
            f"carries the controller's SSH to it: a setting the link cannot take would cut the "
            f"node off; give the data plane an interface of its own in {where}, or set "
            f"allow_management_changes: true and rollback_timeout_s there if the management "
            f"and data planes are the same on purpose")
