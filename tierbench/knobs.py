"""Apply a whole mode to endpoints, all or nothing: snapshot, check, apply, verify, restore.

Builds on :mod:`tierbench.netif` (features and MTU) and adds channels (``ethtool -L``), RSS
(``ethtool -X``), RPS/XPS masks (sysfs), interrupt coalescing (``ethtool -C``), rings and
header-data split (``ethtool -G``), a root qdisc (tbf, htb, netem) and sysctls, per network
namespace where the kernel keeps them per namespace and on the host otherwise.

The state dict written by :class:`netif.StateFile` before the first change holds everything
``restore_state`` needs, so a later process (``tierbench clean``) can restore after a SIGKILL.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierbench import netif
from tierbench.netif import Endpoint, NetifError

if TYPE_CHECKING:
    from tierbench.modes import Mode

__all__ = [
    "STATE_KIND",
    "apply_mode",
    "check_mode",
    "parse_channels",
    "parse_coalesce",
    "parse_indirection",
    "parse_rings",
    "qdisc_commands",
    "restore_state",
    "snapshot_mode",
    "state_view",
    "sysctl_scope",
    "verify_mode",
]

STATE_KIND = "tierbench-mode-state"
APPLY_PASSES = 2

_CHANNEL_LABELS = {"RX": "rx", "TX": "tx", "Other": "other", "Combined": "combined"}
_RING_LABELS = {
    "RX": "rx", "RX Mini": "rx-mini", "RX Jumbo": "rx-jumbo", "TX": "tx",
    "RX Buf Len": "rx-buf-len", "CQE Size": "cqe-size", "TX Push": "tx-push",
    "TCP data split": "tcp-data-split",
}
_PAIR = re.compile(r"^(Adaptive|CQE mode) RX:\s*(\S+)\s+TX:\s*(\S+)", re.I)


# --------------------------------------------------------------------------- parsers


def _value(text: str) -> int | bool | str | None:
    text = text.strip()
    if text in ("n/a", ""):
        return None
    if text in ("on", "off"):
        return text == "on"
    try:
        return int(text)
    except ValueError:
        return text


def _two_blocks(text: str, labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"max": {}, "current": {}}
    block: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Pre-set maximums"):
            block = "max"
        elif s.startswith("Current hardware settings"):
            block = "current"
        elif block and ":" in s:
            label, val = s.split(":", 1)
            if label.strip() in labels:
                out[block][labels[label.strip()]] = _value(val)
    return out


def parse_channels(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``ethtool -l``: {"max": {rx, tx, other, combined}, "current": {...}}; n/a = None."""
    return _two_blocks(text, _CHANNEL_LABELS)


def parse_rings(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``ethtool -g`` into max and current ring sizes, tx-push and tcp-data-split.

    tcp-data-split is True/False, or the string "unknown" when the driver does not say;
    a key is absent when the driver (or this ethtool) does not report it at all.
    """
    return _two_blocks(text, _RING_LABELS)


def parse_coalesce(text: str) -> dict[str, int | bool | None]:
    """Parse ``ethtool -c`` into {adaptive-rx, adaptive-tx, rx-usecs, ...}; n/a = None."""
    out: dict[str, int | bool | None] = {}
    for line in text.splitlines():
        s = line.strip()
        m = _PAIR.match(s)
        if m:
            prefix = "adaptive" if m.group(1).lower() == "adaptive" else "cqe-mode"
            for side, val in (("rx", m.group(2)), ("tx", m.group(3))):
                v = _value(val)
                out[f"{prefix}-{side}"] = v if isinstance(v, bool) else None
            continue
        if ":" not in s or s.startswith("Coalesce parameters"):
            continue
        key, val = s.split(":", 1)
        key = key.strip().replace("-frame-", "-frames-")  # ethtool prints rx-frame-low
        if re.match(r"^[a-z][a-z0-9-]*$", key):
            v = _value(val)
            out[key] = v if not isinstance(v, str) else None
    return out


def parse_indirection(text: str) -> list[int]:
    """Parse the indirection table of ``ethtool -x`` into a list of queue numbers."""
    table: list[int] = []
    in_table = False
    for line in text.splitlines():
        if "indirection table" in line:
            in_table = True
            continue
        if not in_table:
            continue
        m = re.match(r"^\s*\d+:\s+((?:\d+\s*)+)$", line)
        if m:
            table += [int(x) for x in m.group(1).split()]
        elif line.strip():
            break
    return table


def _mask_int(mask: str) -> int:
    return int(mask.replace(",", "").lower().removeprefix("0x") or "0", 16)


@lru_cache(maxsize=1)
def online_cpu_mask() -> str:
    """Hex mask of the online CPUs (from /sys/devices/system/cpu/online)."""
    text = Path("/sys/devices/system/cpu/online").read_text().strip()
    mask = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            mask |= 1 << cpu
    return format(mask, "x")


def _qval(fname: str, value: str) -> int:
    """A queue file's value as a number: CPU masks are hex, rps_flow_cnt is decimal."""
    return int(value) if fname == "rps_flow_cnt" else _mask_int(value)


def _wanted_mask(value: str) -> str:
    return online_cpu_mask() if value == "all" else format(_mask_int(value), "x")


_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}


