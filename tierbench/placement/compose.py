"""The Compose stack and its overlays: preflight checks, what to bring up for an experiment's
settings (a :class:`Services` spec, which a placement brings up: on this host with
:func:`up_spec`, or on cluster nodes), discovery of the running containers, teardown (commands
in the containers go through the placer: tierbench.placement.placer); the spec, the containers and
the error are the placement's model (tierbench.placement.model)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from tierbench.config.files import PROJECT_PREFIX, ROOT, results_root
from tierbench.placement import access, owned
from tierbench.placement.clusterfile import Cluster
from tierbench.transport import DEVNULL, DidNotFinish, TransportError, run_argv
from tierbench.placement.model import PROJECT, TAG, Container, Services, StackError, parse_cpuset


def _run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    if argv[:2] == ["docker", "compose"] and "-p" not in argv:
        argv = ["docker", "compose", "-p", PROJECT, *argv[2:]]  # never the file's own name
    try:
        done = run_argv(argv, cwd=ROOT, env=env, timeout=timeout)
    except DidNotFinish:
        raise StackError(f"`{' '.join(argv[:4])} ...` did not finish within {timeout:.0f} s") from None
    except TransportError as exc:
        raise StackError(f"{argv[0]} is not installed: run `make setup`" if exc.missing
                         else str(exc)) from None
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


# The source name of every tmpfs tierbench mounts for services to bind: this checkout's project,
# so `down` unmounts its own by it and never another checkout's (`clean --all`: every source
# named tierbench or tierbench-*).
TMPFS_SOURCE = PROJECT
# Every tmpfs of that source unmounted (on a node: run there), whatever folder a run used.
UNMOUNT_TMPFS = (f"awk '$1 == \"{TMPFS_SOURCE}\" && $3 == \"tmpfs\" {{print $2}}' /proc/self/mounts "
                 "| while read -r p; do umount \"$p\"; done; true")
# clean --all: every checkout's
UNMOUNT_ALL_TMPFS = (f"awk '($1 == \"{PROJECT_PREFIX}\" || $1 ~ /^{PROJECT_PREFIX}-/) && "
                     "$3 == \"tmpfs\" {print $2}' /proc/self/mounts "
                     "| while read -r p; do umount \"$p\"; done; true")


def ours(project: str, every: bool = False) -> bool:
    """A Compose project (or tmpfs source) name this checkout removes: its own, or with
    ``every`` (clean --all) any checkout's."""
    if not every:
        return project == PROJECT
    return project == PROJECT_PREFIX or project.startswith(PROJECT_PREFIX + "-")


def mount_tmpfs(path: Path, size: str) -> None:
    """Mount a tmpfs on the host at ``path``, unless one is mounted there already."""
    if os.path.ismount(path):
        return
    try:
        owned.claim(str(path), "the tmpfs folder")  # never a system folder or someone else's
    except owned.OwnershipError as exc:
        raise StackError(str(exc)) from None
    _run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", TMPFS_SOURCE, str(path)],
         timeout=30)


