"""The web kind's disk systems (004 §5): a docroot on an emulated or real disk system, alone or
spread over several web servers' disks by 004 Table 4's strategies, and the per-file response
times the proxy's access log gives (004 Fig. 11-12).

A point's stack settings name the disk system (`docroot`), the strategy (`placement`) and the
web servers; from them and the experiment's file sets this module makes the disk plan (devices
and their sizes), builds it, writes the map of a spread server and the Compose overlay that binds
each server's disks into its web container and throttles them, and reads the limits back.

A docroot on OrangeFS may store on a disk system too (`pvfs_storage: ide`, 004 §4.1: each PVFS
I/O server's ext3 on an IDE disk): then the plan's servers are the I/O servers, each with its own
device(s), bound at the server's /data and throttled in its container (tiers/orangefs.py,
which the pfs kind's `pfs.storage` uses too).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tierbench.kinds.web import services
from tierbench.tiers import orangefs
from tierbench.placement import model, placer
from tierbench.tiers import diskbuild, disks
from workloads import filesets
from workloads import spread
from workloads import traces as tracelib

KIB, MIB = 1 << 10, 1 << 20
ACCESS_LOG = "/var/log/apache2/access.log"
# file sizes the per-file summary groups (004 Fig. 11-12 show every file; the summary keeps three
# groups, per_file.csv every file)
BUCKETS = (("small", 0, 64 * KIB), ("medium", 64 * KIB, MIB), ("large", MIB, math.inf))
BUCKET_LABELS = {"small": "files < 64 KiB", "medium": "64 KiB - 1 MiB", "large": ">= 1 MiB"}


# 004 §5.2.4 Table 4: three web servers with three disks each (but RAID-Single: one server)
STRATEGIES: dict[str, disks.Layout] = {
    "single-disk": disks.Layout(3, 1, False),
    "random": disks.Layout(3, 3, False, "random"),
    "popularity": disks.Layout(3, 3, False, "popularity"),
    "size": disks.Layout(3, 3, False, "size"),
    "raid-single": disks.Layout(1, 3, True),
    "raid": disks.Layout(3, 3, True),
}
STRATEGY_NOTES = {
    "single-disk": "every file on one disk of each of 3 servers",
    "random": "files spread at random over 3 disks of each of 3 servers",
    "popularity": "files sorted by popularity, dealt round-robin over 3 disks, 3 servers",
    "size": "files sorted by size, dealt round-robin over 3 disks, 3 servers",
    "raid-single": "every file striped over 3 disks (RAID-0), one server",
    "raid": "every file striped over 3 disks (RAID-0) of each of 3 servers",
}


def layout(system: disks.System, strategy: str | None, servers: int = 1) -> disks.Layout:
    """The layout of a system alone (`servers` web servers) or under a Table 4 strategy (the
    system's device then stands for each of the strategy's disks)."""
    if strategy is None:
        return disks.layout(system, servers)
    return STRATEGIES[strategy]



def names(custom: Mapping[str, Any] | None) -> dict[str, disks.System]:
    """The disk systems an experiment can name: built-in and its own."""
    return disks.resolve(custom)


def system_of(docroot: str, known: Mapping[str, disks.System]) -> disks.System | None:
    """The disk system a docroot names, or None (disk, tmpfs, orangefs)."""
    return known.get(services.docroot_parts(docroot)[0])


def settings_problem(docroots: list[str], fixed: tuple[str, ...], known: Mapping[str, disks.System],
            strategies: list[str] | None, web_servers: int | None, proxy: str) -> str | None:
    """What is wrong with a stack's disk settings (one sentence naming the key), or None."""
    for i, d in enumerate(docroots):
        base = services.docroot_parts(d)[0]
        if base not in fixed and base not in known:
            return (f"stack.docroot[{i}]: must be one of {', '.join(fixed)} or a disk system "
                    f"({', '.join(known)}, or one of disk_systems), each optionally with "
                    f"+hot-tmpfs, got {d!r}")
    if web_servers is not None and web_servers not in (1, 3):
        return f"stack.web_servers: must be 1 or 3 (004's data center), got {web_servers}"
    if strategies:
        if web_servers is not None:
            return ("stack.web_servers: leave it out with stack.placement (each strategy of 004 "
                    "Table 4 sets its servers: 3, RAID-Single 1)")
        for d in docroots:
            s = system_of(d, known)
            if s is None or s.devices != 1:
                return (f"stack.placement: needs docroot to be a one-device disk system (such as "
                        f"scsi), which the strategies lay out over 3 disks per server; got {d!r}")
    if proxy == "haproxy" and ((web_servers or 1) > 1 or any(
            STRATEGIES[p].servers > 1 for p in strategies or [])):
        return ("stack.proxy: several web servers need proxy: apache (its balancer spreads the "
                "requests); HAProxy serves one")
    return None