def rate_bits(rate: str) -> float:
    """A tc rate such as ``1gbit`` or ``125mbps`` in bits per second."""
    m = re.match(r"^(\d+(?:\.\d+)?)([a-z]+)$", rate.lower())
    if not m or m.group(2) not in _RATE_UNITS:
        raise NetifError(f"cannot read the rate {rate!r}; write it like 1gbit")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]


def qdisc_commands(ifname: str, q: dict[str, Any]) -> list[list[str]]:
    """The ``tc`` commands that install the root qdisc ``q`` (tbf, htb or netem) on ``ifname``."""
    base = ["tc", "qdisc", "replace", "dev", ifname, "root", "handle", "1:"]
    kind = q["kind"]
    if kind == "tbf":
        burst = q.get("burst") or f"{max(int(rate_bits(q['rate']) / 8 / 1000), 131072)}b"
        return [base + ["tbf", "rate", q["rate"], "burst", burst,
                        "latency", q.get("latency", "50ms")]]
    if kind == "htb":
        cls = ["tc", "class", "replace", "dev", ifname, "parent", "1:", "classid", "1:1",
               "htb", "rate", q["rate"], "ceil", q.get("ceil", q["rate"])]
        if q.get("burst"):
            cls += ["burst", q["burst"]]
        return [base + ["htb", "default", "1"], cls]
    if kind == "netem":
        args = base + ["netem"]
        if q.get("limit"):
            args += ["limit", str(q["limit"])]
        if q.get("delay"):
            args += ["delay", q["delay"]] + ([q["jitter"]] if q.get("jitter") else [])
        if q.get("loss"):
            args += ["loss", q["loss"]]
        if q.get("rate"):
            args += ["rate", q["rate"]]
        return [args]
    raise NetifError(f"unknown qdisc kind {kind!r}")


# --------------------------------------------------------------------------- commands


def _run_sh(ep: Endpoint, script: str) -> str:
    """Run a shell script with /sys showing the endpoint's netns (fresh sysfs mount if needed)."""
    if ep.netns_pid is None:
        return netif._run(None, ["sh", "-c", script], ep.label)
    argv = ["nsenter", "-t", str(ep.netns_pid), "-n", "--", "unshare", "-m", "--",
            "sh", "-c", f"mount -t sysfs none /sys && {script}"]
    return netif._run(None, argv, ep.label)


def _try(ep: Endpoint, argv: list[str]) -> tuple[str | None, str | None]:
    try:
        return netif.run_in(ep, argv), None
    except NetifError as exc:
        return None, _short_error(str(exc))


def _short_error(msg: str) -> str:
    """The tool's own complaint, without the label and command prefix."""
    m = re.search(r"failed \(exit \d+\): (.*)$", msg)
    return m.group(1) if m else msg


def _read_queues(ep: Endpoint) -> dict[str, dict[str, str]]:
    d = shlex.quote(f"/sys/class/net/{ep.ifname}/queues")
    script = (f"cd {d} && for q in *; do for f in rps_cpus xps_cpus rps_flow_cnt; do "
              f"[ -e $q/$f ] && echo \"$q $f $(cat $q/$f 2>/dev/null || echo unreadable)\"; "
              "done; done; true")
    out: dict[str, dict[str, str]] = {}
    for line in _run_sh(ep, script).splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.setdefault(parts[0], {})[parts[1]] = parts[2]
    return out