def unmount_tmpfs(every: bool = False) -> None:
    """Unmount every tmpfs this checkout (``every``: any checkout) mounted on this host for
    services to bind (their files go with them)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, point, fstype = (line.split() + ["", "", ""])[:3]
        if ours(source, every) and fstype == "tmpfs":
            _run(["umount", point.replace("\\040", " ")], timeout=60)


IMAGES_SH = ROOT / "setup" / "images.sh"
_ensured: set[str] = set()  # images built or found up to date by this process


def ensure_images(names: Iterable[str], how: str = "`make images`") -> None:
    """Build the images NAMES (tierbench-NAME:TAG, and what they build on) that are missing or
    older than their build context, with setup/images.sh (seconds when they are up to date; its
    progress goes to stderr): images are built when an experiment first needs them. Once per
    image and process. ``how``: the command that builds them by hand, which the refusal names
    (an image built only from a source at hand says which)."""
    todo = [n for n in dict.fromkeys(names) if n not in _ensured]
    if not todo:
        return
    short = [n.removeprefix("tierbench-") for n in todo]
    try:
        done = run_argv([str(IMAGES_SH), *short], cwd=ROOT, stdout=DEVNULL, stderr=None,
                        timeout=3600)
    except DidNotFinish:
        raise StackError(f"building {', '.join(todo)} took more than an hour: run `make images` "
                         "to see why") from None
    if done.returncode != 0:
        raise StackError(f"the image(s) {', '.join(f'{n}:{TAG}' for n in todo)} could not be "
                         f"built (the lines above say why): fix that and run {how}")
    _ensured.update(todo)


def require_image(name: str, how: str = "`make images`") -> None:
    """Image NAME:TAG built and up to date (ensure_images), or one sentence saying why not."""
    ensure_images([name], how)


def compose(args: list[str], env: dict[str, str], timeout: float = 600) -> str:
    """`docker compose ARGS` in the checkout; StackError naming the failure."""
    return _run(["docker", "compose", *args], env=env, timeout=timeout)


class Controller:
    """What a placement does on this host, the controller, whichever hosts run its services
    (LocalPlacer and ClusterPlacer both): the images built (a cluster ships them at bring-up)
    and Compose's own reading of the files (tierbench.placement.placer: Placer.ensure_images,
    Placer.compose_config)."""

    def ensure_images(self, names: Iterable[str], how: str = "`make images`") -> None:
        """Built here with setup/images.sh (:func:`ensure_images`)."""
        ensure_images(names, how)

    def compose_config(self, args: list[str], env: dict[str, str], timeout: float = 60) -> str:
        """`docker compose ARGS` in the checkout (:func:`compose`)."""
        return compose(args, env, timeout)


def cgroup_driver(docker: list[str] | None = None) -> str:
    """The cgroup driver of an engine (``docker``: the argv that reaches it; this host's)."""
    return _run([*(docker or ["docker"]), "info", "--format", "{{.CgroupDriver}}"],
                timeout=30).strip()


def check_cpusets(env: dict[str, str], cpusets: dict[str, str]) -> None:
    """Refuse a CPU layout that names cores this host does not have (``cpusets``: the
    variables the compose files read, with their defaults)."""
    ncpu = os.cpu_count() or 1
    for var, default in cpusets.items():
        value = env.get(var) or default
        try:
            cpus = parse_cpuset(value)
        except ValueError:
            raise StackError(f"{var}={value!r} is not a CPU list like 0 or 0-1 or 0,2") from None
        if max(cpus) >= ncpu:
            raise StackError(f"{var}={value} names CPU {max(cpus)} but this host has {ncpu} "
                             f"(0-{ncpu - 1}): set {var} in .env")


def others_up(docker: Callable[..., str]) -> list[str]:
    """Other checkouts' projects with networks or running containers on one engine."""
    fmt = '{{.Label "com.docker.compose.project"}}'
    found = docker("network", "ls", "--format", fmt).split() + docker("ps", "--format",
                                                                       fmt).split()
    return sorted({p for p in found if ours(p, True) and p != PROJECT})


def refuse_others(docker: Callable[..., str], where: str = "this host") -> None:
    """StackError in one sentence when another checkout's stack is up: its networks take the
    same addresses (on a node, the same ports), and it is not this checkout's to remove."""
    others = others_up(docker)
    if others:
        raise StackError(f"another checkout's stack ({', '.join(others)}) is up on {where}, on "
                         "the addresses and ports this one needs: its own `tierbench clean` "
                         "removes it (or `tierbench clean --all`, if it is nobody's any more); "
                         f"this checkout is {PROJECT}")


def up_spec(spec: Services) -> None:
    """Bring ``spec`` up on this host's engine, waiting until every service is healthy: tmpfs
    mounted first, volumes made for other settings by an earlier run removed first; refused
    while another checkout's stack is up."""
    refuse_others(lambda *args: _run(["docker", *args], timeout=60))
    check_cpusets(spec.env, spec.cpusets)
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
        # by name too: a volume made by hand or by another tool has no Compose project label,
        # so removing the project's labelled volumes leaves it, and Compose would use it again
        _run(["docker", "volume", "rm", "-f", *stale], timeout=120)
        for path, size in spec.tmpfs.items():
            mount_tmpfs(Path(path), size)
    # every profile's services: those of the spec's profiles and any it names; the server
    # tiers under their common parent cgroup (some under a platform of their own)
    env = {**spec.cgroup_env(cgroup_driver()), **spec.env,
           **access_env(config_of([*spec.args(), "--profile", "*"], spec.env), spec.admissions)}
    scale = [a for svc, n in spec.scale.items() for a in ("--scale", f"{svc}={n}")]
    _run(["docker", "compose", *spec.args(), "up", "-d", "--wait", "--no-build",
          *(["--remove-orphans"] if spec.remove_orphans else []), *scale,
          *(spec.services or [])], env=env, timeout=spec.timeout)


def config_of(args: list[str], env: dict[str, str]) -> dict:
    """The resolved configuration of these compose arguments (`docker compose config`)."""
    return json.loads(_run(["docker", "compose", *args, "config", "--format", "json"], env=env,
                           timeout=60))


def access_env(config: dict, admissions: Iterable[access.Admission],
               cluster: Cluster | None = None,
               placed: Mapping[str, Iterable[str]] | None = None) -> dict[str, str]:
    """What the services that admit only their peers (``admissions``) read at `compose up`:
    the addresses each admits (on ``cluster``'s nodes by their roles, those that run a client
    when ``placed`` gives each service's nodes, else on this host's Compose networks), and the
    database password when a service of ``config`` takes it (made when the stack comes up from
    nothing)."""
    try:
        out = access.env(access.cluster_admitted(cluster, admissions, placed)
                         if cluster is not None else access.host_admitted(config, admissions))
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


def projects(docker: Callable[..., str], every: bool = False) -> list[str]:
    """The Compose projects of one engine this checkout removes: its own, or with ``every``
    every checkout's (any project named tierbench or tierbench-*, with containers, networks or
    volumes: a network left alone is what `refuse_others` refuses a bring-up on)."""
    if not every:
        return [PROJECT]
    fmt = '{{.Label "com.docker.compose.project"}}'
    found = docker("ps", "-a", "--format", fmt).split()
    found += docker("network", "ls", "--format", fmt).split()
    found += docker("volume", "ls", "--format", fmt).split()
    return sorted({p for p in found if ours(p, True)} | {PROJECT})


def remove_project(docker: Callable[..., str], every: bool = False) -> None:
    """Remove the project's containers (stopped with 10 s of grace first), networks and volumes
    from one engine (``docker(*args)`` runs ``docker ARGS`` there and returns its output),
    found by Compose's project label: whichever compose files, overlays and profiles brought
    them up, as `docker compose down -v --remove-orphans` of all of them would. Only this
    checkout's project, unless ``every`` (clean --all): then every checkout's."""
    for project in projects(docker, every):
        _remove_one(docker, project)


def _remove_one(docker: Callable[..., str], project: str) -> None:
    label = f"label=com.docker.compose.project={project}"
    ids = docker("ps", "-aq", "--filter", label).split()
    if ids:
        docker("stop", "-t", "10", *ids)
        docker("rm", "-f", "-v", *ids)
    _remove_networks(docker, project)
    volumes = docker("volume", "ls", "-q", "--filter", label).split()
    if volumes:
        docker("volume", "rm", "-f", *volumes)


NETWORK_TRIES = 5  # tries to remove a project's networks that still have endpoints


def _remove_networks(docker: Callable[..., str], project: str, pause_s: float = 1.0) -> None:
    """Remove the project's networks. One that still has endpoints after its containers were
    removed has the project's endpoints force-disconnected (`docker network disconnect -f`: a
    removed container's stale endpoint) and is tried again after ``pause_s``, NETWORK_TRIES
    times at most; an endpoint of anything else is never touched: the error names it. A network
    Docker says is in use while it lists nothing on it (a stale endpoint of the engine's own:
    the 004 study run of 7 Dec 2026 lost six experiments to one) is kept, with a sentence: the
    next bring-up reuses it, and restarting the Docker engine clears it."""
    label = f"label=com.docker.compose.project={project}"
    for attempt in range(1, NETWORK_TRIES + 1):
        networks = docker("network", "ls", "-q", "--filter", label).split()
        if not networks:
            return
        try:
            docker("network", "rm", *networks)
            return
        except StackError as exc:
            if "active endpoints" not in str(exc):
                raise
            # `network rm` removed those it could: inspect only what is left; one gone even
            # between the listing and its inspection is "not found", which is what clean wants
            attached: dict[str, list[str]] = {}
            for network in docker("network", "ls", "-q", "--filter", label).split():
                try:
                    attached[network] = docker("network", "inspect", "-f",
                                               "{{range .Containers}}{{.Name}} {{end}}",
                                               network).split()
                except StackError as gone:
                    if "not found" not in str(gone):
                        raise
            networks = list(attached)
            if not networks:
                return
            listed = sorted({c for names in attached.values() for c in names})
            foreign = [c for c in listed if not c.startswith(f"{project}-")]
            if foreign:
                raise StackError(f"{exc} (still attached: {', '.join(foreign)})") from None
            if attempt == NETWORK_TRIES and not listed:
                log(f"tierbench: kept the network(s) {' '.join(networks)}: Docker counts an "
                    "endpoint on them that it lists nowhere (a stale one); the next bring-up "
                    "reuses them, and restarting the Docker engine clears it")
                return
            if attempt == NETWORK_TRIES:
                raise StackError(f"{exc} (still attached: {', '.join(listed)})") from None
            for network, names in attached.items():
                for name in names:
                    docker("network", "disconnect", "-f", network, name)
            time.sleep(pause_s)


def down(every: bool = False) -> None:
    """Remove the stack's containers, networks and volumes (whatever kind brought them up),
    then the tmpfs mounts they used: this checkout's (``every``: every checkout's containers,
    networks, volumes and tmpfs). The disk systems they used go after it, in the placer's
    ``down`` (Placer.tiers_down: tierbench.tiers.diskbuild)."""
    remove_project(lambda *args: _run(["docker", *args], timeout=300), every)
    access.forget_database_password()
    unmount_tmpfs(every)


def containers() -> dict[str, Container]:
    """The running containers of the stack, by service (the first replica of a scaled one)."""
    found: dict[str, Container] = {}
    for c in replicas():
        found.setdefault(c.service, c)
    return found


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
