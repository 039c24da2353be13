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
    """The endpoint's features and MTU, and whatever else of it the mode sets (an ethtool
    setting the driver refuses to show is recorded as {"error": ...})."""
    snap = netif.snapshot(ep)
    k = mode.at(ep.label).knobs
    for key, option, kept in READS:
        if getattr(k, key):
            text, err = netif.try_run(ep, ["ethtool", option, ep.ifname])
            snap[key] = kept(text) if text is not None else {"error": err}
    if uses_queues(k):
        try:
            snap["queues"] = queues.read_queues(ep)
        except NetifError as exc:
            snap["queues"] = {"error": netif.short_error(str(exc))}
    if k.qdisc:
        snap["qdisc_root"] = qdisc.qdisc_root(ep)
    return snap


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
    """Set everything the mode sets on the endpoint (raises NetifError at the first refusal)."""
    mode = mode.at(ep.label)
    k = mode.knobs
    netif.set_features(ep, netif.wanted_feature_args(snap, mode.nic))
    if mode.nic.mtu is not None:
        netif.set_mtu(ep, mode.nic.mtu)
    if k.channels:
        netif.run_in(ep, write(ep, "-L", k.channels))
    if k.rings:
        netif.run_in(ep, write(ep, "-G", k.rings))
    if k.coalesce:
        netif.run_in(ep, write(ep, "-C", adaptive_first(k.coalesce)))
    if k.rss:
        if "equal" in k.rss:
            rss_args = ["equal", str(k.rss["equal"])]
        elif "weights" in k.rss:
            rss_args = ["weight"] + [str(w) for w in k.rss["weights"]]
        else:
            rss_args = ["default"]
        netif.run_in(ep, ["ethtool", "-X", ep.ifname] + rss_args)
    writes: dict[str, str] = {}
    if uses_queues(k):
        # re-read: a channel change above may have added queues the snapshot did not have
        writes = queues.mask_writes(queues.read_queues(ep), k.rps_cpus, k.xps_cpus,
                                    k.rps_flow_cnt, remote(ep))
    if writes:
        queues.write_masks(ep, writes)
    if k.qdisc:
        for cmd in qdisc.qdisc_commands(ep.ifname, k.qdisc):
            netif.run_in(ep, cmd)


# --------------------------------------------------------------------------- verify