def device_problem(docroots: list[str], known: Mapping[str, disks.System]) -> str | None:
    """A named real device that does not exist or is no block device, one sentence."""
    import os
    import stat

    for d in docroots:
        s = system_of(d, known)
        if s is None:
            continue
        for dev in s.paths:
            try:
                mode = os.stat(dev).st_mode
            except FileNotFoundError:
                return (f"disk_systems.{s.name}.devices: {dev} does not exist on this host: name "
                        "one of its block devices (lsblk lists them)")
            if not stat.S_ISBLK(mode):
                return f"disk_systems.{s.name}.devices: {dev} is not a block device"
    return None


def popularity(specs: list[dict], seed: int) -> dict[str, list[int]]:
    """Per file set (by name), the file index of each popularity rank: the Zipf trace's mapping
    for the first trace that draws on the set, else the set's own order (a hit-ratio trace's
    hot file is its first)."""
    out: dict[str, list[int]] = {}
    for spec in specs:
        parts = spec["parts"] if spec.get("kind") == "mix" else [spec]
        for part in parts:
            fs = tracelib.fileset_of(part)
            name = filesets.set_name(fs)
            if name in out:
                continue
            files = filesets.files(fs)
            if part.get("kind") == "zipf":
                out[name] = tracelib.rank_order(files, part.get("mapping", "random"), seed)
            else:
                out[name] = list(range(len(files)))
    return out


def assignment(sets: list[dict], pops: dict[str, list[int]], strategy: str, ndisks: int,
               seed: int) -> tuple[list[str], list[int]]:
    """A spread server's map lines and bytes per disk, set by set."""
    lines: list[str] = []
    per_disk = [0] * ndisks
    for k, fs in enumerate(sets):
        files = filesets.files(fs)
        sizes = [size for _, size in files]
        disk_of = spread.assign(sizes, strategy, ndisks, pops.get(filesets.set_name(fs)),
                                seed + 7919 * k)
        lines += spread.map_lines([p for p, _ in files], disk_of)
        for i, b in enumerate(spread.bytes_per_disk(sizes, disk_of, ndisks)):
            per_disk[i] += b
    return lines, per_disk


def pvfs_system(settings: Mapping[str, Any],
                known: Mapping[str, disks.System]) -> disks.System | None:
    """The disk system the OrangeFS I/O servers store on (a docroot on OrangeFS with
    pvfs_storage naming a disk system), or None."""
    if services.docroot_parts(str(settings.get("docroot", "disk")))[0] != "orangefs":
        return None
    return known.get(str(settings.get("pvfs_storage") or "tmpfs"))


def pvfs_storage_problem(storage: str | None, known: Mapping[str, disks.System]) -> str | None:
    """What is wrong with stack.pvfs_storage (one sentence), or None."""
    return orangefs.storage_problem("stack.pvfs_storage", storage, known)


def plan_for(settings: Mapping[str, Any], known: Mapping[str, disks.System], sets: list[dict],
             pops: dict[str, list[int]], seed: int) -> tuple[disks.Plan, list[str]] | None:
    """The disk plan of a point's stack settings (None without a disk system) and the map of
    its spread servers ([] when not spread); for a docroot on OrangeFS, its I/O servers'."""
    pvfs = pvfs_system(settings, known)
    if pvfs is not None:
        return orangefs.storage_plan(pvfs, int(settings.get("pvfs_io_servers") or 3),
                                     sum(filesets.total_bytes(fs) for fs in sets)), []
    system = system_of(str(settings.get("docroot", "disk")), known)
    if system is None:
        return None
    strategy = settings.get("placement")
    lay = layout(system, strategy, int(settings.get("web_servers") or 1))
    total = sum(filesets.total_bytes(fs) for fs in sets)
    lines: list[str] = []
    spread_bytes = None
    if lay.spread is not None and lay.disks > 1:
        lines, spread_bytes = assignment(sets, pops, lay.spread, lay.disks, seed)
    per_disk = disks.per_disk_bytes(lay, total, spread_bytes)
    servers = list(services.WEB_SERVICES[:lay.servers])
    return disks.plan(system, lay, servers, per_disk), lines


