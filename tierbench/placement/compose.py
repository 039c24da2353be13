"""The Compose stack and its overlays: preflight checks, what to bring up for an experiment's
settings (a :class:`Services` spec, which a placement brings up: on this host with
:func:`up_spec`, or on cluster nodes), discovery of the running containers, commands in them
(on this host's engine or, for a container on a node, through its Docker context), teardown."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tierbench.config.errors import TierbenchError
from tierbench.config.files import ROOT, results_root
from tierbench.placement import access, diskbuild, disks
from tierbench.placement.clusterfile import Cluster

PROJECT = "tierbench"
TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
OVERLAYS = {"haproxy": "compose/haproxy.yml", "tmpfs": "compose/docroot-tmpfs.yml",
            "loadgen-back": "compose/loadgen-back.yml", "workers": "compose/loadgen-workers.yml",
            "master": "compose/loadgen-master.yml", "pvfs": "compose/pvfs.yml",
            "pvfs-disk": "compose/pvfs-disk.yml", "docroot-pvfs": "compose/docroot-pvfs.yml",
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
NET_OVERLAY = "compose/net.yml"  # the network micro-benchmark tier (profile net)
DISK_OVERLAY = "compose/disk.yml"  # the disk-system benchmark (profile disk)
FS_OVERLAY = "compose/fs.yml"  # the file-server tier (profile fs)
WEB_SERVICES = ("web", "web2", "web3")  # web_servers: 3 (compose/web-servers.yml)
WORKER_SERVICE = "loadgen-worker"
CPUSETS = (("LOADGEN_CPUS", "0"), ("PROXY_CPUS", "1"), ("WEB_CPUS", "1"), ("WORKER_CPUS", "0"),
           ("PVFS_SERVER_CPUS", "1"), ("PVFS_CLIENT_CPUS", "0"), ("APP_CPUS", "1"), ("DB_CPUS", "1"))
# The cgroup every server tier's container is started under (Compose `cgroup_parent`), so that a
# platform's CPUs and CPU time can be set once for the tiers it holds (modes with
# `cpu: {per: platform}`, tierbench/modes/cpus.py); the load generator stays outside it.
SERVERS_CGROUP = "SERVERS_CGROUP"
APP_TIERS = ("app", "db")  # compose/app-db.yml: the application and database tiers
# Stack settings of the app-db overlay -> the environment variables compose/app-db.yml reads.
APP_DB_ENV = {"db_rows": "DB_ROWS", "db_row_bytes": "DB_ROW_BYTES", "db_seed": "DB_SEED",
              "db_shared_buffers": "DB_SHARED_BUFFERS", "app_workers": "APP_WORKERS"}


class StackError(TierbenchError):
    """The stack cannot be brought up or inspected; the message says what to do."""


@dataclass(frozen=True)
class Container:
    """One running service container of the stack; on a cluster node, ``node`` names the node
    and ``context`` the Docker context that reaches its engine (``pid`` is then the node's)."""

    service: str
    id: str
    name: str
    pid: int
    image: str
    image_id: str
    cpuset: str
    node: str | None = None
    context: str | None = None


@dataclass
class Services:
    """What to bring up: the compose files (paths, the base file first), the environment, the
    services to start (None: the default set) with their dependencies, replicas of scaled
    services, profiles, tmpfs to mount first where services bind them ({path: size}), and for
    services whose replicas must differ on one host network (their ports) each replica's extra
    environment (``replica_env``; where every replica has its own address it is not needed)."""

    files: list[str]
    env: dict[str, str]
    services: list[str] | None = None
    scale: dict[str, int] = field(default_factory=dict)
    profiles: list[str] = field(default_factory=list)
    tmpfs: dict[str, str] = field(default_factory=dict)
    replica_env: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    remove_orphans: bool = False
    timeout: float = 600

    def args(self) -> list[str]:
        """-f FILE ... --profile P ... for docker compose."""
        return [*(a for f in self.files for a in ("-f", f)),
                *(a for p in self.profiles for a in ("--profile", p))]


def docker_cmd(container: Container) -> list[str]:
    """``docker``, with ``--context`` when the container runs on a cluster node."""
    return ["docker", "--context", container.context] if container.context else ["docker"]


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
    at run time (disk systems: tierbench/placement/diskbuild.py)."""
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


def _run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    try:
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise StackError(f"{argv[0]} is not installed: run `make setup`") from None
    except subprocess.TimeoutExpired:
        raise StackError(f"`{' '.join(argv[:4])} ...` did not finish within {timeout:.0f} s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        tail = " | ".join(detail[-3:]) if detail else f"exit code {done.returncode}"
        raise StackError(f"`{' '.join(argv[:4])} ...` failed: {tail}")
    return done.stdout


def preflight(cluster: bool = False) -> None:
    """Refuse to start, with one sentence, when the host lacks what a run needs (on a cluster,
    the controller: Docker and Compose to build and ship the images, ssh to reach the nodes)."""
    needs = (("ssh", "openssh-client"), ("tar", "tar"), ("docker", "docker.io")) if cluster else (
        ("ethtool", "ethtool"), ("nsenter", "util-linux"), ("ip", "iproute2"),
        ("tc", "iproute2"), ("docker", "docker.io"))
    if os.geteuid() != 0 and not cluster:
        raise StackError("tierbench run needs root (it changes interface settings with ethtool "
                         "and nsenter): run it as root")
    for tool, package in needs:
        if shutil.which(tool) is None:
            raise StackError(f"{tool} is missing: install the {package} package (or run `make setup`)")
    try:
        _run(["docker", "compose", "version"], timeout=30)
        _run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
    except StackError:
        raise StackError("no Docker engine with Compose v2 answers: run `make setup`") from None


def dotenv(path: Path = ROOT / ".env") -> dict[str, str]:
    """KEY=VALUE lines of the checkout's .env (as docker compose reads it), if there is one."""
    values: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key and not key.startswith("#"):
                values[key.strip()] = value.strip().strip("'\"")
    return values


def has_app_db(settings: dict) -> bool:
    """Whether stack settings include the application and database tiers."""
    return settings.get("db_rows") is not None


def docroot_parts(docroot: str) -> tuple[str, bool]:
    """(file system, hot small files on tmpfs too) of a docroot setting: 'disk+hot-tmpfs'."""
    base, _, rest = docroot.partition("+")
    return base, rest == "hot-tmpfs"


def tmpfs_docroot(env: dict[str, str]) -> Path:
    """Where the tmpfs docroot is mounted on the host (compose/docroot-tmpfs.yml binds it)."""
    return Path(env.get("DOCROOT_TMPFS_DIR") or "/run/tierbench/docroot-tmpfs")


def hot_dir(env: dict[str, str]) -> Path:
    """Where the tmpfs of the hot small files is mounted on the host (compose/hot-tmpfs.yml)."""
    return Path(env.get("HOT_TMPFS_DIR") or "/run/tierbench/hot-tmpfs")


def mount_tmpfs(path: Path, size: str) -> None:
    """Mount a tmpfs on the host at ``path``, unless one is mounted there already."""
    if os.path.ismount(path):
        return
    path.mkdir(parents=True, exist_ok=True)
    _run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tierbench", str(path)],
         timeout=30)


