"""The web stack's Compose side for a point's stack settings: its compose files (the base file
and the overlays: HAProxy, tmpfs docroot, docroot on OrangeFS, hot files, memory caps, the
application and database tiers, Locust workers and master, three web servers, and proxy2..
written at bring-up for stack.proxies), the environment
they read, the images they run and the :class:`~tierbench.placement.model.Services` spec the
placer brings up (on this host or on cluster nodes)."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import yaml

from tierbench.config.errors import ConfigError
from tierbench.config.files import ROOT, dotenv, results_root, state_dir
from tierbench.config.paths import refusal
from tierbench.tiers import orangefs
from tierbench.kinds.web import roles
from tierbench.modes.model import Mode
from tierbench.placement import model
from tierbench.placement.model import host_files
from tierbench.placement.placer import Placer
from tierbench.transport import LOCAL

OVERLAYS = {"haproxy": "compose/haproxy.yml", "tmpfs": "compose/docroot-tmpfs.yml",
            "loadgen-back": "compose/loadgen-back.yml", "workers": "compose/loadgen-workers.yml",
            "master": "compose/loadgen-master.yml", "pvfs": orangefs.OVERLAY,
            "pvfs-disk": orangefs.DISK_OVERLAY, "docroot-pvfs": "compose/docroot-pvfs.yml",
            "hot-tmpfs": "compose/hot-tmpfs.yml", "web-memory": "compose/web-memory.yml",
            "pvfs-memory": "compose/pvfs-memory.yml",
            "app-db": "compose/app-db.yml"}
# Three web servers (stack.web_servers, stack.placement); on a cluster with
# compose/host-web-servers.yml (over disk systems only with one web node: kinds/web/kind.py).
WEB_SERVERS_OVERLAY = "compose/web-servers.yml"
# what the overlays below change on web, given to web2 and web3 too (they extend the base file's
# web): by overlay name -> its web-servers companion
WEB_SERVERS_COMPANIONS = {"docroot-pvfs": "compose/web-servers-pvfs.yml",
                          "hot-tmpfs": "compose/web-servers-hot.yml",
                          "app-db": "compose/web-servers-app.yml"}
WEB_SERVICES = ("web", "web2", "web3")  # web_servers: 3 (compose/web-servers.yml)
# stack.proxies: N: proxy, then proxy2.. (proxies_overlay), each at its own addresses: the
# front network's 198.18.1.10 + i and the back network's 198.18.2.20 + i; on a cluster, at its
# node's data-plane address and its own port (80 + i), from this file's entries
PROXY_SERVICES = ("proxy", "proxy2", "proxy3", "proxy4")
HOST_PROXIES_OVERLAY = "compose/host-proxies.yml"
WORKER_SERVICE = "loadgen-worker"
APP_TIERS = ("app", "db")  # compose/app-db.yml: the application and database tiers
# the application servers, one per web server with web_servers: 3 (compose/web-servers-app.yml)
APP_SERVICES = ("app", "app2", "app3")
# Stack settings of the app-db overlay -> the environment variables compose/app-db.yml reads.
# Tiers a mode may give a platform of their own (cpu: {per: platform} with these tiers; every
# server tier is the other platform, roles: [servers]): the web and application tiers start
# under the parent cgroup their compose variable names (docker-compose.yml, compose/app-db.yml),
# the servers' otherwise.
OWN_PLATFORMS = {"WEBAPP_CGROUP": ("webapp", frozenset({"web", "app"}))}
APP_DB_ENV = {"db_rows": "DB_ROWS", "db_row_bytes": "DB_ROW_BYTES", "db_seed": "DB_SEED",
              "db_shared_buffers": "DB_SHARED_BUFFERS", "app_workers": "APP_WORKERS"}


def compose_files(settings: dict | None = None, target: str = "http://proxy", workers: int = 0,
                  remote_workers: int = 0, extra: list[Path] | None = None) -> list[str]:
    """-f arguments of stack_files()."""
    return [arg for f in stack_files(settings, target, workers, remote_workers, extra)
            for arg in ("-f", f)]


def stack_files(settings: dict | None = None, target: str = "http://proxy", workers: int = 0,
                remote_workers: int = 0, extra: list[Path] | None = None) -> list[str]:
    """The -f arguments for a stack with these settings: the base file and the overlays for
    the HAProxy proxy, a tmpfs docroot, a load generator on the back network (target web),
    Locust worker containers, a Locust master reachable from other nodes, three web servers,
    the application and database tiers (settings with db_rows), and `extra` overlays written
    at run time (disk systems: tierbench/tiers/diskbuild.py)."""
    settings = settings or {}
    files = ["docker-compose.yml"]
    if int(settings.get("web_servers") or 1) > 1:
        files.append(WEB_SERVERS_OVERLAY)
    if settings.get("proxy") == "haproxy":
        files.append(OVERLAYS["haproxy"])
    base, hot = docroot_parts(settings.get("docroot", "disk"))
    if base == "tmpfs":
        files.append(OVERLAYS["tmpfs"])
    if base == "orangefs":
        files += [OVERLAYS["pvfs"], OVERLAYS["docroot-pvfs"]]
        if settings.get("pvfs_storage") not in (None, "tmpfs"):
            # volumes (disk), or under a disk system's mounts bound over them (`extra`)
            files.append(OVERLAYS["pvfs-disk"])
        if settings.get("pvfs_memory"):
            files.append(OVERLAYS["pvfs-memory"])
    if hot:
        files.append(OVERLAYS["hot-tmpfs"])
    if settings.get("web_memory"):
        files.append(OVERLAYS["web-memory"])
    if has_app_db(settings):
        files.append(OVERLAYS["app-db"])
    host = target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    if host == "web" or host.startswith("198.18.2."):
        files.append(OVERLAYS["loadgen-back"])
    if workers:
        files.append(OVERLAYS["workers"])
    if remote_workers:
        files.append(OVERLAYS["master"])
    if int(settings.get("web_servers") or 1) > 1:  # each overlay of web, then web2 and web3's
        files = [f for name in files
                 for f in (name, WEB_SERVERS_COMPANIONS.get(_overlay_name(name) or "")) if f]
    files += [str(p) for p in extra or []]
    return [str(ROOT / f) for f in files]


def _overlay_name(path: str) -> str | None:
    """The OVERLAYS name of a compose file path, or None."""
    return next((k for k, v in OVERLAYS.items() if v == path), None)


def has_app_db(settings: dict) -> bool:
    """Whether stack settings include the application and database tiers."""
    return settings.get("db_rows") is not None


def docroot_parts(docroot: str) -> tuple[str, bool]:
    """(file system, hot small files on tmpfs too) of a docroot setting: 'disk+hot-tmpfs'."""
    base, _, rest = docroot.partition("+")
    return base, rest == "hot-tmpfs"


def tmpfs_docroot(env: dict[str, str]) -> Path:
    """Where the tmpfs docroot is mounted on the host (compose/docroot-tmpfs.yml binds it)."""
    return checked(env, "DOCROOT_TMPFS_DIR") or state_dir() / "docroot-tmpfs"


def hot_dir(env: dict[str, str]) -> Path:
    """Where the tmpfs of the hot small files is mounted on the host (compose/hot-tmpfs.yml)."""
    return checked(env, "HOT_TMPFS_DIR") or state_dir() / "hot-tmpfs"


def checked(env: dict[str, str], key: str) -> Path | None:
    """The folder .env or the environment gives as ``key``, refused in one sentence when it is
    a system folder (tierbench.config.paths); None when not given."""
    given = env.get(key)
    if not given:
        return None
    why = refusal(given, key)
    if why:
        raise ConfigError(why)
    return Path(given)


def stack_env(settings: dict, filesets: list[dict]) -> dict[str, str]:
    """Environment for docker compose: .env, then the shell's, then the run's stack settings."""
    env = {**dotenv(), **os.environ}
    env.update({
        "FILESETS": json.dumps(filesets, separators=(",", ":")),
        "PROXY_CACHE": "on" if settings["proxy_cache"] else "off",
        "WEB_SENDFILE": "On" if settings["web_sendfile"] else "Off",
        "WEB_MMAP": "On" if settings["web_mmap"] else "Off",
        "TIERBENCH_RESULTS": str(results_root()),
    })
    if settings.get("web_memory"):
        env["WEB_MEMORY"] = str(settings["web_memory"])
    if settings.get("pvfs_memory"):
        env["PVFS_SERVER_MEMORY"] = str(settings["pvfs_memory"])
    if settings.get("access_log"):
        env["ACCESS_LOG"] = "on"
    env.update({var: str(settings[key]) for key, var in APP_DB_ENV.items() if key in settings})
    return env


def stack_images(proxy: str, docroot: str = "disk", app_db: bool = False) -> list[str]:
    """The images a web stack with these settings runs."""
    return ["tierbench-loadgen", "tierbench-web",
            "tierbench-haproxy" if proxy == "haproxy" else "tierbench-proxy",
            *(("tierbench-app", "tierbench-db") if app_db else ()),
            *((orangefs.IMAGE,) if docroot == "orangefs" else ())]


def check_images(where: Placer, proxy: str, docroot: str = "disk",
                 app_db: bool = False) -> None:
    """The images of the stack built and up to date, or one sentence saying why not."""
    ensure_images(where, stack_images(proxy, docroot, app_db))


def ensure_images(where: Placer, names: list[str]) -> None:
    """Those images built and up to date, or one sentence saying how to build them (the
    OrangeFS image only from a source at hand)."""
    where.ensure_images(names, orangefs.BUILD if orangefs.IMAGE in names else "`make images`")


def master_bind_problem(env: dict[str, str]) -> str | None:
    """Why MASTER_BIND cannot publish the Locust master to workers on other nodes (it must name
    the one address of this host they reach: compose/loadgen-master.yml), or None."""
    value = (env.get("MASTER_BIND") or "").strip()
    if not value:
        return ("workers on other nodes reach the Locust master at MASTER_BIND, which is not "
                "set: set it (in .env) to this host's address on the network they share")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return f"MASTER_BIND={value!r} is not an IP address: set it to this host's address"
    if address.is_unspecified:
        return (f"MASTER_BIND={value} would publish the Locust master, which admits any worker, "
                "on every address of this host: set it to the one address the workers reach")
    done = LOCAL.run(["ip", "-j", "addr"], timeout=30)
    try:
        mine = {a.get("local") for link in json.loads(done.stdout or "[]")
                for a in link.get("addr_info", [])}
    except ValueError:
        mine = set()
    if value not in mine:
        return f"MASTER_BIND={value} is not an address of this host: set it to one of this host's"
    return None


def proxies_overlay_path() -> Path:
    """The Compose overlay of proxy2.. (stack.proxies), written at bring-up (proxies_overlay)."""
    return state_dir() / "proxies" / "compose.yml"


def proxies_overlay(config: dict, proxies: int) -> dict:
    """The overlay that adds proxy2..proxyN to a stack whose resolved configuration (`docker
    compose config --no-interpolate`, so that its variables are read again at `up`) is
    `config`: each a copy of that stack's proxy (Apache with the stack's caching, or HAProxy;
    balancing over every web server as proxy does) at its own address on each network; each
    container has its own tmpfs, so each caching proxy has its own cache. The load generator
    waits for every proxy. Written from the resolved proxy rather than kept as a file, so that
    every overlay that changes proxy (HAProxy, three web servers) changes its copies too (on a
    cluster, host_proxies then gives each copy what the host-networking overlays give proxy)."""
    services = config.get("services") or {}
    proxy = services["proxy"]
    out: dict = {"services": {}}
    for k, name in enumerate(PROXY_SERVICES[1:proxies], 1):
        copy = json.loads(json.dumps(proxy))
        for spec in (copy.get("networks") or {}).values():
            if isinstance(spec, dict) and spec.get("ipv4_address"):
                address = ipaddress.ip_address(spec["ipv4_address"]) + k
                spec["ipv4_address"] = str(address)
        copy.pop("container_name", None)
        out["services"][name] = copy
    if "loadgen" in services:
        out["services"]["loadgen"] = {"depends_on": {
            name: {"condition": "service_healthy"} for name in PROXY_SERVICES[1:proxies]}}
    return out


class Tagged:
    """A value of a compose file under a Compose tag (``!reset``, ``!override``), kept as it is
    when the file is written again (its meaning is Compose's). A tagged scalar is written back
    quoted: ``!reset`` does not read its value, and ``!override`` matters only for lists and
    mappings (a scalar is replaced anyway)."""

    def __init__(self, tag: str, value: object) -> None:
        self.tag, self.value = tag, value


class TagKeepingLoader(yaml.SafeLoader):
    """YAML of compose files with Compose's tags kept (Tagged)."""


class TagKeepingDumper(yaml.SafeDumper):
    """YAML written with Compose's tags back in place; no aliases (Compose reads them, a
    person reading the file would not expect them)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
    if isinstance(node, yaml.MappingNode):
        return Tagged("!" + suffix, loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return Tagged("!" + suffix, loader.construct_sequence(node, deep=True))
    return Tagged("!" + suffix, loader.construct_scalar(node))  # type: ignore[arg-type]


def _represent_tagged(dumper: yaml.SafeDumper, data: Tagged) -> yaml.Node:
    if isinstance(data.value, dict):
        return dumper.represent_mapping(data.tag, data.value)
    if isinstance(data.value, list):
        return dumper.represent_sequence(data.tag, data.value)
    return dumper.represent_scalar(data.tag, str(data.value))


TagKeepingLoader.add_multi_constructor("!", _tagged)
TagKeepingDumper.add_representer(Tagged, _represent_tagged)


def host_proxies(where: Placer, config: dict, files: list[str], proxies: int,
                 env: dict[str, str]) -> dict:
    """proxy2..proxyN on a cluster, as Compose resolves them: the stack's resolved
    configuration ``config`` with the copies of proxies_overlay, under the proxy's entries of
    the host-networking overlays of these compose files, in order, given to each copy
    (compose/host.yml, compose/host-web-servers.yml: host networking, the balancer's members),
    then each copy's own entry of compose/host-proxies.yml (its labels and listening address);
    merged by `docker compose config --no-interpolate` (every merge rule, ``!reset`` and
    ``!override`` are Compose's own; the variables are read again at `up`). The overlays'
    proxy entries are taken out of their files first: Compose cannot read the whole files
    without interpolating, since their bind mounts with a default
    (`${TIERBENCH_NODE_DIR:-...}:/app/...`) do not parse uninterpolated."""
    names = PROXY_SERVICES[1:proxies]
    copies = proxies_overlay(config, proxies)["services"]
    base = json.loads(json.dumps(config))
    base["services"].update({name: copies[name] for name in names})
    layers: list[dict] = [base]
    for overlay in host_files(files)[len(files):]:
        data = yaml.load(Path(overlay).read_text(), Loader=TagKeepingLoader) or {}
        entry = (data.get("services") or {}).get("proxy")
        if entry:
            layers.append({"services": dict.fromkeys(names, entry)})
    own = yaml.load((ROOT / HOST_PROXIES_OVERLAY).read_text(), Loader=TagKeepingLoader)
    layers.append({"services": {name: own["services"][name] for name in names}})
    folder = proxies_overlay_path().parent / "host"
    folder.mkdir(parents=True, exist_ok=True)
    args = []
    for i, layer in enumerate(layers):
        path = folder / f"layer{i}.yml"
        path.write_text(yaml.dump(layer, Dumper=TagKeepingDumper, sort_keys=False))
        args += ["-f", str(path)]
    resolved = json.loads(where.compose_config([*args, "config", "--no-interpolate",
                                                "--format", "json"], env, timeout=60))
    return {name: resolved["services"][name] for name in names}


def write_proxies_overlay(where: Placer, files: list[str], env: dict[str, str], proxies: int,
                          host_network: bool = False) -> Path:
    """proxies_overlay() of the stack of these compose files (with ``host_network``, as on a
    cluster: each copy as the host-networking overlays give it, host_proxies), written where
    Compose reads it."""
    config = json.loads(where.compose_config([*(a for f in files for a in ("-f", f)), "config",
                                              "--no-interpolate", "--format", "json"], env,
                                             timeout=60))
    overlay = proxies_overlay(config, proxies)
    if host_network:
        overlay["services"].update(host_proxies(where, config, files, proxies, env))
    path = proxies_overlay_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(overlay, indent=1) + "\n")
    return path


def own_platforms(modes: list[Mode]) -> dict[str, str]:
    """The platforms of their own that the modes with a per-platform cpu: on some tiers need
    (compose variable -> platform name); a mode naming tiers no such platform holds is refused."""
    out: dict[str, str] = {}
    for mode in modes:
        if not mode.tiers or not (mode.cpu or {}).get("per") == "platform":
            continue
        found = [(var, name) for var, (name, tiers) in OWN_PLATFORMS.items()
                 if set(mode.tiers) <= tiers]
        if not found:
            held = "; ".join(" and ".join(sorted(t)) for _, t in OWN_PLATFORMS.values())
            raise ConfigError(f"mode {mode.name}: cpu.per: platform for the tiers "
                              f"{', '.join(mode.tiers)}: the web stack starts only these under a "
                              f"platform of their own: {held} (or every server tier: roles: "
                              "[servers]); change the mode's tiers, or use per: container")
        out.update(dict(found[:1]))
    return out


def stack_spec(where: Placer, settings: dict, filesets: list[dict],
               target: str = "http://proxy", workers: int = 0, remote_workers: int = 0,
               hot_sets: list[dict] | None = None,
               overlays: list[Path] | None = None, host_network: bool = False,
               platforms: dict[str, str] | None = None) -> model.Services:
    """The stack with these settings (experiment `stack:` plus the mode's server options), for
    the run's placer ``where`` (which builds its images and reads its compose files):
    `workers` Locust worker containers beside the loadgen (load.workers); with a `+hot-tmpfs`
    docroot, the files of `hot_sets` below `hot_below` bytes also go on a tmpfs; `overlays`
    are Compose files written at run time (a disk system's binds and throttles); `host_network`:
    the placement runs services with host networking, on cluster nodes (proxy2.. written so:
    Placer.shares_ports); `platforms`:
    tiers started under a parent cgroup of their own (:func:`own_platforms`)."""
    env = stack_env(settings, filesets)
    check_images(where, settings["proxy"], docroot_parts(settings.get("docroot", "disk"))[0],
                 has_app_db(settings))
    base, hot = docroot_parts(settings.get("docroot", "disk"))
    tmpfs: dict[str, str] = {}
    if base == "tmpfs":
        env["DOCROOT_TMPFS_DIR"] = str(tmpfs_docroot(env))
        tmpfs[env["DOCROOT_TMPFS_DIR"]] = env.get("DOCROOT_TMPFS_SIZE") or "8g"
    if hot:
        env["HOT_TMPFS_DIR"] = str(hot_dir(env))
        tmpfs[env["HOT_TMPFS_DIR"]] = env.get("HOT_TMPFS_SIZE") or "2g"
        env["HOT"] = json.dumps({"sets": hot_sets or [], "below": settings["hot_below"]},
                                separators=(",", ":"))
    files = stack_files(settings, target, workers, remote_workers, overlays)
    proxies = int(settings.get("proxies") or 1)
    if proxies > 1:
        files.append(str(write_proxies_overlay(where, files, env, proxies, host_network)))
    spec = model.Services(files, env,
                    scale={WORKER_SERVICE: workers} if workers else {}, tmpfs=tmpfs,
                    remove_orphans=True, cpusets=dict(roles.CPUSETS),
                    admissions=roles.ADMISSIONS, platforms=dict(platforms or {}))
    if base == "orangefs":
        # The OrangeFS services have a profile: name the stack's services, the metadata server
        # and the first N I/O servers (no clients).
        n = int(settings.get("pvfs_io_servers", 3))
        env["PVFS_IO_SERVERS"] = str(n)
        spec.profiles = ["pfs"]
        spec.cpusets.update(orangefs.CPUSETS)
        services = [s for s in where.compose_config([*spec.args(), "config", "--services"],
                                                    env, timeout=60).split()
                    if not s.startswith(("pvfs-io", "pvfs-client"))]
        spec.services = services + [f"pvfs-io{i}" for i in range(1, n + 1)]
    return spec
