"""Snapshot, check, apply, verify and restore NIC offload settings on endpoints.

An endpoint is one network interface in one network namespace (the host's, or the
namespace of a given PID), on this machine or on a cluster node.  Everything goes through the
``ethtool``, ``ip`` and ``tc`` command-line tools; endpoints in another namespace are reached
with ``nsenter -t PID -n``, endpoints on a node over SSH (the endpoint carries the node's
transport, tierbench.transport, and snapshots record it, so that a later process can restore from
the state file alone). sysfs is never read, because inside ``nsenter -n`` it still
shows the host's interfaces.

The decision logic (capability check, verification, restore plan) is written as pure
functions over snapshot dicts in :mod:`tierbench.interfaces.features` (``feature_problems``,
``feature_mismatches``, ``restore_plan``, ``restore_differences``, re-exported here) so it can
be tested against captured ``ethtool -k`` output. An endpoint's reads go in one command
(:func:`run_all`: one shell, one SSH connection on a node): its snapshot, and its features and
MTU when verified or restored.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tierbench import transport
from tierbench.config.errors import TierbenchError
from tierbench.config.files import state_dir
from tierbench.interfaces.features import (
    FEATURE_ALIASES,
    NicSettings,
    feature_mismatches,
    feature_problems,
    onoff,
    parse_features,
    restore_differences,
    restore_plan,
    wanted_feature_args,
)
from tierbench.transport import LOCAL, Transport

__all__ = [
    "FEATURE_ALIASES",
    "Endpoint",
    "NetifError",
    "NicSettings",
    "StateFile",
    "apply",
    "check",
    "driver",
    "endpoint_of",
    "feature_mismatches",
    "feature_problems",
    "netns_inode",
    "onoff",
    "parse_features",
    "read_features",
    "restore",
    "restore_differences",
    "restore_commands",
    "restore_endpoint",
    "restore_plan",
    "run_all",
    "run_in",
    "run_ns",
    "set_features",
    "set_mtu",
    "settings_view",
    "snapshot",
    "verify",
    "veth_endpoints",
    "wanted_feature_args",
]

COMMAND_TIMEOUT_S = 30.0
RESTORE_PASSES = 3
APPLY_PASSES = 2

class NetifError(TierbenchError):
    """A network-interface operation failed; the message is one sentence for the user."""


@dataclass(frozen=True)
class Endpoint:
    """One network interface (``ifname``) inside the netns of ``netns_pid`` (None = host), on
    this machine or, through ``via``, on a cluster node reached over SSH; ``peers``: on a
    cluster, the data-plane addresses of the run's other nodes (a congestion control is set on
    the routes to them, tierbench.modes.congctl)."""

    tier: str
    ifname: str
    netns_pid: int | None
    via: Transport = LOCAL
    peers: tuple[str, ...] = ()

    @property
    def node(self) -> str | None:
        """The cluster node the interface is on (None: this machine)."""
        return self.via.name

    @property
    def label(self) -> str:
        """Return the display name, e.g. ``web:eth0`` or ``host:veth12ab``."""
        return f"{self.tier}:{self.ifname}"


# --------------------------------------------------------------------------- commands

def run_ns(pid: int | None, argv: list[str], who: str, via: Transport = LOCAL) -> str:
    """Run ``argv`` in the netns of ``pid`` (None: the host's), on this machine or on the node
    ``via`` reaches; return stdout, raise NetifError naming ``who`` on any failure."""
    shown = " ".join(argv)
    try:
        proc = via.run(argv, netns=pid, timeout=COMMAND_TIMEOUT_S)
    except transport.TransportError as exc:
        raise _not_run(exc, shown, who) from None
    failed = _failed(proc, shown, who, via)
    if failed:
        raise NetifError(failed)
    return proc.stdout


def run_all(pid: int | None, argvs: list[list[str]], who: str, via: Transport = LOCAL
            ) -> list[tuple[str | None, str | None]]:
    """Run every argv in the netns of ``pid`` (as run_ns) in one round trip (one command: on a
    node, one SSH connection); return per argv (stdout, None), or (None, the sentence run_ns
    would have raised) for one that failed. NetifError when none could run."""
    try:
        done = via.run_batch(argvs, netns=pid, timeout=COMMAND_TIMEOUT_S)
    except transport.TransportError as exc:
        raise _not_run(exc, "; ".join(" ".join(a) for a in argvs), who) from None
    out: list[tuple[str | None, str | None]] = []
    for argv, proc in zip(argvs, done):
        failed = _failed(proc, " ".join(argv), who, via)
        if failed and proc.returncode == 127 and "not found" in (proc.stderr or ""):
            failed = f"{who}: cannot run `{' '.join(argv)}` because {argv[0]} is not installed"
        out.append((None, failed) if failed else (proc.stdout, None))
    return out


def _not_run(exc: transport.TransportError, shown: str, who: str) -> NetifError:
    if exc.missing:
        return NetifError(f"{who}: cannot run `{shown}` because {exc.missing} is not installed")
    if exc.timeout:
        return NetifError(f"{who}: `{shown}` did not finish within {COMMAND_TIMEOUT_S:.0f} s")
    return NetifError(f"{who}: cannot run `{shown}`: {exc}")


def _failed(proc: transport.CompletedProcess, shown: str, who: str, via: Transport
            ) -> str | None:
    """The sentence for a command that failed (None: it did not)."""
    if proc.returncode == 0:
        return None
    err = " ".join((proc.stderr or proc.stdout or "").split()) or "no error output"
    if via.unreachable(proc):
        return f"{who}: cannot reach node {via.name} over SSH to run `{shown}`: {err}"
    return f"{who}: `{shown}` failed (exit {proc.returncode}): {err}"


def required(result: tuple[str | None, str | None]) -> str:
    """A run_all result's stdout, or its failure raised as NetifError."""
    out, err = result
    if out is None:
        raise NetifError(err or "a command failed")
    return out


def run_in(ep: Endpoint, argv: list[str]) -> str:
    """Run ``argv`` in the endpoint's netns and return stdout; raise NetifError on failure."""
    return run_ns(ep.netns_pid, argv, ep.label, ep.via)


def try_run(ep: Endpoint, argv: list[str]) -> tuple[str | None, str | None]:
    """``run_in``, but a command that fails gives (None, the tool's own complaint)."""
    try:
        return run_in(ep, argv), None
    except NetifError as exc:
        return None, short_error(str(exc))


def short_error(msg: str) -> str:
    """The tool's own complaint, without the label and command prefix."""
    m = re.search(r"failed \(exit \d+\): (.*)$", msg)
    return m.group(1) if m else msg


def _links(pid: int | None, who: str, ifname: str | None = None,
           via: Transport = LOCAL) -> list[dict]:
    """``ip -d -j link show [dev IF]`` in the netns of ``pid`` (None = host), parsed."""
    argv = link_argv(ifname)
    return _parse_links(run_ns(pid, argv, who, via), who, argv)


def link_argv(ifname: str | None = None) -> list[str]:
    return ["ip", "-d", "-j", "link", "show"] + (["dev", ifname] if ifname else [])


def _parse_links(out: str, who: str, argv: list[str]) -> list[dict]:
    try:
        data = json.loads(out or "[]")
    except json.JSONDecodeError:
        raise NetifError(f"{who}: `{' '.join(argv)}` printed output that is not JSON") from None
    return data if isinstance(data, list) else []


def _kind(link: dict) -> str | None:
    info = link.get("linkinfo") or {}
    return info.get("info_kind")


def veth_endpoints(tier: str, pid: int) -> list[Endpoint]:
    """List every non-loopback interface in ``pid``'s netns, each followed by its host peer.

    A veth's host-side peer is the host interface whose ifindex equals the container
    side's ``link_index`` (and, when reported, whose own ``link_index`` points back).
    Host peers get the tier ``host``.  A PID that shares the host's netns (e.g. a
    container with host networking) is refused, so host NICs are never touched by mistake.
    """
    who = f"{tier} (netns of pid {pid})"
    ino = netns_inode(pid)
    if ino is None:
        raise NetifError(f"{who}: process {pid} does not exist, so its interfaces are unknown")
    if ino == netns_inode(None):
        raise NetifError(
            f"{who}: process {pid} uses the host network namespace, so it has no own interfaces"
        )
    links = _links(pid, who)
    host_links: list[dict] | None = None
    result: list[Endpoint] = []
    for link in links:
        name = link.get("ifname")
        if not name or name == "lo" or link.get("link_type") == "loopback":
            continue
        result.append(Endpoint(tier, name, pid))
        if _kind(link) != "veth" or link.get("link_index") is None:
            continue
        if host_links is None:
            host_links = _links(None, "host")
        for peer in host_links:
            if peer.get("ifindex") != link["link_index"] or _kind(peer) != "veth":
                continue
            back = peer.get("link_index")
            if back is not None and back != link.get("ifindex"):
                continue
            result.append(Endpoint("host", peer["ifname"], None))
            break
    return result


def netns_inode(pid: int | None) -> int | None:
    path = f"/proc/{pid}/ns/net" if pid is not None else "/proc/self/ns/net"
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def state_argvs(ifname: str) -> list[list[str]]:
    """The commands whose output :func:`state_of` reads: the link (MTU and its range, ifindex)
    and the features."""
    return [link_argv(ifname), ["ethtool", "-k", ifname]]


def state_of(ep: Endpoint, results: list[tuple[str | None, str | None]]) -> dict:
    """Features and MTU (the parts verify/restore compare) from run_all's results of
    :func:`state_argvs`."""
    links = _parse_links(required(results[0]), ep.label, link_argv(ep.ifname))
    if not links:
        raise NetifError(f"{ep.label}: `ip link show dev {ep.ifname}` returned no interface")
    link = links[0]
    return {
        "features": parse_features(required(results[1])),
        "mtu": link.get("mtu"),
        "min_mtu": link.get("min_mtu"),
        "max_mtu": link.get("max_mtu"),
        "ifindex": link.get("ifindex"),
    }


def _read_state(ep: Endpoint) -> dict:
    """Read features and MTU of one endpoint (one command)."""
    return state_of(ep, run_all(ep.netns_pid, state_argvs(ep.ifname), ep.label, ep.via))


def driver(ep: Endpoint) -> str:
    return _driver_of(run_all(ep.netns_pid, [["ethtool", "-i", ep.ifname]], ep.label,
                              ep.via)[0])


def _driver_of(result: tuple[str | None, str | None]) -> str:
    for line in (result[0] or "").splitlines():
        if line.startswith("driver:"):
            return line.split(":", 1)[1].strip() or "unknown"
    return "unknown"


def snapshot_argvs(ifname: str) -> list[list[str]]:
    """The commands whose output :func:`snapshot_of` reads (state_argvs, the qdiscs, the
    driver): an endpoint's snapshot is one command, whatever else the caller adds to it."""
    return state_argvs(ifname) + [["tc", "qdisc", "show", "dev", ifname],
                                  ["ethtool", "-i", ifname]]


def snapshot_of(ep: Endpoint, results: list[tuple[str | None, str | None]]) -> dict:
    """An endpoint's snapshot from run_all's results of :func:`snapshot_argvs`."""
    state = state_of(ep, results)
    qdisc_out, qdisc_err = results[2]
    return {
        "label": ep.label,
        "tier": ep.tier,
        "ifname": ep.ifname,
        **ep.via.record(),
        "netns_pid": ep.netns_pid,
        "netns_ino": netns_inode(ep.netns_pid) if ep.node is None else None,
        "driver": _driver_of(results[3]),
        **state,
        "qdisc": (qdisc_out if qdisc_out is not None else f"unavailable: {qdisc_err}").strip(),
    }


def snapshot(ep: Endpoint) -> dict:
    """Record driver, ethtool -k features, MTU (with min/max) and qdisc of one endpoint, in one
    command.

    Besides the documented keys it stores ``min_mtu``, ``max_mtu``, ``ifindex`` and
    ``netns_ino`` (inode of the netns), which check() and restore() use.
    """
    return snapshot_of(ep, run_all(ep.netns_pid, snapshot_argvs(ep.ifname), ep.label, ep.via))


def _snap_for(ep: Endpoint, snaps: dict[str, dict]) -> dict:
    snap = snaps.get(ep.label)
    if snap is None:
        raise NetifError(f"{ep.label}: no snapshot was taken of this interface before changing it")
    return snap


def check(eps: list[Endpoint], want: NicSettings, snaps: dict[str, dict]) -> None:
    """Raise NetifError if ``want`` is impossible on any endpoint; changes nothing."""
    problems: list[str] = []
    for ep in eps:
        problems += feature_problems(_snap_for(ep, snaps), want)
    if problems:
        raise NetifError("; ".join(problems))


def features_argv(ifname: str, args: list[tuple[str, bool]]) -> list[str]:
    """``ethtool -K IFNAME name on|off ...``."""
    return ["ethtool", "-K", ifname] + [a for name, value in args for a in (name, onoff(value))]


def mtu_argv(ifname: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", ifname, "mtu", str(mtu)]


def set_features(ep: Endpoint, args: list[tuple[str, bool]]) -> None:
    if args:
        run_in(ep, features_argv(ep.ifname, args))


def set_mtu(ep: Endpoint, mtu: int) -> None:
    run_in(ep, mtu_argv(ep.ifname, mtu))


def restore_commands(snap: dict) -> list[list[str]]:
    """The commands that put the snapshot's MTU and features back whatever the interface holds
    now (restore_plan without a current state), in the order restore_endpoint runs them: the
    rollback guard's part for one interface (run in the endpoint's namespace, on its node)."""
    out = [mtu_argv(snap["ifname"], int(snap["mtu"]))] if snap.get("mtu") is not None else []
    plan = restore_plan(snap, None)
    return out + ([features_argv(snap["ifname"], plan)] if plan else [])


def read_features(ep: Endpoint, snap: dict | None = None) -> dict:
    state = _read_state(ep)
    state["label"] = ep.label
    state["driver"] = (snap or {}).get("driver", "unknown")
    return state


def apply(eps: list[Endpoint], want: NicSettings, snaps: dict[str, dict]) -> None:
    """Check, then set ``want`` on every endpoint and verify; on any failure restore ``snaps``.

    Raises NetifError listing the failures and mismatches (after restoring).
    """
    check(eps, want, snaps)
    failures: list[str] = []
    mismatches: list[str] = []
    for _ in range(APPLY_PASSES):  # a second pass helps drivers that need dependencies first
        failures = []
        for ep in eps:
            snap = _snap_for(ep, snaps)
            name = snap.get("driver", "unknown")
            try:
                set_features(ep, wanted_feature_args(snap, want))
            except NetifError as exc:
                failures.append(f"{exc} (driver {name})")
            if want.mtu is not None:
                try:
                    set_mtu(ep, want.mtu)
                except NetifError as exc:
                    failures.append(f"{exc} (driver {name})")
        mismatches = verify(eps, want, snaps)
        if not failures and not mismatches:
            return
    leftovers = restore({ep.label: _snap_for(ep, snaps) for ep in eps})
    msg = "could not apply the requested settings: " + "; ".join(failures + mismatches)
    if leftovers:
        msg += "; restoring the snapshot also failed: " + "; ".join(leftovers)
    else:
        msg += "; the previous settings were restored"
    raise NetifError(msg)


def verify(
    eps: list[Endpoint], want: NicSettings, snaps: dict[str, dict] | None = None
) -> list[str]:
    """Re-read every endpoint and return mismatches against ``want`` ([] = all as wanted).

    ``snaps`` is optional and only supplies driver names for the messages.
    """
    out: list[str] = []
    for ep in eps:
        snap = (snaps or {}).get(ep.label)
        try:
            fresh = read_features(ep, snap)
        except NetifError as exc:
            out.append(f"{ep.label}: could not re-read the settings: {exc}")
            continue
        if snap is None:
            fresh["driver"] = driver(ep)
        out += feature_mismatches(fresh, want)
    return out


def endpoint_of(snap: dict) -> Endpoint:
    """The endpoint a snapshot was taken of (on a node: through the transport it recorded)."""
    return Endpoint(snap["tier"], snap["ifname"], snap.get("netns_pid"), transport.of(snap))


def _netns_gone(ep: Endpoint, snap: dict) -> bool:
    """Whether the endpoint's namespace on this machine is gone (its process ended, or its PID
    now names a process in another namespace)."""
    if ep.netns_pid is not None and ep.node is None:
        if not os.path.exists(f"/proc/{ep.netns_pid}"):
            return True
        ino = snap.get("netns_ino")
        if ino is not None and netns_inode(ep.netns_pid) != ino:
            return True  # the PID was reused by a process in another netns
    return False


def _vanished(message: str) -> bool:
    """Whether reading an interface failed because it (or its namespace) no longer exists."""
    return any(s in message for s in ("does not exist", "No such file", "returned no interface"))


def restore_endpoint(snap: dict) -> list[str]:
    """Put one endpoint's features and MTU back (an interface that is gone, or whose index now
    names another, says "gone, nothing to restore"): one read, then per pass the changes and
    their read back in one command."""
    ep = endpoint_of(snap)
    gone = [f"{ep.label}: gone, nothing to restore"]
    if _netns_gone(ep, snap):
        return gone
    try:
        current = read_features(ep, snap)
    except NetifError as exc:
        if _vanished(str(exc)):
            return gone
        return [f"{ep.label}: could not re-read the settings while restoring: {exc}"]
    ifindex = snap.get("ifindex")
    if ifindex is not None and current.get("ifindex") != ifindex:
        return gone
    errors: list[str] = []
    for _ in range(RESTORE_PASSES):
        plan = restore_plan(snap, current)
        mtu: int | None = snap.get("mtu")
        mtu_differs = mtu is not None and current.get("mtu") != mtu
        if not plan and not mtu_differs:
            break
        # the changes and the read back in one command
        changes = ([mtu_argv(ep.ifname, int(mtu))] if mtu is not None and mtu_differs
                   else []) + ([features_argv(ep.ifname, plan)] if plan else [])
        results = run_all(ep.netns_pid, changes + state_argvs(ep.ifname), ep.label, ep.via)
        errors += [err for out, err in results[:len(changes)] if err]
        try:
            current = state_of(ep, results[len(changes):])
        except NetifError as exc:
            return [f"{ep.label}: could not re-read the settings after restoring: {exc}"]
    remaining = restore_differences(snap, current)
    if remaining and errors:
        remaining.append(f"{ep.label}: last error: {errors[-1]}")
    return remaining


def restore(snaps: dict[str, dict]) -> list[str]:
    """Put features and MTU back to the snapshots; return remaining problems ([] = done).

    Endpoints that disappeared are reported as "<label>: gone, nothing to restore";
    one endpoint's failure never stops the others.  A whole mode's state is restored by
    ``tierbench.modes.apply.restore_state``, which calls this for the features and MTU.
    """
    problems: list[str] = []
    for label, snap in snaps.items():
        try:
            problems += restore_endpoint(snap)
        except Exception as exc:  # noqa: BLE001 - restore must carry on with the others
            problems.append(f"{label}: restore failed unexpectedly: {exc}")
    return problems


def settings_view(snap: dict) -> dict:
    """Return a compact manifest form: mtu, qdisc and features as "on"/"off" [+ " [fixed]"]."""
    feats = {
        name: onoff(f["on"]) + (" [fixed]" if f.get("fixed") else "")
        for name, f in snap.get("features", {}).items()
    }
    return {"mtu": snap.get("mtu"), "qdisc": snap.get("qdisc"), "features": feats}


# --------------------------------------------------------------------------- state file


class StateFile:
    """Crash-safe JSON record of pre-change snapshots, so `tierbench clean` can restore."""

    def __init__(self, path: Path | None = None) -> None:
        """Use ``path`` or $TIERBENCH_STATE_DIR (default /run/tierbench)/netif-state.json."""
        if path is None:
            path = state_dir() / "netif-state.json"
        self.path = Path(path)

    def save(self, snaps: dict[str, dict]) -> None:
        """Atomically write ``snaps`` (temp file, fsync, rename, fsync of the directory)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "snapshots": snaps}, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self._sync_dir()
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise NetifError(f"cannot save the interface state file {self.path}: {exc}") from None

    def load(self) -> dict[str, dict] | None:
        """Return the saved snapshots, or None when no state file exists."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise NetifError(f"cannot read the interface state file {self.path}: {exc}") from None
        try:
            data = json.loads(text)
            snaps = data["snapshots"]
            if not isinstance(snaps, dict):
                raise TypeError("snapshots is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            raise NetifError(
                f"the interface state file {self.path} is unreadable ({exc}); "
                "delete it after restoring the interfaces by hand"
            ) from None
        return snaps

    def clear(self) -> None:
        """Delete the state file (no error if it does not exist)."""
        try:
            self.path.unlink(missing_ok=True)
            self._sync_dir()
        except OSError as exc:
            raise NetifError(f"cannot delete the interface state file {self.path}: {exc}") from None

    def _sync_dir(self) -> None:
        try:
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
