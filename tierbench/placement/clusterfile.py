"""The cluster file: its schema (nodes, their SSH address, Docker context and data-plane
interfaces; the roles and the nodes they run on), validated with one sentence per problem, each
naming the file and key, all problems at once.

The roles are not the placement's: every kind declares those its services run on (a
:class:`Role` each: its name, what runs there, one node or a list, server or client), and the
caller (the command line, the tests) hands them all down as one :class:`Roles` value to
:func:`load_cluster` and :func:`parse_cluster`, which build the ``roles:`` block's schema from
them; this module names none.

A cluster file (``cluster.example.yml`` is the commented example)::

    version: 1
    ssh_config: ssh_config          # optional: ssh -F FILE, relative to the cluster file
    clock_bound_ms: 50              # optional: largest clock offset accepted (default 50 ms)
    rollback_timeout_s: 30          # optional: a node puts a mode's settings back by itself
                                    # this long after the controller's last renewal (default 30)
    allow_management_changes: false  # optional: modes may change the interface carrying SSH
                                    # (then rollback_timeout_s must be set)
    nodes:
      - name: node1                 # lower case, digits, '-'
        address: 198.18.16.11       # SSH address (IP or DNS name)
        user: root                  # default root
        port: 22                    # default 22
        context: tierbench-node1    # Docker context; default tierbench-<name>
        interfaces:                 # data-plane interfaces, first one is the default
          - {name: eth0, address: 198.18.16.11/24}
    roles:                          # node names; the list roles take lists
      loadgen: node1
      loadgen_workers: [node1]
      proxy: node2
      ...
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, cast

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model,
                      field_validator)

from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.files import read_text
from tierbench.config.models import control_problem
from tierbench.config.paths import system_problem
from tierbench.placement.model import Roles

CLUSTER_ENV = "TIERBENCH_CLUSTER"
DEFAULT_CLOCK_BOUND_MS = 50.0
DEFAULT_WORKDIR = "/var/lib/tierbench"
DEFAULT_ROLLBACK_S = 30.0
_NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_CONTEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


# Folders a cluster file's workdir may not be, nor be inside: the system's own, and those every
# user may write to. /var itself and its folders (/var/lib, /var/log) are refused too, but a
# folder of tierbench's own below them (/var/lib/tierbench, the default) is not.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var/tmp")


def system_folder(path: str) -> str | None:
    """Why ``path`` (absolute, normalised) cannot be a cluster's workdir, or None."""
    if path == "/":
        return "is the root folder"
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(tree + "/"):
            return f"is {'' if path == tree else 'inside '}the system folder {tree}"
    parts = path.strip("/").split("/")
    if parts[0] == "var" and len(parts) <= 2:
        return "is a system folder (/var and the folders directly in it)"
    return None


class ClusterError(TierbenchError):
    """A cluster file that cannot be used, or nodes that are not ready: one sentence per problem,
    each naming the file and key (or the node)."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# ---------------------------------------------------------------------------------------------
# The cluster file's schema


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_control(cls, value: Any) -> Any:
        why = control_problem(value) if isinstance(value, str) else None
        if why:
            raise ValueError(f"{value!r} {why}")
        return value


def _matching(pattern: re.Pattern[str], what: str) -> Any:
    """A validator of a name field: the value when ``pattern`` matches it, else "... is not
    WHAT" (None passes: the field is optional)."""
    def check(cls: type, value: str | None) -> str | None:
        if value is not None and not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value
    return classmethod(check)


def _ip(value: str) -> str | None:
    """An IP address (with a /prefix: an interface's address) in its canonical form, or None."""
    try:
        return str(ipaddress.ip_interface(value) if "/" in value else ipaddress.ip_address(value))
    except ValueError:
        return None


class Interface(_Model):
    """A data-plane interface of a node and its address on it."""

    name: str = Field(description="interface name on the node, e.g. eth0 or ens1f0")
    address: str = Field(description="its IP address, with or without /prefix")

    _name = field_validator("name")(_matching(
        _IFNAME, "an interface name (1-15 characters, no spaces or '/')"))

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        ip = _ip(value)
        if ip is None:
            raise ValueError(f"{value!r} is not an IP address such as 198.18.16.11/24")
        return ip

    @property
    def ip(self) -> str:
        """The address without its prefix length."""
        return str(ipaddress.ip_interface(self.address).ip)