def unmount_tmpfs() -> None:
    """Unmount the tmpfs docroot and the hot files' tmpfs (their files go with them)."""
    env = {**dotenv(), **os.environ}
    for path in (tmpfs_docroot(env), hot_dir(env)):
        if os.path.ismount(path):
            _run(["umount", str(path)], timeout=60)


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


ORANGEFS_BUILD = ("`make orangefs-image` (with ORANGEFS_TARBALL=/path/to/orangefs-2.10.0.tar.gz "
                  "and ORANGEFS_SHA256=<its sha256> where the upstream archive cannot be "
                  "downloaded)")
IMAGES_SH = ROOT / "setup" / "images.sh"
_ensured: set[str] = set()  # images built or found up to date by this process


def ensure_images(names: Iterable[str]) -> None:
    """Build the images NAMES (tierbench-NAME:TAG, and what they build on) that are missing or
    older than their build context, with setup/images.sh (seconds when they are up to date; its
    progress goes to stderr): images are built when an experiment first needs them. Once per
    image and process. The OrangeFS images are built only from a source at hand."""
    todo = [n for n in dict.fromkeys(names) if n not in _ensured]
    if not todo:
        return
    short = [n.removeprefix("tierbench-") for n in todo]
    try:
        done = subprocess.run([str(IMAGES_SH), *short], cwd=ROOT, stdout=subprocess.DEVNULL,
                              timeout=3600, check=False)
    except subprocess.TimeoutExpired:
        raise StackError(f"building {', '.join(todo)} took more than an hour: run `make images` "
                         "to see why") from None
    if done.returncode != 0:
        how = ORANGEFS_BUILD if "orangefs" in short else "`make images`"
        raise StackError(f"the image(s) {', '.join(f'{n}:{TAG}' for n in todo)} could not be "
                         f"built (the lines above say why): fix that and run {how}")
    _ensured.update(todo)