def _qdisc_root(ep: Endpoint) -> dict[str, Any]:
    import json

    out = netif.run_in(ep, ["tc", "-j", "qdisc", "show", "dev", ep.ifname])
    try:
        entries = json.loads(out or "[]")
    except ValueError:
        raise NetifError(
            f"{ep.label}: `tc -j qdisc show` printed output that is not JSON") from None
    for e in entries:
        if e.get("root"):
            return {"kind": e.get("kind"), "handle": e.get("handle")}
    return {"kind": None, "handle": None}


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


@lru_cache(maxsize=256)
def sysctl_scope(key: str) -> str:
    """Where the kernel keeps ``key``, probed in a throw-away ``unshare -n``.

    ``netns``: per network namespace and writable there; ``netns-readonly``: per namespace
    but read-only inside one (copied from the host when the namespace is created, e.g.
    net.core.rmem_max on 6.18); ``host``: one host-wide value; ``missing``: no such sysctl.
    """
    path = _sysctl_path(key)
    if not os.path.exists(path):
        return "missing"
    script = f'test -e {shlex.quote(path)} || exit 3; test -w {shlex.quote(path)} || exit 4'
    probe = subprocess.run(["unshare", "-n", "--", "sh", "-c", script],
                           capture_output=True, timeout=30, check=False)
    return {0: "netns", 4: "netns-readonly"}.get(probe.returncode, "host")


def _sysctl_targets(mode: Mode, endpoints: list[Endpoint]) -> dict[str, dict[str, Any]]:
    """Where each sysctl goes: {target: {"pid": pid|None, "netns_ino": ino, "keys": [...]}}."""
    pids: dict[int, int] = {}
    for ep in endpoints:
        if ep.netns_pid is not None:
            ino = netif._netns_inode(ep.netns_pid)
            if ino is not None and ino not in pids.values():
                pids[ep.netns_pid] = ino
    targets: dict[str, dict[str, Any]] = {}
    for key in mode.knobs.sysctls:
        scope = sysctl_scope(key)
        if scope.startswith("netns") and pids:
            for pid, ino in pids.items():
                t = targets.setdefault(f"netns:{pid}", {"pid": pid, "netns_ino": ino, "keys": []})
                t["keys"].append(key)
        else:
            t = targets.setdefault(
                "host", {"pid": None, "netns_ino": netif._netns_inode(None), "keys": []})
            t["keys"].append(key)
    return targets


def _read_sysctl(pid: int | None, key: str, who: str) -> str:
    return " ".join(netif._run(pid, ["sysctl", "-n", key], who).split())


def _write_sysctl(pid: int | None, key: str, value: str, who: str) -> None:
    netif._run(pid, ["sysctl", "-q", "-w", f"{key}={value}"], who)