class Node(_Model):
    """One machine: how to reach it over SSH and Docker, and its data-plane interfaces."""

    name: str = Field(description="short name: lower case letters, digits and '-'")
    address: str = Field(description="SSH address (IP or DNS name)")
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)
    context: str | None = Field(default=None, description="Docker context, default tierbench-NAME")
    ssh_config: str | None = Field(default=None, description="ssh -F FILE for this node")
    interfaces: list[Interface] = Field(min_length=1)

    _name = field_validator("name")(_matching(
        _NODE_NAME, "a node name (lower case letters, digits and '-', at most 32, starting and "
        "ending with a letter or digit)"))
    _user = field_validator("user")(_matching(_USER, "a user name"))
    _context = field_validator("context")(_matching(_CONTEXT, "a Docker context name"))

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        ip = _ip(value) if "/" not in value else None
        if ip is None and not _HOSTNAME.fullmatch(value):
            raise ValueError(f"{value!r} is neither an IP address nor a host name")
        return ip or value

    @property
    def docker_context(self) -> str:
        """The Docker context that reaches this node's engine."""
        return self.context or f"tierbench-{self.name}"

    @property
    def ssh_target(self) -> str:
        return f"{self.user}@{self.address}"

    def interface(self, name: str | None = None) -> Interface:
        """The named data-plane interface, or the first (the default)."""
        if name is None:
            return self.interfaces[0]
        for itf in self.interfaces:
            if itf.name == name:
                return itf
        raise KeyError(f"{self.name} has no data-plane interface {name!r}")


class Cluster(_Model):
    """A cluster file, validated."""

    version: Literal[1] = 1
    ssh_config: str | None = None
    clock_bound_ms: float = Field(default=DEFAULT_CLOCK_BOUND_MS, gt=0)
    workdir: str = Field(default=DEFAULT_WORKDIR,
                         description="folder on every node for the checkout's workloads/ and "
                                     "the load generator's files (absolute)")
    rollback_timeout_s: float = Field(
        default=DEFAULT_ROLLBACK_S, ge=5, le=3600,
        description="seconds after the controller's last renewal at which each node puts a "
                    "mode's settings back by itself (the rollback guard)")
    allow_management_changes: bool = Field(
        default=False, description="modes may change the interface that carries SSH to a node "
                                   "(management and data planes are the same on purpose)")
    nodes: list[Node] = Field(min_length=1)
    # the roles: block, a model made from the declared roles (_cluster_model)
    roles: _Model = _Model()
    path: str | None = Field(default=None, exclude=True)
    _declared: Roles = PrivateAttr(default_factory=Roles)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str) -> str:
        if not re.fullmatch(r"/[A-Za-z0-9_./-]*", value) or "/../" in f"{value}/" \
                or "/./" in f"{value}/":
            raise ValueError(f"{value!r} is not an absolute folder such as /var/lib/tierbench "
                             "(letters, digits, '_', '.', '-' and '/')")
        value = re.sub(r"/+", "/", value).rstrip("/") or "/"
        why = system_folder(value) or system_problem(value)
        if why:
            raise ValueError(f"{value} {why}: tierbench empties folders in it on every node "
                             "(`tierbench clean --cluster` removes WORKDIR/PROJECT/results); give it "
                             "a folder of its own such as /var/lib/tierbench")
        return value

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node named {name!r}")

    @property
    def declared(self) -> Roles:
        """The roles this file was validated against (the kinds' declarations)."""
        return self._declared

    def placement(self) -> dict[str, list[str]]:
        """Each role that is placed, with its node names."""
        out: dict[str, list[str]] = {}
        for role in self.declared.names:
            value = getattr(self.roles, role)
            names = [value] if isinstance(value, str) else list(value or [])
            if names:
                out[role] = names
        return out

    def nodes_for(self, role: str) -> list[Node]:
        """The nodes a role runs on (empty when it is not placed)."""
        self.declared.role(role)  # KeyError naming the roles there are
        return [self.node(n) for n in self.placement().get(role, [])]

    def require_roles(self, *roles: str) -> None:
        """Raise ClusterError naming every role of ``roles`` that is not placed."""
        placed = self.placement()
        where = self.path or "cluster file"
        problems = [f"{where}: roles.{r}: not placed, and this needs "
                    f"{self.declared.role(r).what} on a node" for r in roles if r not in placed]
        if problems:
            raise ClusterError(problems)