def require_image(name: str) -> None:
    """Image NAME:TAG built and up to date (ensure_images), or one sentence saying why not."""
    ensure_images([name])


def stack_images(proxy: str, docroot: str = "disk", app_db: bool = False) -> list[str]:
    """The images a web stack with these settings runs."""
    return ["tierbench-loadgen", "tierbench-web",
            "tierbench-haproxy" if proxy == "haproxy" else "tierbench-proxy",
            *(("tierbench-app", "tierbench-db") if app_db else ()),
            *(("tierbench-orangefs",) if docroot == "orangefs" else ())]


def check_images(proxy: str, docroot: str = "disk", app_db: bool = False) -> None:
    """The images of the stack built and up to date, or one sentence saying why not."""
    ensure_images(stack_images(proxy, docroot, app_db))


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
    done = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, timeout=30,
                          check=False)
    try:
        mine = {a.get("local") for link in json.loads(done.stdout or "[]")
                for a in link.get("addr_info", [])}
    except ValueError:
        mine = set()
    if value not in mine:
        return f"MASTER_BIND={value} is not an address of this host: set it to one of this host's"
    return None


def compose(args: list[str], env: dict[str, str], timeout: float = 600) -> str:
    """`docker compose ARGS` in the checkout; StackError naming the failure."""
    return _run(["docker", "compose", *args], env=env, timeout=timeout)


def servers_cgroup(driver: str, node: str | None = None) -> str:
    """The servers' common parent cgroup for an engine with this cgroup driver (`docker info`'s
    CgroupDriver): a slice for systemd, a folder below the hierarchy's root for cgroupfs; one per
    tag, and on a cluster one per node (the lab's nodes share the machine's cgroup tree)."""
    name = "-".join(["tierbench", TAG.replace(".", "_"), *([node] if node else []), "servers"])
    if driver == "systemd":
        # a dash in a slice's name nests it (a-b.slice is in a.slice): the name keeps none
        return name.replace("-", "_") + ".slice"
    if driver == "cgroupfs":
        return "/" + name
    raise StackError(f"the Docker engine uses cgroup driver {driver!r}, and tierbench knows "
                     "cgroupfs and systemd only: configure the engine with one of them")


def cgroup_driver(docker: list[str] | None = None) -> str:
    """The cgroup driver of an engine (``docker``: the argv that reaches it; this host's)."""
    return _run([*(docker or ["docker"]), "info", "--format", "{{.CgroupDriver}}"],
                timeout=30).strip()


def check_cpusets(env: dict[str, str]) -> None:
    """Refuse a CPU layout that names cores this host does not have."""
    ncpu = os.cpu_count() or 1
    for var, default in CPUSETS:
        value = env.get(var) or default
        try:
            cpus = parse_cpuset(value)
        except ValueError:
            raise StackError(f"{var}={value!r} is not a CPU list like 0 or 0-1 or 0,2") from None
        if max(cpus) >= ncpu:
            raise StackError(f"{var}={value} names CPU {max(cpus)} but this host has {ncpu} "
                             f"(0-{ncpu - 1}): set {var} in .env")