@lru_cache(maxsize=64)
def _probe_qdisc(args: tuple[str, ...]) -> str | None:
    """Try a qdisc on a veth inside a throw-away ``unshare -n``; return tc's error or None."""
    cmds = qdisc_commands("tbmprobe0", dict(args))
    script = "ip link add tbmprobe0 type veth peer name tbmprobe1 && " + " && ".join(
        shlex.join(c) for c in cmds)
    try:
        proc = subprocess.run(["unshare", "-n", "--", "sh", "-c", script], capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe could not run ({exc})"
    if proc.returncode == 0:
        return None
    return " ".join((proc.stderr or proc.stdout or "no error output").split())


def _qdisc_problem(mode: Mode) -> str | None:
    q = mode.knobs.qdisc
    if not q:
        return None
    try:
        err = _probe_qdisc(tuple(sorted((k, v) for k, v in q.items())))
    except NetifError as exc:
        return f"qdisc {q['kind']}: {exc}"
    if err is None:
        return None
    if "kind is unknown" in err or "No such file" in err:
        return (f"qdisc {q['kind']} is not available in this kernel (module sch_{q['kind']} "
                f"missing): use a kernel with CONFIG_NET_SCH_{q['kind'].upper()} or drop "
                f"{q['kind']} from mode {mode.name}")
    return f"qdisc {q['kind']} with {q} is refused by tc: {err}; fix qdisc in mode {mode.name}"


# --------------------------------------------------------------------------- snapshot


def _snapshot_endpoint(ep: Endpoint, mode: Mode) -> dict[str, Any]:
    snap = netif.snapshot(ep)
    k = mode.knobs
    if k.channels:
        text, err = _try(ep, ["ethtool", "-l", ep.ifname])
        snap["channels"] = parse_channels(text) if text is not None else {"error": err}
    if k.coalesce:
        text, err = _try(ep, ["ethtool", "-c", ep.ifname])
        snap["coalesce"] = {"current": parse_coalesce(text)} if text is not None else {
            "error": err}
    if k.rings:
        text, err = _try(ep, ["ethtool", "-g", ep.ifname])
        snap["rings"] = parse_rings(text) if text is not None else {"error": err}
    if k.rss:
        text, err = _try(ep, ["ethtool", "-x", ep.ifname])
        snap["rss"] = {"table": parse_indirection(text)} if text is not None else {"error": err}
    if k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None:
        try:
            snap["queues"] = _read_queues(ep)
        except NetifError as exc:
            snap["queues"] = {"error": _short_error(str(exc))}
    if k.qdisc:
        snap["qdisc_root"] = _qdisc_root(ep)
    return snap


def snapshot_mode(mode: Mode, endpoints: list[Endpoint]) -> dict[str, Any]:
    """Everything ``mode`` may touch on ``endpoints`` and in their netns/host sysctls (JSON)."""
    state: dict[str, Any] = {"version": 2, "kind": STATE_KIND, "mode": mode.name,
                             "endpoints": {}, "sysctls": {}}
    for ep in endpoints:
        state["endpoints"][ep.label] = _snapshot_endpoint(ep, mode)
    for target, info in _sysctl_targets(mode, endpoints).items():
        values = {}
        for key in info["keys"]:
            if sysctl_scope(key) != "missing":
                values[key] = _read_sysctl(info["pid"], key, target)
        state["sysctls"][target] = {"pid": info["pid"], "netns_ino": info["netns_ino"],
                                    "values": values}
    return state


# --------------------------------------------------------------------------- check (pure)


def _who(snap: dict) -> str:
    return f"{snap.get('label', '?')} (driver {snap.get('driver', 'unknown')})"


def _args(d: dict[str, Any]) -> str:
    return " ".join(f"{k} {netif._onoff(v) if isinstance(v, bool) else v}" for k, v in d.items())


def endpoint_problems(snap: dict, mode: Mode) -> list[str]:
    """Why ``mode`` cannot be applied to the endpoint of ``snap`` ([] = possible); pure."""
    k = mode.knobs
    who = _who(snap)
    problems = netif._check_problems(snap, mode.nic)
    fix = f"drop it from mode {mode.name} or use an interface whose driver supports it"
    if k.channels:
        ch = snap.get("channels", {})
        if "error" in ch:
            problems.append(f"channels (ethtool -L {_args(k.channels)}) are not supported by "
                            f"{who}: {ch['error']}; {fix}")
        else:
            for key, want in k.channels.items():
                hi = ch.get("max", {}).get(key)
                if hi is None:
                    problems.append(f"channels {key} (ethtool -L {key} {want}) is not supported "
                                    f"by {who}: ethtool -l shows n/a; {fix}")
                elif want > hi:
                    problems.append(f"channels {key} {want} is more than {who} allows "
                                    f"(at most {hi}); lower it in mode {mode.name}")
    if k.coalesce:
        co = snap.get("coalesce", {})
        if "error" in co:
            problems.append(f"interrupt coalescing (ethtool -C {_args(k.coalesce)}) is not "
                            f"supported by {who}: ethtool -c says {co['error']}; {fix}")
        else:
            for key, want in k.coalesce.items():
                if co.get("current", {}).get(key) is None:
                    problems.append(f"interrupt coalescing setting {key} (ethtool -C {key} "
                                    f"{_args({key: want}).split()[-1]}) is not supported by "
                                    f"{who}: ethtool -c shows n/a; {fix}")
    if k.rings:
        rg = snap.get("rings", {})
        if "error" in rg:
            what = "header-data split and rings" if "tcp-data-split" in k.rings else "rings"
            problems.append(f"{what} (ethtool -G {_args(k.rings)}) are not supported by {who}: "
                            f"ethtool -g says {rg['error']}; {fix}")
        else:
            for key, want in k.rings.items():
                cur = rg.get("current", {}).get(key)
                hi = rg.get("max", {}).get(key)
                if key == "tcp-data-split" and cur not in (True, False):
                    problems.append(f"header-data split (ethtool -G tcp-data-split "
                                    f"{netif._onoff(bool(want))}) is not supported by {who}: "
                                    f"ethtool -g reports {cur if cur else 'no such setting'}; "
                                    f"{fix}")
                elif key == "tx-push" and cur is None:
                    problems.append(f"rings setting tx-push is not supported by {who}; {fix}")
                elif key not in ("tcp-data-split", "tx-push"):
                    if cur is None or (hi is not None and want > hi):
                        limit = "n/a" if cur is None else f"at most {hi}"
                        problems.append(f"ring {key} {want} is not possible on {who} "
                                        f"(ethtool -g: {limit}); change mode {mode.name}")
    if k.rss:
        rss = snap.get("rss", {})
        if "error" in rss:
            problems.append(f"RSS indirection (ethtool -X {_args(k.rss)}) is not supported by "
                            f"{who}: ethtool -x says {rss['error']}; {fix}")
    for key, kind, value in (("rps_cpus", "rx", k.rps_cpus), ("xps_cpus", "tx", k.xps_cpus),
                             ("rps_flow_cnt", "rx", k.rps_flow_cnt)):
        if value is None:
            continue
        qs = snap.get("queues", {})
        if "error" in qs:
            problems.append(f"{key} cannot be read on {who}: {qs['error']}")
            continue
        has = [q for q, files in qs.items() if q.startswith(kind + "-") and key in files]
        if not has:
            problems.append(f"{key} is not supported by {who}: no {kind} queue has {key} "
                            f"(kernel without CONFIG_RPS/CONFIG_XPS?); {fix}")
        elif key.endswith("_cpus") and value != "all" and (
                _mask_int(str(value)) & ~_mask_int(online_cpu_mask())):
            problems.append(f"{key} {value} names CPUs that are not online (online mask "
                            f"{online_cpu_mask()}); change mode {mode.name}")
    if k.qdisc:
        root = snap.get("qdisc_root", {})
        if root.get("handle") not in (None, "0:"):
            problems.append(f"{who} already has a configured root qdisc {root.get('kind')} "
                            f"{root.get('handle')}, which a restore could not rebuild; remove it "
                            f"(tc qdisc del dev {snap.get('ifname')} root) or run tierbench clean")
    return problems


def check_mode(mode: Mode, endpoints: list[Endpoint], state: dict | None = None) -> list[str]:
    """Every reason ``mode`` cannot be applied to ``endpoints`` ([] = ok); changes nothing.

    ``state`` is a snapshot from :func:`snapshot_mode`; without one a snapshot is taken.
    """
    problems: list[str] = []
    if state is None:
        state = {"endpoints": {}}
        for ep in endpoints:
            try:
                state["endpoints"][ep.label] = _snapshot_endpoint(ep, mode)
            except NetifError as exc:
                problems.append(f"{ep.label} cannot be read: {exc}")
    for ep in endpoints:
        snap = state["endpoints"].get(ep.label)
        if snap is None:
            if not any(p.startswith(f"{ep.label} cannot be read") for p in problems):
                problems.append(f"{ep.label}: no snapshot was taken before checking")
            continue
        problems += endpoint_problems(snap, mode)
    qp = _qdisc_problem(mode)
    if qp:
        problems.append(qp)
    in_netns = any(ep.netns_pid is not None for ep in endpoints)
    for key in mode.knobs.sysctls:
        scope = sysctl_scope(key)
        if scope == "missing":
            problems.append(f"sysctl {key} does not exist on this kernel (no "
                            f"{_sysctl_path(key)}); drop it from mode {mode.name}")
        elif scope == "netns-readonly" and in_netns:
            problems.append(
                f"sysctl {key} is kept per network namespace but is read-only inside one on "
                f"this kernel (a namespace copies the host's value when it is created), so it "
                f"cannot change for running containers; drop it from mode {mode.name} (use "
                f"net.ipv4.tcp_rmem/tcp_wmem, writable per namespace) or set it on the host "
                f"before the stack starts")
    return problems


# --------------------------------------------------------------------------- apply


def _set_endpoint(ep: Endpoint, snap: dict, mode: Mode) -> None:
    k = mode.knobs
    netif._set_args(ep, netif._wanted_args(snap, mode.nic))
    if mode.nic.mtu is not None:
        netif._set_mtu(ep, mode.nic.mtu)
    if k.channels:
        netif.run_in(ep, ["ethtool", "-L", ep.ifname] + _args(k.channels).split())
    if k.rings:
        netif.run_in(ep, ["ethtool", "-G", ep.ifname] + _args(k.rings).split())
    if k.coalesce:
        ordered = dict(sorted(k.coalesce.items(), key=lambda kv: not kv[0].startswith("adaptive")))
        netif.run_in(ep, ["ethtool", "-C", ep.ifname] + _args(ordered).split())
    if k.rss:
        if "equal" in k.rss:
            rss_args = ["equal", str(k.rss["equal"])]
        elif "weights" in k.rss:
            rss_args = ["weight"] + [str(w) for w in k.rss["weights"]]
        else:
            rss_args = ["default"]
        netif.run_in(ep, ["ethtool", "-X", ep.ifname] + rss_args)
    writes: dict[str, str] = {}
    if k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None:
        # re-read: a channel change above may have added queues the snapshot did not have
        writes = _mask_writes(_read_queues(ep), k.rps_cpus, k.xps_cpus, k.rps_flow_cnt)
    if writes:
        _write_masks(ep, writes)
    if k.qdisc:
        for cmd in qdisc_commands(ep.ifname, k.qdisc):
            netif.run_in(ep, cmd)


def _mask_writes(queues: dict, rps: str | None, xps: str | None,
                 flow_cnt: int | None = None) -> dict[str, str]:
    writes: dict[str, str] = {}
    for q, files in queues.items():
        if not isinstance(files, dict):
            continue
        if rps is not None and "rps_cpus" in files:
            writes[f"{q}/rps_cpus"] = _wanted_mask(rps)
        if xps is not None and "xps_cpus" in files:
            writes[f"{q}/xps_cpus"] = _wanted_mask(xps)
        if flow_cnt is not None and "rps_flow_cnt" in files:
            writes[f"{q}/rps_flow_cnt"] = str(flow_cnt)
    return writes


def _write_masks(ep: Endpoint, writes: dict[str, str]) -> None:
    d = f"/sys/class/net/{ep.ifname}/queues"
    script = " && ".join(f"echo {shlex.quote(v)} > {shlex.quote(f'{d}/{f}')}"
                         for f, v in sorted(writes.items()))
    _run_sh(ep, script)


def _set_sysctls(mode: Mode, state: dict) -> None:
    for target, info in state.get("sysctls", {}).items():
        for key in info["values"]:
            _write_sysctl(info["pid"], key, mode.knobs.sysctls[key], target)


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
                _set_endpoint(ep, state["endpoints"][ep.label], mode)
            _set_sysctls(mode, state)
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


# --------------------------------------------------------------------------- verify


def _endpoint_mismatches(ep: Endpoint, mode: Mode, snap: dict | None) -> list[str]:
    k = mode.knobs
    fresh = netif._fresh(ep, snap)
    if snap is None:
        fresh["driver"] = netif._driver(ep)
    who = _who(fresh)
    out = netif._mismatches(fresh, mode.nic)
    if k.channels:
        cur = parse_channels(netif.run_in(ep, ["ethtool", "-l", ep.ifname]))["current"]
        out += [f"{who}: channels {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.channels.items() if cur.get(key) != v]
    if k.coalesce:
        cur = parse_coalesce(netif.run_in(ep, ["ethtool", "-c", ep.ifname]))
        out += [f"{who}: coalescing {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.coalesce.items() if cur.get(key) != v]
    if k.rings:
        cur = parse_rings(netif.run_in(ep, ["ethtool", "-g", ep.ifname]))["current"]
        out += [f"{who}: ring setting {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.rings.items() if cur.get(key) != v]
    if k.rss and "equal" in k.rss:
        table = parse_indirection(netif.run_in(ep, ["ethtool", "-x", ep.ifname]))
        if set(table) != set(range(k.rss["equal"])):
            out.append(f"{who}: RSS table uses queues {sorted(set(table))}, wanted "
                       f"0-{k.rss['equal'] - 1}")
    if k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None:
        queues = _read_queues(ep)
        for path, want in _mask_writes(queues, k.rps_cpus, k.xps_cpus, k.rps_flow_cnt).items():
            q, f = path.split("/")
            have = queues[q][f]
            if have == "unreadable" or _qval(f, have) != _qval(f, want):
                out.append(f"{who}: {q} {f} is {have}, wanted {want}")
    if k.qdisc:
        root = _qdisc_root(ep)
        if root.get("kind") != k.qdisc["kind"] or root.get("handle") != "1:":
            out.append(f"{who}: root qdisc is {root.get('kind')} {root.get('handle')}, "
                       f"wanted {k.qdisc['kind']} 1:")
    return out


def verify_mode(mode: Mode, endpoints: list[Endpoint], state: dict | None = None) -> list[str]:
    """Re-read every setting of ``mode`` (sub-features included); return mismatches."""
    out: list[str] = []
    snaps = (state or {}).get("endpoints", {})
    for ep in endpoints:
        try:
            out += _endpoint_mismatches(ep, mode, snaps.get(ep.label))
        except NetifError as exc:
            out.append(f"{ep.label}: could not re-read the settings: {exc}")
    targets = (state or {}).get("sysctls") or {
        t: {"pid": i["pid"], "values": dict.fromkeys(i["keys"])}
        for t, i in _sysctl_targets(mode, endpoints).items()}
    for target, info in targets.items():
        for key in info["values"]:
            want = mode.knobs.sysctls.get(key)
            if want is None:
                continue
            try:
                have = _read_sysctl(info["pid"], key, target)
            except NetifError as exc:
                out.append(f"{target}: could not re-read {key}: {exc}")
                continue
            if have != want:
                out.append(f"{target}: sysctl {key} is {have!r}, wanted {want!r}")
    return out


# --------------------------------------------------------------------------- restore


def _restore_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Put channels, rings, coalescing, RSS, RPS/XPS and the root qdisc back; return problems."""
    problems: list[str] = []
    who = _who(snap)

    def attempt(argv: list[str]) -> None:
        try:
            netif.run_in(ep, argv)
        except NetifError as exc:
            problems.append(f"{exc} (driver {snap.get('driver', 'unknown')})")

    ch = snap.get("channels", {}).get("current")
    if ch:
        cur = parse_channels(netif.run_in(ep, ["ethtool", "-l", ep.ifname]))["current"]
        diff = {k: v for k, v in ch.items() if v is not None and cur.get(k) != v}
        if diff:
            attempt(["ethtool", "-L", ep.ifname] + _args(diff).split())
    rg = snap.get("rings", {}).get("current")
    if rg:
        cur = parse_rings(netif.run_in(ep, ["ethtool", "-g", ep.ifname]))["current"]
        diff = {k: v for k, v in rg.items()
                if isinstance(v, (bool, int)) and cur.get(k) != v}
        if diff:
            attempt(["ethtool", "-G", ep.ifname] + _args(diff).split())
    co = snap.get("coalesce", {}).get("current")
    if co:
        cur = parse_coalesce(netif.run_in(ep, ["ethtool", "-c", ep.ifname]))
        diff = {k: v for k, v in co.items() if v is not None and cur.get(k) != v}
        diff = dict(sorted(diff.items(), key=lambda kv: not kv[0].startswith("adaptive")))
        if diff:
            attempt(["ethtool", "-C", ep.ifname] + _args(diff).split())
    table = snap.get("rss", {}).get("table")
    if table:
        cur_t = parse_indirection(netif.run_in(ep, ["ethtool", "-x", ep.ifname]))
        if cur_t != table:
            attempt(["ethtool", "-X", ep.ifname, "default"])
            if parse_indirection(netif.run_in(ep, ["ethtool", "-x", ep.ifname])) != table:
                problems.append(f"{who}: RSS table is back to the driver default, which is "
                                "not the table the snapshot had")
    queues = snap.get("queues")
    if queues and "error" not in queues:
        cur_q = _read_queues(ep)
        writes = {f"{q}/{f}": v for q, files in queues.items() for f, v in files.items()
                  if v != "unreadable" and cur_q.get(q, {}).get(f) not in (None, v)
                  and _qval(f, cur_q[q][f]) != _qval(f, v)}
        if writes:
            try:
                _write_masks(ep, writes)
            except NetifError as exc:
                problems.append(str(exc))
    root = snap.get("qdisc_root")
    if root is not None:
        cur = _qdisc_root(ep)
        if cur != root:
            if root.get("handle") in (None, "0:"):
                attempt(["tc", "qdisc", "del", "dev", ep.ifname, "root"])
            else:
                problems.append(f"{who}: root qdisc was {root}, cannot rebuild it")
    return problems


def _remaining_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Differences left after restoring the extras (pure reads)."""
    who = _who(snap)
    out: list[str] = []
    for key, opt, parse in (("channels", "-l", parse_channels), ("rings", "-g", parse_rings)):
        saved = snap.get(key, {}).get("current")
        if saved:
            cur = parse(netif.run_in(ep, ["ethtool", opt, ep.ifname]))["current"]
            out += [f"{who}: {key} {k} is {cur.get(k)}, snapshot had {v}"
                    for k, v in saved.items()
                    if isinstance(v, (bool, int)) and cur.get(k) != v]
    saved_co = snap.get("coalesce", {}).get("current")
    if saved_co:
        cur = parse_coalesce(netif.run_in(ep, ["ethtool", "-c", ep.ifname]))
        out += [f"{who}: coalescing {k} is {cur.get(k)}, snapshot had {v}"
                for k, v in saved_co.items() if v is not None and cur.get(k) != v]
    queues = snap.get("queues")
    if queues and "error" not in queues:
        cur_q = _read_queues(ep)
        for q, files in queues.items():
            for f, v in files.items():
                have = cur_q.get(q, {}).get(f)
                if v != "unreadable" and have not in (None, "unreadable") and (
                        _qval(f, have) != _qval(f, v)):
                    out.append(f"{who}: {q} {f} is {have}, snapshot had {v}")
    root = snap.get("qdisc_root")
    if root is not None:
        cur = _qdisc_root(ep)
        if cur != root and root.get("handle") in (None, "0:") and cur.get("handle") != "0:":
            out.append(f"{who}: root qdisc is {cur}, snapshot had {root}")
    return out


def _restore_endpoint(snap: dict) -> list[str]:
    ep = Endpoint(snap["tier"], snap["ifname"], snap.get("netns_pid"))
    problems = netif._restore_one(snap)
    if any("gone, nothing to restore" in p for p in problems):
        return problems
    problems += _restore_extras(ep, snap)
    try:
        remaining = _remaining_extras(ep, snap)
    except NetifError as exc:
        return problems + [f"{ep.label}: could not re-read the settings after restoring: {exc}"]
    return problems + [r for r in remaining if r not in problems]


def _restore_sysctls(target: str, info: dict) -> list[str]:
    pid = info.get("pid")
    if pid is not None:
        ino = info.get("netns_ino")
        if not os.path.exists(f"/proc/{pid}") or (
                ino is not None and netif._netns_inode(pid) != ino):
            return [f"{target}: gone, nothing to restore"]
    problems: list[str] = []
    for key, value in info.get("values", {}).items():
        try:
            if _read_sysctl(pid, key, target) != value:
                _write_sysctl(pid, key, value, target)
                have = _read_sysctl(pid, key, target)
                if have != value:
                    problems.append(f"{target}: sysctl {key} is {have!r}, snapshot had {value!r}")
        except NetifError as exc:
            problems.append(str(exc))
    return problems


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
            problems += _restore_endpoint(snap)
        except Exception as exc:  # noqa: BLE001 - restore must carry on with the others
            problems.append(f"{label}: restore failed unexpectedly: {exc}")
    for target, info in state.get("sysctls", {}).items():
        try:
            problems += _restore_sysctls(target, info)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{target}: restore failed unexpectedly: {exc}")
    return problems


def state_view(state: dict) -> dict[str, Any]:
    """Compact manifest form: per endpoint settings_view plus the extras, and the sysctls."""
    if state.get("kind") != STATE_KIND:
        return {label: netif.settings_view(s) for label, s in state.items()}
    eps: dict[str, Any] = {}
    for label, snap in state.get("endpoints", {}).items():
        view = netif.settings_view(snap)
        for key in ("channels", "rings"):
            if key in snap:
                view[key] = snap[key].get("current", snap[key])
        if "coalesce" in snap:
            view["coalesce"] = {k: v for k, v in snap["coalesce"].get("current", snap[
                "coalesce"]).items() if v is not None}
        if "rss" in snap:
            view["rss"] = snap["rss"]
        if "queues" in snap:
            view["queues"] = snap["queues"]
        if "qdisc_root" in snap:
            view["qdisc_root"] = snap["qdisc_root"]
        eps[label] = view
    sysctls = {t: dict(i.get("values", {})) for t, i in state.get("sysctls", {}).items()}
    return {"endpoints": eps, "sysctls": sysctls}
