"""One endpoint's part of a mode: the settings of one interface a mode may touch, read (a
snapshot), checked against what its driver allows, changed, read back, restored and viewed.
A mode of several scoped parts gives each endpoint its own settings (``Mode.at``: the parts
that cover it, bound to the deployment by the runner).

Features and MTU go through :mod:`tierbench.interfaces.netif`; channels, rings, coalescing, RSS,
RPS/XPS and the root qdisc through :mod:`tierbench.interfaces.ethtool`. A snapshot is a JSON dict
(it goes into the crash-safe state file), so that a later process can restore from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tierbench.interfaces import ethtool, netif, qdisc, queues
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes.model import Knobs, Mode
from tierbench.transport import Transport, node_of

__all__ = ["change", "mismatches", "problems", "qdisc_problem", "restore", "restore_commands",
           "snapshot", "view"]


# The ethtool settings a snapshot holds when the mode sets them: the snapshot's key (the mode's
# knob of that name), ethtool's option that shows them, and what of its output is kept.
READS: tuple[tuple[str, str, Callable[[str], dict[str, Any]]], ...] = (
    ("channels", "-l", ethtool.parse_channels),
    ("coalesce", "-c", lambda text: {"current": ethtool.parse_coalesce(text)}),
    ("rings", "-g", ethtool.parse_rings),
    ("rss", "-x", lambda text: {"table": ethtool.parse_indirection(text)}),
)


def uses_queues(k: Knobs) -> bool:
    """Whether the mode sets RPS/XPS masks or flow counts (the queues' sysfs files)."""
    return k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None


def who(snap: dict) -> str:
    """The endpoint and its driver, as problems name them."""
    return f"{snap.get('label', '?')} (driver {snap.get('driver', 'unknown')})"


def read(ep: Endpoint, option: str) -> str:
    """What `ethtool OPTION IFNAME` prints for the endpoint (-l, -c, -g, -x)."""
    return netif.run_in(ep, ["ethtool", option, ep.ifname])


def write(ep: Endpoint, option: str, settings: dict[str, Any]) -> list[str]:
    """The `ethtool OPTION IFNAME key value ...` command line of a mapping (-L, -C, -G)."""
    return ["ethtool", option, ep.ifname] + ethtool.ethtool_args(settings).split()


def adaptive_first(settings: dict[str, Any]) -> dict[str, Any]:
    """Coalescing settings with adaptive-rx/tx first (a driver takes rx-usecs only after them)."""
    return dict(sorted(settings.items(), key=lambda kv: not kv[0].startswith("adaptive")))


# --------------------------------------------------------------------------- snapshot


def snapshot(ep: Endpoint, mode: Mode) -> dict[str, Any]:
    """The endpoint's features and MTU, and whatever else of it the mode sets, read in one
    command (an ethtool setting the driver refuses to show is recorded as {"error": ...})."""
    k = mode.at(ep.label).knobs
    keys = [key for key, _, _ in READS if getattr(k, key)]
    if uses_queues(k):
        keys.append("queues")
    if k.qdisc:
        keys.append("qdisc_root")
    base = netif.snapshot_argvs(ep.ifname)
    results = netif.run_all(ep.netns_pid, base + extra_argvs(ep, keys), ep.label, ep.via)
    return {**netif.snapshot_of(ep, results[:len(base)]),
            **extras_of(ep, keys, results[len(base):])}


def extra_argvs(ep: Endpoint, keys: list[str]) -> list[list[str]]:
    """The commands that read the settings ``keys`` names (a snapshot's keys besides netif's:
    channels, coalesce, rings, rss, queues, qdisc_root), in that order."""
    argvs = [["ethtool", option, ep.ifname] for key, option, _ in READS if key in keys]
    if "queues" in keys:
        argvs.append(queues.read_argv(ep))
    if "qdisc_root" in keys:
        argvs.append(qdisc.root_argv(ep.ifname))
    return argvs


def extras_of(ep: Endpoint, keys: list[str], results: list[tuple[str | None, str | None]]
              ) -> dict[str, Any]:
    """The settings ``keys`` names from netif.run_all's results of :func:`extra_argvs`."""
    out: dict[str, Any] = {}
    rest = iter(results)
    for key, _, kept in READS:
        if key in keys:
            text, err = next(rest)
            out[key] = kept(text) if text is not None else {"error": netif.short_error(err or "")}
    if "queues" in keys:
        text, err = next(rest)
        out["queues"] = (queues.parse_queues(text) if text is not None
                         else {"error": netif.short_error(err or "")})
    if "qdisc_root" in keys:
        out["qdisc_root"] = qdisc.parse_root(netif.required(next(rest)), ep.label)
    return out


def read_extras(ep: Endpoint, keys: list[str]) -> dict[str, Any]:
    """The settings ``keys`` names, read in one command."""
    if not keys:
        return {}
    return extras_of(ep, keys, netif.run_all(ep.netns_pid, extra_argvs(ep, keys), ep.label,
                                             ep.via))


# --------------------------------------------------------------------------- check


def remote(ep: Endpoint) -> Transport | None:
    """The cluster node an endpoint is on, as a transport (None: this host)."""
    return ep.via if ep.via.remote else None


def qdisc_problem(mode: Mode, node: Transport | None = None) -> str | None:
    """Why the mode's qdisc cannot be set on this kernel (or a node's), or None."""
    q = mode.knobs.qdisc
    if not q:
        return None
    try:
        err = qdisc.probe_qdisc(tuple(sorted((k, v) for k, v in q.items())), node)
    except NetifError as exc:
        return f"qdisc {q['kind']}: {exc}"
    if err is None:
        return None
    if "kind is unknown" in err or "No such file" in err:
        where = f"the kernel of {node.name}" if node else "this kernel"
        return (f"qdisc {q['kind']} is not available in {where} (module sch_{q['kind']} "
                f"missing): use a kernel with CONFIG_NET_SCH_{q['kind'].upper()} or drop "
                f"{q['kind']} from mode {mode.name}")
    return f"qdisc {q['kind']} with {q} is refused by tc: {err}; fix qdisc in mode {mode.name}"


def problems(snap: dict, mode: Mode) -> list[str]:
    """Why ``mode`` cannot be applied to the endpoint of ``snap`` ([] = possible); pure."""
    mode = mode.at(str(snap.get("label")))
    k = mode.knobs
    name = who(snap)
    found = netif.feature_problems(snap, mode.nic)
    fix = f"drop it from mode {mode.name} or use an interface whose driver supports it"

    def refused(what: str, verb: str, option: str, settings: dict[str, Any], said: str) -> None:
        found.append(f"{what} (ethtool {option} {ethtool.ethtool_args(settings)}) {verb} not "
                     f"supported by {name}: {said}; {fix}")

    if k.channels:
        ch = snap.get("channels", {})
        if "error" in ch:
            refused("channels", "are", "-L", k.channels, ch["error"])
        else:
            for key, want in k.channels.items():
                hi = ch.get("max", {}).get(key)
                if hi is None:
                    found.append(f"channels {key} (ethtool -L {key} {want}) is not supported "
                                 f"by {name}: ethtool -l shows n/a; {fix}")
                elif want > hi:
                    found.append(f"channels {key} {want} is more than {name} allows "
                                 f"(at most {hi}); lower it in mode {mode.name}")
    if k.coalesce:
        co = snap.get("coalesce", {})
        if "error" in co:
            refused("interrupt coalescing", "is", "-C", k.coalesce, f"ethtool -c says {co['error']}")
        else:
            for key, want in k.coalesce.items():
                if co.get("current", {}).get(key) is None:
                    found.append(f"interrupt coalescing setting {key} (ethtool -C {key} "
                                 f"{ethtool.ethtool_args({key: want}).split()[-1]}) is not "
                                 f"supported by {name}: ethtool -c shows n/a; {fix}")
    if k.rings:
        found += ring_problems(snap, mode, fix)
    if k.rss:
        rss = snap.get("rss", {})
        if "error" in rss:
            refused("RSS indirection", "is", "-X", k.rss, f"ethtool -x says {rss['error']}")
    for key, side, value in (("rps_cpus", "rx", k.rps_cpus), ("xps_cpus", "tx", k.xps_cpus),
                             ("rps_flow_cnt", "rx", k.rps_flow_cnt)):
        if value is None:
            continue
        qs = snap.get("queues", {})
        if "error" in qs:
            found.append(f"{key} cannot be read on {name}: {qs['error']}")
            continue
        has = [q for q, files in qs.items() if q.startswith(side + "-") and key in files]
        if not has:
            found.append(f"{key} is not supported by {name}: no {side} queue has {key} "
                         f"(kernel without CONFIG_RPS/CONFIG_XPS?); {fix}")
        elif key.endswith("_cpus") and value != "all" and (
                queues.mask_int(str(value))
                & ~queues.mask_int(queues.online_cpu_mask(node_of(snap)))):
            found.append(f"{key} {value} names CPUs that are not online (online mask "
                         f"{queues.online_cpu_mask(node_of(snap))}); change mode "
                         f"{mode.name}")
    if k.qdisc:
        root = snap.get("qdisc_root", {})
        if root.get("handle") not in (None, "0:"):
            found.append(f"{name} already has a configured root qdisc {root.get('kind')} "
                         f"{root.get('handle')}, which a restore could not rebuild; remove it "
                         f"(tc qdisc del dev {snap.get('ifname')} root) or run tierbench clean")
    return found


def ring_problems(snap: dict, mode: Mode, fix: str) -> list[str]:
    """Why the mode's ring sizes, header-data split or tx-push cannot be set ([] = they can)."""
    rings = mode.knobs.rings
    name = who(snap)
    rg = snap.get("rings", {})
    if "error" in rg:
        what = "header-data split and rings" if "tcp-data-split" in rings else "rings"
        return [f"{what} (ethtool -G {ethtool.ethtool_args(rings)}) are not supported by "
                f"{name}: ethtool -g says {rg['error']}; {fix}"]
    found = []
    for key, want in rings.items():
        cur = rg.get("current", {}).get(key)
        hi = rg.get("max", {}).get(key)
        if key == "tcp-data-split" and cur not in (True, False):
            found.append(f"header-data split (ethtool -G tcp-data-split "
                         f"{netif.onoff(bool(want))}) is not supported by {name}: "
                         f"ethtool -g reports {cur if cur else 'no such setting'}; {fix}")
        elif key == "tx-push" and cur is None:
            found.append(f"rings setting tx-push is not supported by {name}; {fix}")
        elif key not in ("tcp-data-split", "tx-push"):
            if cur is None or (hi is not None and want > hi):
                limit = "n/a" if cur is None else f"at most {hi}"
                found.append(f"ring {key} {want} is not possible on {name} "
                             f"(ethtool -g: {limit}); change mode {mode.name}")
    return found


# --------------------------------------------------------------------------- change


def change(ep: Endpoint, snap: dict, mode: Mode) -> None:
    """Set everything the mode sets on the endpoint, in one command but for the RPS/XPS masks
    (each setting tried whatever the others did; NetifError naming every refusal)."""
    mode = mode.at(ep.label)
    k = mode.knobs
    argvs = []
    features = netif.wanted_feature_args(snap, mode.nic)
    if features:
        argvs.append(netif.features_argv(ep.ifname, features))
    if mode.nic.mtu is not None:
        argvs.append(netif.mtu_argv(ep.ifname, mode.nic.mtu))
    if k.channels:
        argvs.append(write(ep, "-L", k.channels))
    if k.rings:
        argvs.append(write(ep, "-G", k.rings))
    if k.coalesce:
        argvs.append(write(ep, "-C", adaptive_first(k.coalesce)))
    if k.rss:
        if "equal" in k.rss:
            rss_args = ["equal", str(k.rss["equal"])]
        elif "weights" in k.rss:
            rss_args = ["weight"] + [str(w) for w in k.rss["weights"]]
        else:
            rss_args = ["default"]
        argvs.append(["ethtool", "-X", ep.ifname] + rss_args)
    if k.qdisc:
        argvs += qdisc.qdisc_commands(ep.ifname, k.qdisc)
    if argvs:
        refused = [err for _, err in netif.run_all(ep.netns_pid, argvs, ep.label, ep.via) if err]
        if refused:
            raise NetifError("; ".join(refused))
    writes: dict[str, str] = {}
    if uses_queues(k):
        # re-read after a channel change, which may have added queues the snapshot did not have
        have = (queues.read_queues(ep) if k.channels or "error" in snap.get("queues", {})
                else snap["queues"])
        writes = queues.mask_writes(have, k.rps_cpus, k.xps_cpus, k.rps_flow_cnt, remote(ep))
    if writes:
        queues.write_masks(ep, writes)


# --------------------------------------------------------------------------- verify


def mismatches(ep: Endpoint, mode: Mode, snap: dict | None = None,
               fresh: dict | None = None) -> list[str]:
    """Every setting of the mode (sub-features included) read back (in one command; ``fresh``:
    a snapshot just taken, read instead) that differs from it."""
    return differences(fresh if fresh is not None else snapshot(ep, mode), mode)


def differences(fresh: dict, mode: Mode) -> list[str]:
    """Where the endpoint's snapshot ``fresh`` differs from the mode's settings (pure)."""
    mode = mode.at(str(fresh.get("label")))
    k = mode.knobs
    name = who(fresh)
    out = netif.feature_mismatches(fresh, mode.nic)
    current: dict[str, dict[str, Any]] = {}
    for key, part in (("channels", "current"), ("coalesce", "current"), ("rings", "current"),
                      ("rss", "table"), ("queues", None)):
        if getattr(k, key, None) or (key == "queues" and uses_queues(k)):
            got = fresh.get(key, {"error": "not read"})
            if "error" in got:
                out.append(f"{name}: could not re-read its {key}: {got['error']}")
            else:
                current[key] = got[part] if part else got
    for key, label in (("channels", "channels"), ("coalesce", "coalescing"),
                       ("rings", "ring setting")):
        if key in current:
            out += [f"{name}: {label} {s} is {current[key].get(s)}, wanted {v}"
                    for s, v in getattr(k, key).items() if current[key].get(s) != v]
    if "rss" in current and "equal" in k.rss:
        table = current["rss"]
        if set(table) != set(range(k.rss["equal"])):
            out.append(f"{name}: RSS table uses queues {sorted(set(table))}, wanted "
                       f"0-{k.rss['equal'] - 1}")
    if "queues" in current:
        have_q = current["queues"]
        for path, want in queues.mask_writes(have_q, k.rps_cpus, k.xps_cpus, k.rps_flow_cnt,
                                             node_of(fresh)).items():
            q, f = path.split("/")
            have = have_q[q][f]
            if have == "unreadable" or queues.queue_value(f, have) != queues.queue_value(f, want):
                out.append(f"{name}: {q} {f} is {have}, wanted {want}")
    if k.qdisc:
        root = fresh.get("qdisc_root", {})
        if root.get("kind") != k.qdisc["kind"] or root.get("handle") != "1:":
            out.append(f"{name}: root qdisc is {root.get('kind')} {root.get('handle')}, "
                       f"wanted {k.qdisc['kind']} 1:")
    return out


# --------------------------------------------------------------------------- restore


def restore(snap: dict) -> list[str]:
    """Put the endpoint of ``snap`` back as it was; problems ([] = done; an endpoint that is
    gone says "gone, nothing to restore")."""
    ep = netif.endpoint_of(snap)
    found = netif.restore_endpoint(snap)
    if any("gone, nothing to restore" in p for p in found):
        return found
    try:
        extras = restore_extras(ep, snap)
    except NetifError as exc:
        return found + [f"{ep.label}: could not restore its other settings: {exc}"]
    return found + [r for r in extras if r not in found]


def saved_keys(snap: dict) -> list[str]:
    """The settings besides features and MTU a snapshot holds to put back."""
    keys = [key for key, part in (("channels", "current"), ("coalesce", "current"),
                                  ("rings", "current"), ("rss", "table"))
            if snap.get(key, {}).get(part)]
    if snap.get("queues") and "error" not in snap["queues"]:
        keys.append("queues")
    if snap.get("qdisc_root") is not None:
        keys.append("qdisc_root")
    return keys


def restore_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Put channels, rings, coalescing, RSS, RPS/XPS and the root qdisc back and return the
    problems and the differences left: one read, the changes with their read back in one
    command, then the RPS/XPS masks (on the queues as the channels left them)."""
    keys = saved_keys(snap)
    if not keys:
        return []
    name = who(snap)
    found: list[str] = []
    cur = read_extras(ep, keys)
    changes: list[list[str]] = []
    for key, option in (("channels", "-L"), ("rings", "-G"), ("coalesce", "-C")):
        saved = snap.get(key, {}).get("current")
        if not saved:
            continue
        if "error" in cur[key]:
            found.append(f"{name}: could not re-read its {key} to restore them: "
                         f"{cur[key]['error']}")
            continue
        diff = {k: v for k, v in saved.items()
                if kept(key, v) and cur[key]["current"].get(k) != v}
        if diff:
            changes.append(write(ep, option, adaptive_first(diff) if key == "coalesce" else diff))
    table = snap.get("rss", {}).get("table")
    rss_reset = bool(table) and cur["rss"].get("table") != table
    if rss_reset:
        changes.append(["ethtool", "-X", ep.ifname, "default"])
    root = snap.get("qdisc_root")
    if root is not None and cur["qdisc_root"] != root:
        if root.get("handle") in (None, "0:"):
            changes.append(["tc", "qdisc", "del", "dev", ep.ifname, "root"])
        else:
            found.append(f"{name}: root qdisc was {root}, cannot rebuild it")
    after = cur
    if changes:
        results = netif.run_all(ep.netns_pid, changes + extra_argvs(ep, keys), ep.label, ep.via)
        found += [f"{err} (driver {snap.get('driver', 'unknown')})"
                  for _, err in results[:len(changes)] if err]
        after = extras_of(ep, keys, results[len(changes):])
    if rss_reset and after["rss"].get("table") != table:
        found.append(f"{name}: RSS table is back to the driver default, which is "
                     "not the table the snapshot had")
    if "queues" in keys:
        found += restore_queues(ep, snap, after)
    return found + [r for r in extras_left(snap, after) if r not in found]


def kept(key: str, value: Any) -> bool:
    """Whether a saved channel, ring or coalescing value is one to write back."""
    return isinstance(value, (bool, int)) if key == "rings" else value is not None


def restore_queues(ep: Endpoint, snap: dict, after: dict) -> list[str]:
    """The RPS/XPS masks and flow counts put back where ``after`` (read after the channels were
    put back) differs, and read back in the same command into ``after``."""
    cur_q = after["queues"]
    if "error" in cur_q:
        return [f"{who(snap)}: could not re-read its queues to restore them: {cur_q['error']}"]
    writes = {f"{q}/{f}": v for q, files in snap["queues"].items() for f, v in files.items()
              if v != "unreadable" and cur_q.get(q, {}).get(f) not in (None, v)
              and queues.queue_value(f, cur_q[q][f]) != queues.queue_value(f, v)}
    if not writes:
        return []
    (_, failed), (text, err) = netif.run_all(  # written and read back in one command
        ep.netns_pid, [queues.write_argv(ep, writes), queues.read_argv(ep)], ep.label, ep.via)
    after["queues"] = (queues.parse_queues(text) if text is not None
                       else {"error": netif.short_error(err or "")})
    return [failed] if failed else []


def extras_left(snap: dict, after: dict) -> list[str]:
    """Differences between the saved extras of ``snap`` and ``after``, read after restoring
    them (pure)."""
    name = who(snap)
    out: list[str] = []
    for key in ("channels", "rings", "coalesce"):
        saved = snap.get(key, {}).get("current")
        if saved and "error" not in after.get(key, {}):
            have = after[key]["current"]
            label = "coalescing" if key == "coalesce" else key
            out += [f"{name}: {label} {k} is {have.get(k)}, snapshot had {v}"
                    for k, v in saved.items() if kept(key, v) and have.get(k) != v]
    cur_q = after.get("queues", {})
    if "queues" in after and "error" not in cur_q:
        for q, files in snap["queues"].items():
            for f, v in files.items():
                have_v = cur_q.get(q, {}).get(f)
                if v != "unreadable" and have_v not in (None, "unreadable") and (
                        queues.queue_value(f, have_v) != queues.queue_value(f, v)):
                    out.append(f"{name}: {q} {f} is {have_v}, snapshot had {v}")
    root = snap.get("qdisc_root")
    if root is not None:
        now_root = after["qdisc_root"]
        if now_root != root and root.get("handle") in (None, "0:") and \
                now_root.get("handle") != "0:":
            out.append(f"{name}: root qdisc is {now_root}, snapshot had {root}")
    return out


def restore_commands(snap: dict, mode: Mode) -> list[list[str]]:
    """The commands that put back what ``mode`` changes on the endpoint of ``snap``, whatever
    the interface holds now, in restore's order (features and MTU, channels, rings,
    coalescing, RSS, RPS/XPS, the root qdisc): the rollback guard's plan for it, each run in
    the endpoint's namespace on its node. Only the keys the mode sets are written back (a
    driver refuses `ethtool -L other 1` it cannot change, and the mode never touched it)."""
    k, ifname = mode.at(str(snap.get("label"))).knobs, snap["ifname"]
    out = netif.restore_commands(snap)
    for key, option, wanted in (("channels", "-L", k.channels), ("rings", "-G", k.rings),
                                ("coalesce", "-C", k.coalesce)):
        saved = snap.get(key, {}).get("current") or {}
        back = {name: saved[name] for name in (adaptive_first(saved) if key == "coalesce"
                                               else saved)
                if (name in wanted or name.startswith("adaptive")) and name in saved
                and isinstance(saved[name], (bool, int))}
        if back and wanted:
            out.append(["ethtool", option, ifname] + ethtool.ethtool_args(back).split())
    if snap.get("rss", {}).get("table"):
        out.append(["ethtool", "-X", ifname, "default"])
    saved_q = snap.get("queues")
    if saved_q and "error" not in saved_q:
        writes = {f"{q}/{f}": v for q, files in saved_q.items() for f, v in files.items()
                  if v != "unreadable"}
        if writes:
            out.append(queues.sh_argv(queues.masks_script(ifname, writes),
                                      snap.get("netns_pid") is not None))
    root = snap.get("qdisc_root")
    if root is not None and root.get("handle") in (None, "0:"):
        out.append(["tc", "qdisc", "del", "dev", ifname, "root"])
    return out


# --------------------------------------------------------------------------- view


def view(snap: dict) -> dict[str, Any]:
    """The manifest's compact form of a snapshot: netif's settings view plus the extras."""
    out = netif.settings_view(snap)
    for key in ("channels", "rings"):
        if key in snap:
            out[key] = snap[key].get("current", snap[key])
    if "coalesce" in snap:
        out["coalesce"] = {k: v for k, v in snap["coalesce"].get(
            "current", snap["coalesce"]).items() if v is not None}
    for key in ("rss", "queues", "qdisc_root"):
        if key in snap:
            out[key] = snap[key]
    return out