def parse_cpuset(text: str) -> list[int]:
    """CPU numbers of a cpuset list such as '0-2,4'."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        elif part:
            cpus.append(int(part))
    if not cpus:
        raise ValueError(text)
    return cpus


def stack_spec(settings: dict, filesets: list[dict], target: str = "http://proxy",
               workers: int = 0, remote_workers: int = 0,
               hot_sets: list[dict] | None = None,
               overlays: list[Path] | None = None) -> Services:
    """The stack with these settings (experiment `stack:` plus the mode's server options):
    `workers` Locust worker containers beside the loadgen (load.workers); with a `+hot-tmpfs`
    docroot, the files of `hot_sets` below `hot_below` bytes also go on a tmpfs; `overlays`
    are Compose files written at run time (a disk system's binds and throttles)."""
    env = stack_env(settings, filesets)
    check_images(settings["proxy"], docroot_parts(settings.get("docroot", "disk"))[0],
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
    spec = Services(stack_files(settings, target, workers, remote_workers, overlays), env,
                    scale={WORKER_SERVICE: workers} if workers else {}, tmpfs=tmpfs,
                    remove_orphans=True)
    if base == "orangefs":
        # The OrangeFS services have a profile: name the stack's services, the metadata server
        # and the first N I/O servers (no clients).
        n = int(settings.get("pvfs_io_servers", 3))
        env["PVFS_IO_SERVERS"] = str(n)
        spec.profiles = ["pfs"]
        services = [s for s in _run(["docker", "compose", *spec.args(), "config", "--services"],
                                    env=env, timeout=60).split()
                    if not s.startswith(("pvfs-io", "pvfs-client"))]
        spec.services = services + [f"pvfs-io{i}" for i in range(1, n + 1)]
    return spec


def up(settings: dict, filesets: list[dict], target: str = "http://proxy", workers: int = 0,
       remote_workers: int = 0, hot_sets: list[dict] | None = None) -> None:
    """Bring the stack up on this host (see stack_spec) and wait until every service is
    healthy; services whose settings changed restart."""
    up_spec(stack_spec(settings, filesets, target, workers, remote_workers, hot_sets))


def up_spec(spec: Services) -> None:
    """Bring ``spec`` up on this host's engine, waiting until every service is healthy: tmpfs
    mounted first, volumes made for other settings by an earlier run removed first."""
    check_cpusets(spec.env)
    for path, size in spec.tmpfs.items():
        mount_tmpfs(Path(path), size)
    results_root().mkdir(parents=True, exist_ok=True)
    stale = stale_volumes(spec.args(), spec.env)
    if stale:
        # Compose keeps an existing volume even when the files now define it differently (a
        # docroot on disk left by an earlier run, wanted on a tmpfs now): start from nothing.
        log(f"tierbench: volume(s) {', '.join(stale)} were made for other settings by an earlier "
            "run: removing the stack first")
        down()
        for path, size in spec.tmpfs.items():
            mount_tmpfs(Path(path), size)
    # every profile's services: those of the spec's profiles and any it names; the server
    # tiers under their common parent cgroup
    env = {SERVERS_CGROUP: servers_cgroup(cgroup_driver()), **spec.env, **access_env(config_of([*spec.args(), "--profile", "*"], spec.env))}
    scale = [a for svc, n in spec.scale.items() for a in ("--scale", f"{svc}={n}")]
    _run(["docker", "compose", *spec.args(), "up", "-d", "--wait", "--no-build",
          *(["--remove-orphans"] if spec.remove_orphans else []), *scale,
          *(spec.services or [])], env=env, timeout=spec.timeout)


def config_of(args: list[str], env: dict[str, str]) -> dict:
    """The resolved configuration of these compose arguments (`docker compose config`)."""
    return json.loads(_run(["docker", "compose", *args, "config", "--format", "json"], env=env,
                           timeout=60))


def access_env(config: dict, cluster: Cluster | None = None) -> dict[str, str]:
    """What the services that admit only their peers read at `compose up`: the addresses each
    admits (on ``cluster``'s nodes by their roles, else on this host's Compose networks), and
    the database password when a service of ``config`` takes it (made when the stack comes up
    from nothing)."""
    try:
        out = access.env(access.cluster_admitted(cluster) if cluster is not None
                         else access.host_admitted(config))
        if any(access.PASSWORD_VARIABLE in (spec.get("environment") or {})
               for spec in (config.get("services") or {}).values()):
            out[access.PASSWORD_VARIABLE] = access.database_password()
    except access.AccessError as exc:
        raise StackError(str(exc)) from None
    return out


def stale_volumes(files: list[str], env: dict[str, str]) -> list[str]:
    """Volumes of the project that exist with another driver or options than these Compose
    files now define (Compose would silently keep using them)."""
    wanted = config_of(files, env).get("volumes") or {}
    stale = []
    for key, spec in wanted.items():
        name = (spec or {}).get("name") or f"{PROJECT}_{key}"
        try:
            [info] = json.loads(_run(["docker", "volume", "inspect", name], timeout=30))
        except StackError:
            continue  # not there yet: Compose creates it as defined
        want_driver = (spec or {}).get("driver") or "local"
        want_opts = (spec or {}).get("driver_opts") or {}
        if info.get("Driver") != want_driver or (info.get("Options") or {}) != want_opts:
            stale.append(name)
    return stale


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def down() -> None:
    """Remove the stack's containers, networks and volumes (whatever proxy it ran with), then
    the tmpfs mounts and the disk systems they used."""
    # The base file plus every overlay: whichever variant is up, all its services are known.
    # `--profile pfs` / `net` / `fs` / `disk`: the OrangeFS, network-benchmark, file-server
    # and disk-benchmark services only start when named, but must always go (with their
    # networks).
    files = ["docker-compose.yml", *OVERLAYS.values(), WEB_SERVERS_OVERLAY, NET_OVERLAY,
             FS_OVERLAY, DISK_OVERLAY]
    _run(["docker", "compose", *(a for f in files for a in ("-f", str(ROOT / f))),
          "--profile", "pfs", "--profile", "net", "--profile", "fs", "--profile", "disk",
          "down", "-v", "--remove-orphans", "--timeout", "10"], timeout=300)
    access.forget_database_password()
    unmount_tmpfs()
    try:
        diskbuild.teardown({**dotenv(), **os.environ})
    except disks.DiskError as exc:
        raise StackError(str(exc)) from None


def volume_path(volume: str) -> Path:
    """Where a volume of the project (its name in the Compose files) lives on the host."""
    name = f"{PROJECT}_{volume}"
    return Path(_run(["docker", "volume", "inspect", "-f", "{{.Mountpoint}}", name]).strip())


def evict_docroot() -> int:
    """Drop the files of the docroot volume from the host's page cache: the next read of each
    comes from the disk. Only the project's own volume is touched. Returns how many files."""
    where = volume_path("docroot")
    return evict_files(Path(folder) / entry for folder, _, names in os.walk(where)
                       for entry in names)


def evict_files(paths: Iterable[Path]) -> int:
    """Drop files from the host's page cache (written back first, then posix_fadvise
    DONTNEED on each); files that cannot be opened are skipped. Returns how many."""
    os.sync()
    count = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


def containers() -> dict[str, Container]:
    """The running containers of the stack, by service (the first replica of a scaled one)."""
    found: dict[str, Container] = {}
    for c in replicas():
        found.setdefault(c.service, c)
    return found


def worker_containers() -> list[Container]:
    """The running Locust worker containers (service loadgen-worker), in replica order."""
    return [c for c in replicas() if c.service == WORKER_SERVICE]


def replicas() -> list[Container]:
    """Every running container of the stack, sorted by service and replica number."""
    # Images built by Compose carry the project and service labels, and so does any container
    # started from them with `docker run`; only containers Compose created have a config hash.
    ids = _run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}",
                "--filter", "label=com.docker.compose.config-hash"], timeout=30).split()
    if not ids:
        return []
    found: list[tuple[str, int, Container]] = []
    for info in json.loads(_run(["docker", "inspect", *ids], timeout=30)):
        labels = info["Config"]["Labels"]
        service = labels.get("com.docker.compose.service", "")
        number = int(labels.get("com.docker.compose.container-number", "1") or 1)
        found.append((service, number, Container(
            service=service,
            id=info["Id"],
            name=info["Name"].lstrip("/"),
            pid=int(info["State"]["Pid"]),
            image=info["Config"]["Image"],
            image_id=info["Image"],
            cpuset=info["HostConfig"].get("CpusetCpus") or "",
        )))
    return [c for _, _, c in sorted(found, key=lambda f: (f[0], f[1]))]


def service_containers(services: tuple[str, ...]) -> dict[str, Container]:
    """The running containers of these services; fails naming any that is not running."""
    found = containers()
    missing = [t for t in services if t not in found]
    if missing:
        raise StackError(f"service {missing[0]} of the stack is not running: "
                         f"see `docker compose logs {missing[0]}`")
    return {t: found[t] for t in services}


def exec_in(container: Container, argv: list[str], *, env: dict[str, str] | None = None,
            user: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a command in a container; returns the completed process (never raises on exit code)."""
    cmd = [*docker_cmd(container), "exec"]
    for key, value in (env or {}).items():
        cmd += ["-e", f"{key}={value}"]
    if user:
        cmd += ["-u", user]
    cmd += [container.id, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def versions() -> dict[str, str]:
    """Docker engine, client and Compose versions."""
    out = {}
    for key, argv in (("docker_server", ["docker", "version", "--format", "{{.Server.Version}}"]),
                      ("docker_client", ["docker", "version", "--format", "{{.Client.Version}}"]),
                      ("compose", ["docker", "compose", "version", "--short"])):
        try:
            out[key] = _run(argv, timeout=30).strip()
        except StackError as exc:
            out[key] = f"unknown ({exc})"
    return out