def mismatches(ep: Endpoint, mode: Mode, snap: dict | None) -> list[str]:
    """Every setting of the mode (sub-features included) read back that differs from it."""
    mode = mode.at(ep.label)
    k = mode.knobs
    fresh = netif.read_features(ep, snap)
    if snap is None:
        fresh["driver"] = netif.driver(ep)
    name = who(fresh)
    out = netif.feature_mismatches(fresh, mode.nic)
    if k.channels:
        cur = ethtool.parse_channels(read(ep, "-l"))["current"]
        out += [f"{name}: channels {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.channels.items() if cur.get(key) != v]
    if k.coalesce:
        cur = ethtool.parse_coalesce(read(ep, "-c"))
        out += [f"{name}: coalescing {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.coalesce.items() if cur.get(key) != v]
    if k.rings:
        cur = ethtool.parse_rings(read(ep, "-g"))["current"]
        out += [f"{name}: ring setting {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.rings.items() if cur.get(key) != v]
    if k.rss and "equal" in k.rss:
        table = ethtool.parse_indirection(read(ep, "-x"))
        if set(table) != set(range(k.rss["equal"])):
            out.append(f"{name}: RSS table uses queues {sorted(set(table))}, wanted "
                       f"0-{k.rss['equal'] - 1}")
    if uses_queues(k):
        current = queues.read_queues(ep)
        for path, want in queues.mask_writes(current, k.rps_cpus, k.xps_cpus, k.rps_flow_cnt,
                                             remote(ep)).items():
            q, f = path.split("/")
            have = current[q][f]
            if have == "unreadable" or queues.queue_value(f, have) != queues.queue_value(f, want):
                out.append(f"{name}: {q} {f} is {have}, wanted {want}")
    if k.qdisc:
        root = qdisc.qdisc_root(ep)
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
    found += restore_extras(ep, snap)
    try:
        remaining = remaining_extras(ep, snap)
    except NetifError as exc:
        return found + [f"{ep.label}: could not re-read the settings after restoring: {exc}"]
    return found + [r for r in remaining if r not in found]


def restore_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Put channels, rings, coalescing, RSS, RPS/XPS and the root qdisc back; return problems."""
    found: list[str] = []
    name = who(snap)

    def attempt(argv: list[str]) -> None:
        try:
            netif.run_in(ep, argv)
        except NetifError as exc:
            found.append(f"{exc} (driver {snap.get('driver', 'unknown')})")

    ch = snap.get("channels", {}).get("current")
    if ch:
        cur = ethtool.parse_channels(read(ep, "-l"))["current"]
        diff = {k: v for k, v in ch.items() if v is not None and cur.get(k) != v}
        if diff:
            attempt(write(ep, "-L", diff))
    rg = snap.get("rings", {}).get("current")
    if rg:
        cur = ethtool.parse_rings(read(ep, "-g"))["current"]
        diff = {k: v for k, v in rg.items()
                if isinstance(v, (bool, int)) and cur.get(k) != v}
        if diff:
            attempt(write(ep, "-G", diff))
    co = snap.get("coalesce", {}).get("current")
    if co:
        cur = ethtool.parse_coalesce(read(ep, "-c"))
        diff = adaptive_first({k: v for k, v in co.items() if v is not None and cur.get(k) != v})
        if diff:
            attempt(write(ep, "-C", diff))
    table = snap.get("rss", {}).get("table")
    if table:
        if ethtool.parse_indirection(read(ep, "-x")) != table:
            attempt(["ethtool", "-X", ep.ifname, "default"])
            if ethtool.parse_indirection(read(ep, "-x")) != table:
                found.append(f"{name}: RSS table is back to the driver default, which is "
                             "not the table the snapshot had")
    saved_q = snap.get("queues")
    if saved_q and "error" not in saved_q:
        cur_q = queues.read_queues(ep)
        writes = {f"{q}/{f}": v for q, files in saved_q.items() for f, v in files.items()
                  if v != "unreadable" and cur_q.get(q, {}).get(f) not in (None, v)
                  and queues.queue_value(f, cur_q[q][f]) != queues.queue_value(f, v)}
        if writes:
            try:
                queues.write_masks(ep, writes)
            except NetifError as exc:
                found.append(str(exc))
    root = snap.get("qdisc_root")
    if root is not None:
        cur = qdisc.qdisc_root(ep)
        if cur != root:
            if root.get("handle") in (None, "0:"):
                attempt(["tc", "qdisc", "del", "dev", ep.ifname, "root"])
            else:
                found.append(f"{name}: root qdisc was {root}, cannot rebuild it")
    return found


def remaining_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Differences left after restoring the extras (pure reads)."""
    name = who(snap)
    out: list[str] = []
    for key, opt, parse in (("channels", "-l", ethtool.parse_channels),
                            ("rings", "-g", ethtool.parse_rings)):
        saved = snap.get(key, {}).get("current")
        if saved:
            cur = parse(read(ep, opt))["current"]
            out += [f"{name}: {key} {k} is {cur.get(k)}, snapshot had {v}"
                    for k, v in saved.items()
                    if isinstance(v, (bool, int)) and cur.get(k) != v]
    saved_co = snap.get("coalesce", {}).get("current")
    if saved_co:
        cur = ethtool.parse_coalesce(read(ep, "-c"))
        out += [f"{name}: coalescing {k} is {cur.get(k)}, snapshot had {v}"
                for k, v in saved_co.items() if v is not None and cur.get(k) != v]
    saved_q = snap.get("queues")
    if saved_q and "error" not in saved_q:
        cur_q = queues.read_queues(ep)
        for q, files in saved_q.items():
            for f, v in files.items():
                have = cur_q.get(q, {}).get(f)
                if v != "unreadable" and have not in (None, "unreadable") and (
                        queues.queue_value(f, have) != queues.queue_value(f, v)):
                    out.append(f"{name}: {q} {f} is {have}, snapshot had {v}")
    root = snap.get("qdisc_root")
    if root is not None:
        cur = qdisc.qdisc_root(ep)
        if cur != root and root.get("handle") in (None, "0:") and cur.get("handle") != "0:":
            out.append(f"{name}: root qdisc is {cur}, snapshot had {root}")
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