STORAGE_WORDS = {
    "disk": "a Docker volume on the host's disk (page-cached, unthrottled)",
    "tmpfs": "tmpfs (memory: never evicted, never read from a disk)",
}


def storage_words(settings: Mapping[str, Any], known: Mapping[str, disks.System]) -> str:
    """Where a point's docroot stores its files, in the plan's words."""
    base = services.docroot_parts(str(settings.get("docroot", "disk")))[0]
    if base == "orangefs":
        n = int(settings.get("pvfs_io_servers") or 3)
        storage = str(settings.get("pvfs_storage") or "tmpfs")
        system = known.get(storage)
        where = (f"disk system {system.describe()}, one per server" if system is not None
                 else STORAGE_WORDS.get(storage, storage))
        return f"OrangeFS over {n} I/O servers storing on {where}"
    system = system_of(base, known)
    if system is not None:
        return f"disk system {system.describe()}"
    return STORAGE_WORDS.get(base, base)


def label(settings: Mapping[str, Any], known: Mapping[str, disks.System],
          host: disks.Host = disks.LOCAL) -> str:
    """The plan's words for a point's storage: its disk system, or where its files are (and
    the hot site's small files on tmpfs, with +hot-tmpfs); for RAID-0, the tool and stripe
    the web servers' host gives it."""
    docroot = str(settings.get("docroot", "disk"))
    hot = "; the hot site's small files also on tmpfs" if services.docroot_parts(docroot)[1] else ""
    system = system_of(docroot, known)
    if system is None:
        return f" [storage: {storage_words(settings, known)}{hot}]"
    strategy = settings.get("placement")
    what = system.describe()
    striped = layout(system, strategy).raid0
    raid = f"; RAID-0 by {disks.raid_words(host)}" if striped else ""
    if strategy:
        return (f" [disk {what}; placement {strategy}: {STRATEGY_NOTES[strategy]}{raid}"
                f"{hot}]")
    servers = int(settings.get("web_servers") or 1)
    return f" [disk {what}" + (f" on each of {servers} web servers" if servers > 1 else "") \
        + f"{raid}{hot}]"


WEB_ROLE = "web"


def host_of_web(where: placer.Placer, service: str = "web") -> disks.Host:
    """Where a web server's disk system is built: this host, or the node its container runs on
    (web, web2 and web3 go round the web role's nodes)."""
    return disks.of_role(where, WEB_ROLE, services.WEB_SERVICES.index(service))


def hosts_for(where: placer.Placer, p: disks.Plan) -> dict[str, disks.Host]:
    """Each server of the plan -> the host its disks are built on (the node its container
    runs on: a bind mount and a device throttle name paths there): the web servers', or the
    OrangeFS I/O servers' (pvfs_storage a disk system)."""
    if p.servers[0].startswith(orangefs.IO_SERVICE):
        return orangefs.storage_hosts(where, p)
    return {s: host_of_web(where, s) for s in p.servers}


def plans_by_role(plans: list[disks.Plan]) -> dict[str, list[disks.Plan]]:
    """The plans by the cluster role whose nodes build them: the web servers' (web), the
    OrangeFS I/O servers' (pfs_io)."""
    out: dict[str, list[disks.Plan]] = {}
    for p in plans:
        io = p.servers[0].startswith(orangefs.IO_SERVICE)
        out.setdefault("pfs_io" if io else WEB_ROLE, []).append(p)
    return out


def build(p: disks.Plan, lines: list[str], env: Mapping[str, str], log: Any,
          hosts: Mapping[str, disks.Host] | disks.Host = disks.LOCAL) -> diskbuild.Built:
    """The disk system built (or kept) on each server's host, maps written, and its Compose
    overlay (bind sources: paths on those hosts)."""
    if p.servers[0].startswith(orangefs.IO_SERVICE):
        return orangefs.build_storage(p, env, log, hosts)
    built = diskbuild.ensure(p, env, log, hosts)
    if lines:
        for s in built.servers:
            diskbuild.write_map(built, s.name, lines)
    services: dict[str, dict[str, Any]] = {}
    for s in built.servers:
        services[s.name] = {
            "volumes": [{"type": "bind", "source": s.root, "target": "/srv/docroot",
                         "read_only": True}],
            "environment": {"WEB_DISK_MAP": "on" if s.spread else "off"},
            "blkio_config": diskbuild.throttles(s, p.system)}
    # the job runs on each web node (the same folder there): it writes the roots of that
    # node's servers (FILESET_NODE_ROOTS: fileset_node_env), on one host every server's
    roots = json.dumps([f"/srv/disks/{s.name}" for s in built.servers])
    services["fileset"] = {
        "volumes": [{"type": "bind", "source": str(built.servers[0].on().root()),
                     "target": "/srv/disks"}],
        "environment": {"FILESET_ROOTS": "${FILESET_NODE_ROOTS:-" + roots + "}"}}
    diskbuild.write_overlay(services)
    return built