@lru_cache(maxsize=None)
def _cluster_model(declared: Roles) -> type[Cluster]:
    """Cluster with a roles: block of the declared roles: a node name for a role of one node,
    a list of names for a list role, either for a role of one or more."""
    shapes: dict[str, Any] = {"one": (str | None, None), "list": (list[str], []),
                              "one_or_more": (str | list[str] | None, None)}
    block = create_model("Roles", __base__=_Model,
                         **{r.name: shapes[r.nodes] for r in declared.roles})
    return create_model("Cluster", __base__=Cluster, roles=(block, block()))


_ALLOWED = {
    "top": sorted(Cluster.model_fields.keys() - {"path"}),
    "node": sorted(Node.model_fields),
    "interface": sorted(Interface.model_fields),
}


def _key(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_of(loc: Sequence[Any]) -> str:
    """Which model the last key of ``loc`` belongs to (for the allowed keys)."""
    names = [p for p in loc[:-1] if isinstance(p, str)]
    if not names:
        return "top"
    if names[-1] == "interfaces":
        return "interface"
    return {"nodes": "node", "roles": "roles"}.get(names[-1], "top")


def _sentence(where: str, err: Mapping[str, Any], declared: Roles) -> str:
    loc = tuple(err.get("loc", ()))
    key = _key(loc) or "(top level)"
    kind = err.get("type", "")
    value = err.get("input")
    role = loc[0] == "roles" if loc else False
    if kind == "missing":
        text = "is required"
    elif kind == "extra_forbidden":
        model = _model_of(loc)
        allowed = sorted(declared.names) if model == "roles" else _ALLOWED[model]
        text = f"unknown key (allowed: {', '.join(allowed)})"
    elif kind == "string_type" and role:
        text = f"must be one node name, got {value!r}"
    elif kind == "list_type" and role:
        text = f"must be a list of node names such as [{value}], got {value!r}"
    elif kind == "string_type":
        text = f"must be text, got {value!r}"
    elif kind == "int_type":
        text = f"must be a whole number, got {value!r}"
    elif kind in ("float_type", "int_from_float"):
        text = f"must be a number, got {value!r}"
    elif kind == "list_type":
        text = f"must be a list, got {value!r}"
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        text = f"must be a mapping of keys, got {value!r}"
    elif kind == "too_short":
        text = "must not be empty"
    elif kind == "literal_error":
        text = f"must be 1 (the only version of the cluster file), got {value!r}"
    elif kind in ("greater_than", "greater_than_equal", "less_than_equal", "less_than"):
        text = f"{err.get('msg', '').replace('Input should', 'must')}, got {value!r}"
    else:
        text = str(err.get("msg", "is not valid")).removeprefix("Value error, ")
    return f"{where}: {key}: {text}"


def _cross_problems(where: str, data: Mapping[str, Any], base: Path | None,
                    declared: Roles) -> list[str]:
    """Checks across entries, on the raw data so that they run even when some entries are
    malformed (those are reported by the schema)."""
    problems: list[str] = []
    nodes = got if isinstance(got := data.get("nodes"), list) else []
    names: dict[str, int] = {}
    addresses: dict[tuple[str, Any], int] = {}
    contexts: dict[str, int] = {}
    ips: dict[str, str] = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            continue
        name = node.get("name")
        duplicate = isinstance(name, str) and name in names
        if isinstance(name, str):
            if duplicate:
                problems.append(f"{where}: nodes[{i}].name: {name} is already the name of "
                                f"nodes[{names[name]}]")
            else:
                names[name] = i
        address = node.get("address")
        if isinstance(address, str):
            slot = (address, node.get("port", 22))
            if slot in addresses:
                problems.append(f"{where}: nodes[{i}].address: {address} is already the address "
                                f"of nodes[{addresses[slot]}] (one entry per machine)")
            else:
                addresses[slot] = i
        context = node.get("context") or (f"tierbench-{name}" if isinstance(name, str) else None)
        if isinstance(context, str) and not duplicate:
            if context in contexts:
                problems.append(f"{where}: nodes[{i}].context: {context} is already the Docker "
                                f"context of nodes[{contexts[context]}]")
            else:
                contexts[context] = i
        seen_if: set[str] = set()
        for j, itf in enumerate(node.get("interfaces") or []
                                if isinstance(node.get("interfaces"), list) else []):
            if not isinstance(itf, dict):
                continue
            if isinstance(itf.get("name"), str):
                if itf["name"] in seen_if:
                    problems.append(f"{where}: nodes[{i}].interfaces[{j}].name: {itf['name']} is "
                                    "listed twice on this node")
                seen_if.add(itf["name"])
            try:
                ip = str(ipaddress.ip_interface(cast(str, itf.get("address"))).ip)
            except ValueError:
                continue
            key = f"nodes[{i}].interfaces[{j}]"
            if ip in ips:
                problems.append(f"{where}: {key}.address: {ip} is already the address of "
                                f"{ips[ip]}")
            else:
                ips[ip] = key
        if isinstance(node.get("ssh_config"), str) and base is not None:
            path = Path(node["ssh_config"])
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                problems.append(f"{where}: nodes[{i}].ssh_config: no such file {path}")
    if isinstance(data.get("ssh_config"), str) and base is not None:
        path = Path(data["ssh_config"])
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            problems.append(f"{where}: ssh_config: no such file {path}")
    if data.get("allow_management_changes") is True and "rollback_timeout_s" not in data:
        problems.append(f"{where}: allow_management_changes: true lets modes change the "
                        "interface that carries SSH to the nodes, so rollback_timeout_s must be "
                        "set too (seconds after which a node that no longer hears from the "
                        "controller puts the settings back, e.g. 30)")
    roles = data.get("roles")
    # Role references are checked against a node list that is whole: a malformed or repeated
    # node entry is reported once, not again through every role that names it.
    whole = bool(nodes) and len(names) == len(nodes) and all(
        isinstance(n, dict) and isinstance(n.get("name"), str) and _NODE_NAME.fullmatch(n["name"])
        for n in nodes)
    if isinstance(roles, dict) and whole:
        known = ", ".join(names) or "none"
        for role, value in roles.items():
            if role not in declared:
                continue  # the schema reports unknown roles
            shape = declared.role(role).nodes
            if shape != "one_or_more" and (shape == "one") != isinstance(value, str):
                continue  # the wrong shape: the schema reports it
            values = value if isinstance(value, list) else [value]
            seen: set[str] = set()
            for name in values:
                if not isinstance(name, str):
                    continue
                if name not in names:
                    problems.append(f"{where}: roles.{role}: no node named {name!r} "
                                    f"(nodes: {known})")
                elif name in seen:
                    problems.append(f"{where}: roles.{role}: {name} is listed twice")
                seen.add(name)
    return problems


def parse_cluster(data: Any, roles: Roles, where: str = "cluster file",
                  base: Path | None = None) -> Cluster:
    """Validate the cluster file's contents against the declared ``roles``; ``where`` names it
    in messages and ``base`` is the folder relative paths (ssh_config) are resolved against.
    Raises ClusterError with one sentence per problem, all problems at once."""
    if not isinstance(data, dict):
        raise ClusterError([f"{where}: expected a mapping with nodes and roles at the top level, "
                            f"got {type(data).__name__}"])
    problems: list[str] = []
    cluster = None
    try:
        cluster = _cluster_model(roles).model_validate(data)
    except ValidationError as exc:
        problems += [_sentence(where, e, roles) for e in exc.errors()]
    problems += _cross_problems(where, data, base, roles)
    if problems:
        raise ClusterError(problems)
    assert cluster is not None

    def resolve(value: str | None) -> str | None:
        if value is None or base is None:
            return value
        path = Path(value)
        return str(path if path.is_absolute() else (base / path).resolve())

    cluster.ssh_config = resolve(cluster.ssh_config)
    for node in cluster.nodes:
        node.ssh_config = resolve(node.ssh_config) or cluster.ssh_config
    cluster.path = where
    cluster._declared = roles
    return cluster


def load_cluster(path: str | os.PathLike[str], roles: Roles) -> Cluster:
    """Read and validate a cluster file against the declared ``roles`` (see the module's
    doc)."""
    path = Path(path)
    where = str(path)
    try:
        text = read_text(path, "cluster file")
    except ConfigError as exc:
        raise ClusterError([str(exc)]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterError([f"{where}: not valid YAML ({exc})".replace("\n", " ")]) from None
    return parse_cluster(data, roles, where, path.parent)


def cluster_path(arg: str | None = None) -> Path | None:
    """The cluster file given on the command line, else in $TIERBENCH_CLUSTER, else None."""
    value = arg or os.environ.get(CLUSTER_ENV)
    return Path(value) if value else None
