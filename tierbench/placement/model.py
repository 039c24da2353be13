"""The placement's model, at the bottom of tierbench/placement: what a kind declares to the
placement (the cluster file's :class:`Role` it brings, merged with the others' in :class:`Roles`,
which the cluster file is validated against; the services that admit only their peers:
:class:`Admission`), what it hands a placer to bring up (:class:`Services`: compose files,
environment, and what the kind declares its files read: CPU lists, admitted peers, platforms),
what a placer hands back (:class:`Container`), the
error of a bring-up or of discovery (:class:`StackError`), and the names every bring-up shares
(this checkout's Compose project, the images' tag, the servers' parent cgroup, the
host-networking overlay beside each compose file: :func:`host_overlay`, :func:`host_files`).
The interface (placer.py) and the placers (compose.py on this host through local.py,
cluster.py on nodes) import it; it imports none of them, and the kinds import of the placement
only it and the interface (tests/test_architecture.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tierbench.config.errors import TierbenchError
from tierbench.config.files import ROOT, default_project, project_name

try:
    PROJECT = project_name()  # this checkout's Compose project (tierbench.config.files)
    PROJECT_PROBLEM: str | None = None
except TierbenchError as _exc:  # a bad TIERBENCH_PROJECT: the command line says so, in one line
    PROJECT, PROJECT_PROBLEM = default_project(), str(_exc)
TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
# The cgroup every server tier's container is started under (Compose `cgroup_parent`), so that a
# platform's CPUs and CPU time can be set once for the tiers it holds (modes with
# `cpu: {per: platform}`, tierbench/modes/cpus.py); the load generator stays outside it. A kind
# may start some tiers under a platform of their own (Services.platforms).
SERVERS_CGROUP = "SERVERS_CGROUP"


class StackError(TierbenchError):
    """The stack cannot be brought up or inspected; the message says what to do."""


@dataclass(frozen=True)
class Role:
    """A role of the cluster file, as the kind whose services run there declares it: its name
    (the key under ``roles:``), what runs there (it ends the sentence "this needs WHAT on a
    node"), whether it takes one node, a list of nodes or either (``one``, ``list``,
    ``one_or_more``), and whether its services serve the others (a client's NIC that also
    carries a server's traffic does not count what the client alone receives)."""

    name: str
    what: str
    nodes: Literal["one", "list", "one_or_more"] = "one"
    server: bool = False


@dataclass(frozen=True)
class Roles:
    """Every role a cluster file may place: the kinds' declarations, in their order."""

    roles: tuple[Role, ...] = ()

    def __post_init__(self) -> None:
        names = [r.name for r in self.roles]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"the role {twice[0]} is declared twice (one declaration a role)")

    @classmethod
    def merged(cls, declared: Iterable[Role]) -> Roles:
        """The roles of several declarations, each once (a role several kinds declare must be
        declared alike; ValueError names one that is not)."""
        found: dict[str, Role] = {}
        for role in declared:
            if found.setdefault(role.name, role) != role:
                raise ValueError(f"the role {role.name} is declared twice, differently")
        return cls(tuple(found.values()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roles)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def role(self, name: str) -> Role:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(f"no role {name!r} (roles: {', '.join(self.names)})")

    @property
    def servers(self) -> tuple[str, ...]:
        """The roles whose services serve the others."""
        return tuple(r.name for r in self.roles if r.server)

@dataclass(frozen=True)
class Admission:
    """A service that admits only its peers: the variable its image reads the admitted
    addresses from, the services that connect to it (one host) and the cluster file's roles
    whose nodes run them."""

    service: str
    variable: str
    clients: tuple[str, ...]
    roles: tuple[str, ...]  # none: the service runs on one host only
    what: str


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
    environment (``replica_env``; where every replica has its own address it is not needed).
    The kind that brings them up also declares what its files read from it: the CPU lists its
    services are pinned to (``cpusets``: variable -> default, checked against this host's
    CPUs), the services that admit only their peers (``admissions``), and the parent cgroups
    some of its tiers start under instead of the servers' (``platforms``: compose variable ->
    the platform's name, e.g. WEBAPP_CGROUP -> webapp, for a mode that sets those tiers' CPUs
    as one platform). On a cluster, ``node_env`` adds a node's own values to the environment of
    the services started there (by node name: the disk roots a node's file-set job writes)."""

    files: list[str]
    env: dict[str, str]
    services: list[str] | None = None
    scale: dict[str, int] = field(default_factory=dict)
    profiles: list[str] = field(default_factory=list)
    tmpfs: dict[str, str] = field(default_factory=dict)
    replica_env: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    remove_orphans: bool = False
    timeout: float = 600
    cpusets: dict[str, str] = field(default_factory=dict)
    admissions: tuple[Admission, ...] = ()
    platforms: dict[str, str] = field(default_factory=dict)
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)

    def cgroup_env(self, driver: str, node: str | None = None) -> dict[str, str]:
        """The parent cgroups the compose files read: the servers' and each platform's."""
        return {SERVERS_CGROUP: servers_cgroup(driver, node),
                **{var: servers_cgroup(driver, node, name)
                   for var, name in self.platforms.items()}}

    def args(self) -> list[str]:
        """-f FILE ... --profile P ... for docker compose."""
        return [*(a for f in self.files for a in ("-f", f)),
                *(a for p in self.profiles for a in ("--profile", p))]


def servers_cgroup(driver: str, node: str | None = None, platform: str = "servers") -> str:
    """The servers' common parent cgroup (or another ``platform``'s: some tiers' own) for an
    engine with this cgroup driver (`docker info`'s CgroupDriver): a slice for systemd, a folder
    below the hierarchy's root for cgroupfs; one per tag, and on a cluster one per node (the
    lab's nodes share the machine's cgroup tree)."""
    name = "-".join([PROJECT, TAG.replace(".", "_"), *([node] if node else []), platform])
    if driver == "systemd":
        # a dash in a slice's name nests it (a-b.slice is in a.slice): the name keeps none
        return name.replace("-", "_") + ".slice"
    if driver == "cgroupfs":
        return "/" + name
    raise StackError(f"the Docker engine uses cgroup driver {driver!r}, and tierbench knows "
                     "cgroupfs and systemd only: configure the engine with one of them")


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


# -- the host-networking overlays (a placement on nodes brings them up with their files)
def host_overlay(rel: str) -> str | None:
    """The host-networking overlay of a compose file of the checkout (its path there), by name:
    ``compose/host.yml`` for the base file, ``compose/host-NAME.yml`` for ``compose/NAME.yml``;
    None when there is none (an overlay that defines no services of its own)."""
    path = Path(rel)
    if rel == "docker-compose.yml":
        overlay = Path("compose/host.yml")
    elif path.parent == Path("compose") and not path.name.startswith("host"):
        overlay = path.with_name(f"host-{path.name}")
    else:
        return None
    return str(overlay) if (ROOT / overlay).is_file() else None


def host_files(files: list[str]) -> list[str]:
    """The compose files with the host-networking overlay of each file that has one, last
    (files outside the checkout, such as the disk systems' overlay written at run time, have
    none)."""
    extra = []
    for f in files:
        path = Path(f).resolve() if Path(f).is_absolute() else None
        if path is not None and not path.is_relative_to(ROOT):
            continue
        overlay = host_overlay(str(path.relative_to(ROOT)) if path is not None else f)
        if overlay is not None:
            extra.append(str(ROOT / overlay))
    return [*files, *extra]