def fileset_node_env(built: diskbuild.Built | None) -> dict[str, dict[str, str]]:
    """For each node holding web servers' disks, FILESET_NODE_ROOTS: the roots its file-set
    job writes (only its own servers': the others' folders are on their nodes)."""
    out: dict[str, list[str]] = {}
    for s in built.servers if built is not None else []:
        node = s.on().node
        if node and not s.name.startswith(orangefs.IO_SERVICE):
            out.setdefault(node, []).append(f"/srv/disks/{s.name}")
    return {node: {"FILESET_NODE_ROOTS": json.dumps(roots)} for node, roots in out.items()}


# --------------------------------------------------------------------------- per-file times


def logging_tier(target: str, proxies: list[model.Container],
                 webs: list[model.Container]) -> list[model.Container]:
    """Whose access logs time each request: the proxies' when the load goes through them (a
    proxy's %D runs until the web tier's whole response has come through, disk reads included;
    the web tier's own %D can end before a large file is read, the event MPM sending the rest
    after logging), else the web servers'."""
    host = target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    if host in ("proxy", "198.18.1.10") and proxies:
        return proxies
    return webs


def reset_logs(where: placer.Placer, containers: list[model.Container]) -> None:
    """Empty the access logs (each point reads its own requests)."""
    for c in containers:
        where.exec(c, ["sh", "-c", f": > {ACCESS_LOG}"], timeout=60)


def parse_line(line: str) -> tuple[float, str, int, int, float] | None:
    """(epoch second, path, status, bytes, service ms) of one access-log line in the web
    tier's format `%h %t "%r" %>s %B %D`; None for another line."""
    try:
        left, _, rest = line.partition(" [")
        stamp, _, rest = rest.partition("] \"")
        request, _, tail = rest.partition("\" ")
        status, nbytes, micros = tail.split()[:3]
        when = datetime.strptime(stamp, "%d/%b/%Y:%H:%M:%S %z").timestamp()
        path = request.split()[1]
        return when, path, int(status), int(nbytes), int(micros) / 1000
    except (ValueError, IndexError):
        return None


def per_file(lines: list[str], sizes: Mapping[str, int], start: float, end: float,
             out: Path) -> dict[str, float]:
    """From the access log lines: each file's requests and mean response time in the window
    (seconds start..end, whole seconds as logged) into `out` (CSV), and the summary's
    `file_ms_<group>`: the mean over the files of a size group of their mean times."""
    times: dict[str, list[float]] = {}
    lo, hi = math.floor(start), end
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        when, path, status, _, ms = parsed
        if lo <= when <= hi and 200 <= status < 400 and path in sizes:
            times.setdefault(path, []).append(ms)
    rows = sorted(((p, sizes[p], len(v), sum(v) / len(v)) for p, v in times.items()),
                  key=lambda r: (r[1], r[0]))
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["path", "size_bytes", "requests", "mean_ms"])
        writer.writerows([(p, s, n, f"{m:.4f}") for p, s, n, m in rows])
    summary: dict[str, float] = {"files_requested": len(rows)}
    for name, lo_b, hi_b in BUCKETS:
        means = [m for _, s, _, m in rows if lo_b <= s < hi_b]
        summary[f"file_ms_{name}"] = sum(means) / len(means) if means else float("nan")
    return summary


def read_logs(where: placer.Placer, containers: list[model.Container]) -> list[str]:
    """The access log lines of these containers."""
    lines: list[str] = []
    for c in containers:
        done = where.exec(c, ["cat", ACCESS_LOG], timeout=120)
        lines += done.stdout.splitlines()
    return lines


def sizes_of(sets: list[dict]) -> dict[str, int]:
    """URL path -> size of every file of the sets."""
    return {p: s for fs in sets for p, s in filesets.files(fs)}
