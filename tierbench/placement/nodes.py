"""The nodes of a cluster: the cluster file's schema, the checks run on every node before anything
changes anywhere, and the primitives the runner uses on a node (a command over SSH, ``docker
--context`` argv, shipping images, a node's provenance).

This module imports nothing else from tierbench: it belongs to the placement layer.

A cluster file (``cluster.example.yml`` is the commented example)::

    version: 1
    ssh_config: ssh_config          # optional: ssh -F FILE, relative to the cluster file
    clock_bound_ms: 50              # optional: largest clock offset accepted (default 50 ms)
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

Command line: ``python -m tierbench.placement.nodes check FILE`` runs the checks and prints what it saw;
``python -m tierbench.placement.nodes provenance FILE`` prints every node's provenance as JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import ipaddress
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.files import read_text

__all__ = [
    "CLUSTER_ENV", "LIST_ROLES", "ONE_OR_MORE_ROLES", "ROLES", "SINGLE_ROLES", "CheckReport",
    "ClockReading", "Cluster", "ClusterError", "Interface", "Node", "NodeError", "Roles", "check_nodes",
    "cluster_path", "docker_argv", "image_ids", "load_cluster", "measure_clock",
    "node_provenance", "parse_cluster", "run_docker", "run_on_node", "ship_images", "ssh_argv",
    "ssh_prefix",
]

CLUSTER_ENV = "TIERBENCH_CLUSTER"
DEFAULT_CLOCK_BOUND_MS = 50.0
DEFAULT_WORKDIR = "/var/lib/tierbench"
# Roles that run on one node, and roles that run on a list of nodes.
SINGLE_ROLES = ("loadgen", "proxy", "web", "app", "db", "pfs_meta", "net_server", "net_client",
                "fs_server", "fs_client", "disk")
LIST_ROLES = ("loadgen_workers", "pfs_io", "pfs_clients")
# Roles that take one node or a list of them: the web servers (stack.web_servers: 3) go round it.
ONE_OR_MORE_ROLES = ("web",)
ROLES = SINGLE_ROLES + LIST_ROLES
ROLE_HELP = {
    "loadgen": "the load generator: wrk, or the Locust master",
    "loadgen_workers": "Locust worker nodes",
    "proxy": "the proxy tier (Apache mod_proxy or HAProxy)",
    "web": "the web tier (Apache httpd)",
    "app": "the application tier",
    "db": "the database tier",
    "pfs_meta": "the OrangeFS metadata server",
    "pfs_io": "the OrangeFS I/O servers",
    "pfs_clients": "the OrangeFS clients",
    "net_server": "the server side of the network micro-benchmarks",
    "net_client": "the client side of the network micro-benchmarks",
    "fs_server": "the GlusterFS file server of the file-server benchmarks (and its CPU hog)",
    "fs_client": "the client machine of the file-server benchmarks (dbench, fio)",
    "disk": "the disk-system benchmark (fio) and its disk systems",
}

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


class NodeError(TierbenchError):
    """A command on a node failed or timed out; the message names the node and the command."""


# ---------------------------------------------------------------------------------------------
# The cluster file's schema


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Interface(_Model):
    """A data-plane interface of a node and its address on it."""

    name: str = Field(description="interface name on the node, e.g. eth0 or ens1f0")
    address: str = Field(description="its IP address, with or without /prefix")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _IFNAME.match(value):
            raise ValueError(f"{value!r} is not an interface name (1-15 characters, no spaces "
                             "or '/')")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            if "/" in value:
                return str(ipaddress.ip_interface(value))
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address such as 198.18.16.11/24") from None

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

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NODE_NAME.match(value):
            raise ValueError(f"{value!r} is not a node name (lower case letters, digits and '-', "
                             "at most 32, starting and ending with a letter or digit)")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
        if not _HOSTNAME.match(value):
            raise ValueError(f"{value!r} is neither an IP address nor a host name")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _USER.match(value):
            raise ValueError(f"{value!r} is not a user name")
        return value

    @field_validator("context")
    @classmethod
    def _context(cls, value: str | None) -> str | None:
        if value is not None and not _CONTEXT.match(value):
            raise ValueError(f"{value!r} is not a Docker context name")
        return value

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


class Roles(_Model):
    """Where each role runs: a node name, or a list of them for the list roles."""

    loadgen: str | None = None
    loadgen_workers: list[str] = []
    proxy: str | None = None
    web: str | list[str] | None = None
    app: str | None = None
    db: str | None = None
    pfs_meta: str | None = None
    pfs_io: list[str] = []
    pfs_clients: list[str] = []
    net_server: str | None = None
    net_client: str | None = None
    fs_server: str | None = None
    fs_client: str | None = None
    disk: str | None = None


class Cluster(_Model):
    """A cluster file, validated."""

    version: Literal[1] = 1
    ssh_config: str | None = None
    clock_bound_ms: float = Field(default=DEFAULT_CLOCK_BOUND_MS, gt=0)
    workdir: str = Field(default=DEFAULT_WORKDIR,
                         description="folder on every node for the checkout's workloads/ and "
                                     "the load generator's files (absolute)")
    nodes: list[Node] = Field(min_length=1)
    roles: Roles = Roles()
    path: str | None = Field(default=None, exclude=True)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str) -> str:
        if not re.match(r"^/[A-Za-z0-9_./-]*$", value) or "/../" in f"{value}/" \
                or "/./" in f"{value}/":
            raise ValueError(f"{value!r} is not an absolute folder such as /var/lib/tierbench "
                             "(letters, digits, '_', '.', '-' and '/')")
        value = re.sub(r"/+", "/", value).rstrip("/") or "/"
        why = system_folder(value)
        if why:
            raise ValueError(f"{value} {why}: tierbench empties folders in it on every node "
                             "(`tierbench clean --cluster` removes WORKDIR/results); give it "
                             "a folder of its own such as /var/lib/tierbench")
        return value

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node named {name!r}")

    def placement(self) -> dict[str, list[str]]:
        """Each role that is placed, with its node names."""
        out: dict[str, list[str]] = {}
        for role in ROLES:
            value = getattr(self.roles, role)
            names = [value] if isinstance(value, str) else list(value or [])
            if names:
                out[role] = names
        return out

    def nodes_for(self, role: str) -> list[Node]:
        """The nodes a role runs on (empty when it is not placed)."""
        if role not in ROLES:
            raise KeyError(f"no role {role!r} (roles: {', '.join(ROLES)})")
        return [self.node(n) for n in self.placement().get(role, [])]

    def require_roles(self, *roles: str) -> None:
        """Raise ClusterError naming every role of ``roles`` that is not placed."""
        placed = self.placement()
        where = self.path or "cluster file"
        problems = [f"{where}: roles.{r}: not placed, and this needs {ROLE_HELP[r]} on a node"
                    for r in roles if r not in placed]
        if problems:
            raise ClusterError(problems)


_ALLOWED = {
    "top": sorted(Cluster.model_fields.keys() - {"path"}),
    "node": sorted(Node.model_fields),
    "interface": sorted(Interface.model_fields),
    "roles": sorted(Roles.model_fields),
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


def _sentence(where: str, err: Mapping[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    key = _key(loc) or "(top level)"
    kind = err.get("type", "")
    value = err.get("input")
    role = loc[0] == "roles" if loc else False
    if kind == "missing":
        text = "is required"
    elif kind == "extra_forbidden":
        text = f"unknown key (allowed: {', '.join(_ALLOWED[_model_of(loc)])})"
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


def _cross_problems(where: str, data: Mapping[str, Any], base: Path | None) -> list[str]:
    """Checks across entries, on the raw data so that they run even when some entries are
    malformed (those are reported by the schema)."""
    problems: list[str] = []
    nodes = data.get("nodes") if isinstance(data.get("nodes"), list) else []
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
                ip = str(ipaddress.ip_interface(itf.get("address")).ip)
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
    roles = data.get("roles")
    # Role references are checked against a node list that is whole: a malformed or repeated
    # node entry is reported once, not again through every role that names it.
    whole = bool(nodes) and len(names) == len(nodes) and all(
        isinstance(n, dict) and isinstance(n.get("name"), str) and _NODE_NAME.match(n["name"])
        for n in nodes)
    if isinstance(roles, dict) and whole:
        known = ", ".join(names) or "none"
        for role, value in roles.items():
            if role not in ROLES:
                continue  # the schema reports unknown roles
            if role not in ONE_OR_MORE_ROLES and (role in SINGLE_ROLES) != isinstance(value,
                                                                                      str):
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


def parse_cluster(data: Any, where: str = "cluster file", base: Path | None = None) -> Cluster:
    """Validate the cluster file's contents; ``where`` names it in messages and ``base`` is the
    folder relative paths (ssh_config) are resolved against. Raises ClusterError with one
    sentence per problem, all problems at once."""
    if not isinstance(data, dict):
        raise ClusterError([f"{where}: expected a mapping with nodes and roles at the top level, "
                            f"got {type(data).__name__}"])
    problems: list[str] = []
    cluster = None
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as exc:
        problems += [_sentence(where, e) for e in exc.errors()]
    problems += _cross_problems(where, data, base)
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
    return cluster


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Read and validate a cluster file (see the module's doc)."""
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
    return parse_cluster(data, where, path.parent)


def cluster_path(arg: str | None = None) -> Path | None:
    """The cluster file given on the command line, else in $TIERBENCH_CLUSTER, else None."""
    value = arg or os.environ.get(CLUSTER_ENV)
    return Path(value) if value else None


# ---------------------------------------------------------------------------------------------
# Primitives: commands on a node


def _command_text(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


# ssh's control socket for a node is FOLDER/NAME (NAME: 12 hex digits, control_name) plus a
# 17-character suffix while it is made, and a socket's path holds at most 107 bytes.
CONTROL_NAME_LENGTH = 12
CONTROL_DIR_MAX = 107 - 1 - CONTROL_NAME_LENGTH - 17


def control_name(node: Node) -> str:
    """The name of the node's ssh control socket: a digest of how ssh reaches it (shorter than
    ssh's own %C, so that the run state's folder may be a longer path)."""
    how = f"{node.user}@{node.address}:{node.port} {node.ssh_config or ''}"
    return hashlib.sha256(how.encode()).hexdigest()[:CONTROL_NAME_LENGTH]


def control_dir() -> Path:
    """Where ssh keeps its shared connections to the nodes (one socket per node): a folder only
    this user may use (0700), in a place only this user can create it: $TIERBENCH_SSH_DIR when
    set, else root's /run/tierbench/ssh, another user's $XDG_RUNTIME_DIR/tierbench-ssh (the
    user's own runtime folder) or ~/.cache/tierbench/ssh. NodeError, in one sentence, for a
    folder that exists with another owner or wider permissions, or is too long a path for a
    socket."""
    if os.environ.get("TIERBENCH_SSH_DIR"):
        path = Path(os.environ["TIERBENCH_SSH_DIR"])
    elif os.geteuid() == 0:
        path = Path("/run/tierbench/ssh")
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "tierbench-ssh"
    else:
        path = Path.home() / ".cache" / "tierbench" / "ssh"
    if len(str(path)) > CONTROL_DIR_MAX:
        raise NodeError(f"the SSH control-socket folder {path} is too long a path for a socket "
                        f"(at most {CONTROL_DIR_MAX} characters): set TIERBENCH_SSH_DIR to a "
                        "shorter folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise NodeError(f"the SSH control-socket folder {path} cannot be made "
                        f"({exc.strerror or exc}): set TIERBENCH_SSH_DIR to a folder of "
                        "yours") from None
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a folder"
        raise NodeError(f"the SSH control-socket folder {path} must be a folder only user "
                        f"{os.geteuid()} may use (mode 0700), but it is {what}, has mode "
                        f"{stat.S_IMODE(info.st_mode):04o} and is owned by user {info.st_uid}: "
                        "remove it (tierbench makes it again) or set TIERBENCH_SSH_DIR "
                        "elsewhere")
    return path


def ssh_prefix(node: Node, *, connect_timeout: float = 10) -> list[str]:
    """ssh and its options up to the node's address: append one shell command to run it there.
    BatchMode (never a password prompt); one shared connection per node (ControlMaster, kept
    60 s after its last use), so that the many short commands of a run cost milliseconds."""
    argv = ["ssh"]
    if node.ssh_config:
        argv += ["-F", node.ssh_config]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
             "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
             "-o", "ControlMaster=auto",
             "-o", f"ControlPath={control_dir()}/{control_name(node)}",
             "-o", "ControlPersist=60",
             "-p", str(node.port), "-l", node.user, "-T", "--", node.address]
    return argv


def ssh_argv(node: Node, command: str | Sequence[str], *, connect_timeout: float = 10) -> list[str]:
    """The ssh argv that runs ``command`` on ``node`` (a shell snippet, or an argv that is
    quoted for the remote shell); see ssh_prefix."""
    return [*ssh_prefix(node, connect_timeout=connect_timeout), _command_text(command)]


def docker_argv(node: Node, *args: str) -> list[str]:
    """``docker --context NODE_CONTEXT ARGS...``: the node's engine over SSH."""
    return ["docker", "--context", node.docker_context, *args]


def _tail(text: str | bytes | None, lines: int = 3, limit: int = 400) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()][-lines:]
    out = " / ".join(kept)
    return out if len(out) <= limit else "..." + out[-limit:]


def _run(node: Node, argv: list[str], shown: str, *, timeout: float, input: str | None,
         check: bool, over_ssh: bool) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise NodeError(f"{node.name}: `{shown}` did not finish within {timeout:g} s") from None
    except FileNotFoundError:
        raise NodeError(f"{node.name}: `{argv[0]}` is not installed on the controller") from None
    if check and done.returncode != 0:
        if over_ssh and done.returncode == 255:
            raise NodeError(f"{node.name}: cannot reach {node.ssh_target} over SSH (port "
                            f"{node.port}): {_tail(done.stderr) or 'ssh exited with 255'}")
        raise NodeError(f"{node.name}: `{shown}` failed with exit code {done.returncode}: "
                        f"{_tail(done.stderr) or _tail(done.stdout) or 'no output'}")
    return done


def run_on_node(node: Node, command: str | Sequence[str], *, timeout: float = 60,
                input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on ``node`` over SSH and return the finished process (text output).
    With ``check`` (the default) a non-zero exit raises NodeError naming the node, the command
    and the tail of its stderr; a timeout always does."""
    shown = _command_text(command)
    return _run(node, ssh_argv(node, command, connect_timeout=min(10, timeout)), shown,
                timeout=timeout, input=input, check=check, over_ssh=True)


def run_docker(node: Node, *args: str, timeout: float = 120, input: str | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    """``docker --context`` on the node's engine, with the same errors as run_on_node."""
    return _run(node, docker_argv(node, *args), "docker " + shlex.join(args), timeout=timeout,
                input=input, check=check, over_ssh=False)


def image_ids(node: Node | None, images: Sequence[str], *, timeout: float = 60) -> dict[str, str]:
    """ID of each image that exists, on the node (None: on the controller's engine)."""
    argv = ["docker", "image", "ls", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"]
    if node is not None:
        done = run_docker(node, *argv[1:], timeout=timeout)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise NodeError(f"controller: `docker image ls` failed: {_tail(done.stderr)}")
    have = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return {img: have[img] for img in images if img in have}


def ship_images(node: Node, images: Sequence[str], *,
                progress: Callable[[str], None] | None = None,
                timeout: float = 1800) -> dict[str, str]:
    """Make ``images`` (name:tag) present on ``node`` with the controller's IDs: the ones whose
    ID differs or that are missing go in one ``docker save | docker --context NODE load``
    stream (shared layers travel once). Returns every image's ID on the node."""
    say = progress or (lambda _msg: None)
    local = image_ids(None, images)
    absent = [img for img in images if img not in local]
    if absent:
        raise NodeError(f"controller: no image {absent[0]} to ship to {node.name}: build it first "
                        "(make images)")
    remote = image_ids(node, images)
    todo = [img for img in images if remote.get(img) != local[img]]
    if not todo:
        say(f"{node.name}: {len(images)} image(s) already there")
        return {img: remote[img] for img in images}
    say(f"{node.name}: shipping {len(todo)} image(s): {', '.join(todo)}")
    start = time.monotonic()
    save = subprocess.Popen(["docker", "save", *todo], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    load = subprocess.Popen(docker_argv(node, "load", "-q"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(timeout, lambda: (save.kill(), load.kill()))
    timer.start()
    sent, last = 0, start
    try:
        assert save.stdout is not None and load.stdin is not None
        while chunk := save.stdout.read(1 << 20):
            try:
                load.stdin.write(chunk)
            except BrokenPipeError:
                break
            sent += len(chunk)
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                say(f"{node.name}: {sent / 1e6:.0f} MB sent")
        load.stdin.close()
        save_err = save.stderr.read() if save.stderr else b""
        # (communicate() would flush the stdin closed above; the outputs are a few lines)
        load_err = load.stderr.read() if load.stderr else b""
        if load.stdout:
            load.stdout.read()
        load.wait()
        save.wait()
    finally:
        timer.cancel()
    elapsed = time.monotonic() - start
    if elapsed >= timeout:
        raise NodeError(f"{node.name}: shipping {', '.join(todo)} did not finish within "
                        f"{timeout:g} s")
    if save.returncode != 0:
        raise NodeError(f"controller: `docker save {' '.join(todo)}` failed: {_tail(save_err)}")
    if load.returncode != 0:
        raise NodeError(f"{node.name}: `docker load` failed: {_tail(load_err)}")
    remote = image_ids(node, images)
    wrong = [img for img in images if remote.get(img) != local[img]]
    if wrong:
        raise NodeError(f"{node.name}: {wrong[0]} does not have the controller's ID after "
                        "loading it")
    say(f"{node.name}: shipped {sent / 1e6:.0f} MB in {elapsed:.1f} s")
    return {img: remote[img] for img in images}


_PROVENANCE = r"""
echo "kernel $(uname -r)"
echo "cpus $(nproc)"
echo "cpu_model $(grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo | cut -d: -f2-)"
. /etc/os-release 2>/dev/null && echo "os $PRETTY_NAME"
for itf in %s; do
  echo "== $itf"
  ethtool -i "$itf" 2>&1 || true
done
"""


def node_provenance(node: Node, *, timeout: float = 30) -> dict[str, Any]:
    """The node's kernel, OS, CPU model and count, and ``ethtool -i`` (driver, version,
    firmware, bus) of each data-plane interface."""
    names = " ".join(shlex.quote(i.name) for i in node.interfaces)
    done = run_on_node(node, _PROVENANCE % names, timeout=timeout)
    out: dict[str, Any] = {"node": node.name, "address": node.address, "interfaces": {}}
    current: dict[str, str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith("== "):
            current = out["interfaces"].setdefault(line[3:].strip(), {})
        elif current is not None:
            if ":" in line:
                key, value = line.split(":", 1)
                current[key.strip().replace("-", "_")] = value.strip()
            elif line.strip():
                current["error"] = line.strip()
        elif " " in line:
            key, value = line.split(" ", 1)
            out[key] = int(value) if key == "cpus" and value.strip().isdigit() else value.strip()
    return out


# ---------------------------------------------------------------------------------------------
# Checks, before anything changes anywhere


@dataclass
class ClockReading:
    """A node's clock against the controller's: ``offset_s`` > 0 means the node is ahead.
    The uncertainty is about half the round trip."""

    node: str
    offset_s: float
    rtt_s: float
    samples: int


@dataclass
class CheckReport:
    """What the checks saw on every node, and every problem (one sentence each)."""

    problems: list[str] = field(default_factory=list)
    clocks: dict[str, ClockReading] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    clock_bound_s: float = DEFAULT_CLOCK_BOUND_MS / 1000

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"problems": self.problems, "clock_bound_s": self.clock_bound_s,
                "clocks": {k: asdict(v) for k, v in self.clocks.items()}, "facts": self.facts}


# One line in, the node's time out. bash >= 5 reads its clock without a fork ($EPOCHREALTIME),
# which keeps the two halves of the round trip alike; else `date +%s.%N` (a fork, ~0.5 ms late).
_CLOCK_LOOP = ("if command -v bash >/dev/null && [ -n \"$(bash -c 'echo ${EPOCHREALTIME:-}')\" ]; "
               "then exec bash -c 'while read -r _; do echo $EPOCHREALTIME; done'; fi; "
               "while read -r _; do date +%s.%N; done")


def measure_clock(node: Node, *, samples: int = 7, timeout: float = 20) -> ClockReading:
    """Measure the node's clock offset over one SSH session: the controller sends a line, the
    node answers its time (bash's $EPOCHREALTIME, else ``date +%s.%N``), and the controller
    takes the midpoint of send and receive as the matching instant; the exchange with the
    shortest round trip wins (the first one, which includes the SSH handshake, is discarded)."""
    argv = ssh_argv(node, _CLOCK_LOOP, connect_timeout=min(10, timeout))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    best: tuple[float, float] | None = None
    got = 0
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for i in range(samples + 1):
            t0 = time.time()
            proc.stdin.write("t\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            t1 = time.time()
            if not line:
                break
            try:
                remote = float(line.strip().replace(",", "."))
            except ValueError:
                raise NodeError(f"{node.name}: `date +%s.%N` answered {line.strip()!r}, not a "
                                "time in seconds (GNU date is needed)") from None
            if i == 0:
                continue
            got += 1
            rtt = t1 - t0
            if best is None or rtt < best[1]:
                best = (remote - (t0 + t1) / 2, rtt)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            proc.stdin.close()  # the remote loop ends; ssh exits
        except OSError:
            pass
        err = proc.stderr.read() if proc.stderr else ""  # the timer still bounds this wait
        proc.wait()
        timer.cancel()
    if best is None:
        if proc.returncode == 255:
            raise NodeError(f"{node.name}: cannot reach {node.ssh_target} over SSH to read its "
                            f"clock: {_tail(err) or 'ssh exited with 255'}")
        raise NodeError(f"{node.name}: no clock reading within {timeout:g} s: "
                        f"{_tail(err) or 'no answer'}")
    return ClockReading(node.name, best[0], best[1], got)


_PROBE = r"""
for t in docker ethtool ip python3 tar; do command -v "$t" >/dev/null 2>&1 || echo "missing $t"; done
echo "compose $(docker compose version --short 2>/dev/null)"
root=$(docker info --format '{{.DockerRootDir}}' 2>/dev/null); [ -d "$root" ] || root=/
echo "docker_root $root"
echo "disk_free $(df -PB1 "$root" | awk 'NR == 2 {print $4}')"
echo "mem_available $(awk '/^MemAvailable:/ {printf "%%.0f\n", $2 * 1024}' /proc/meminfo)"
echo "cpus $(nproc)"
for itf in %s; do echo "link $itf $(ip -j addr show dev "$itf" 2>&1 | tr -d '\n')"; done
sshd -T 2>/dev/null | grep -iE '^(maxstartups|maxsessions) ' | sed 's/^/sshd_/'
"""
# sshd's limits on connections being set up at once and on sessions per connection. Docker's ssh
# helper opens one connection per API connection, and Compose opens many at once (removing a
# stack's volumes): with sshd's defaults (MaxStartups 10:30:100) `tierbench clean` failed on
# nodes prepared by hand ("Connection reset by peer"), with these it passed.
SSHD_MIN = {"maxstartups": 64, "maxsessions": 64}


def _major(version: str) -> int | None:
    m = re.match(r"v?(\d+)\.", version.strip())
    return int(m.group(1)) if m else None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _check_node(node: Node, need_disk: int, need_mem: int, bound_s: float, timeout: float,
                ) -> tuple[list[str], dict[str, Any], ClockReading | None]:
    problems: list[str] = []
    facts: dict[str, Any] = {"ssh": node.ssh_target, "context": node.docker_context}
    try:
        run_on_node(node, "true", timeout=timeout)
    except NodeError as exc:
        return [str(exc)], facts, None
    try:
        names = " ".join(shlex.quote(i.name) for i in node.interfaces)
        probe = run_on_node(node, _PROBE % names, timeout=timeout).stdout
    except NodeError as exc:
        return [str(exc)], facts, None
    links: dict[str, str] = {}
    for line in probe.splitlines():
        key, _, value = line.partition(" ")
        if key == "missing":
            problems.append(f"{node.name}: {value} is not installed (needed on every node)")
        elif key == "link":
            itf, _, text = value.partition(" ")
            links[itf] = text
        elif key in ("disk_free", "mem_available", "cpus"):
            facts[key] = int(value) if value.strip().isdigit() else None
        elif key in ("compose", "docker_root"):
            facts[key] = value.strip()
        elif key.startswith("sshd_"):
            facts.setdefault("sshd", {})[key.removeprefix("sshd_").lower()] = value.strip()
    low = {k: v for k, v in facts.get("sshd", {}).items()
           if k in SSHD_MIN and v.split(":")[0].isdigit() and int(v.split(":")[0]) < SSHD_MIN[k]}
    if low:
        problems.append(f"{node.name}: its sshd admits too few connections at once for Docker's "
                        f"ssh helper ({', '.join(f'{k} {v}' for k, v in low.items())}): set "
                        "`MaxStartups 64:30:128` and `MaxSessions 64` in its sshd configuration "
                        "and reload sshd")
    if "docker" not in " ".join(problems):
        compose = facts.get("compose") or ""
        if (_major(compose) or 0) < 2:
            problems.append(f"{node.name}: Docker Compose v2 does not answer on the node (`docker "
                            f"compose version` gave {compose or 'nothing'}): install the "
                            "docker-compose-plugin package")
    for itf in node.interfaces:
        text = links.get(itf.name, "")
        try:
            info = json.loads(text)[0]
        except (ValueError, IndexError, KeyError, TypeError):
            problems.append(f"{node.name}: data-plane interface {itf.name} does not exist "
                            f"({_tail(text) or 'no answer from ip'})")
            continue
        addrs = [f"{a.get('local')}" for a in info.get("addr_info", [])]
        facts.setdefault("interfaces", {})[itf.name] = {
            "state": info.get("operstate"), "mtu": info.get("mtu"), "addresses": addrs}
        if itf.ip not in addrs:
            problems.append(f"{node.name}: {itf.name} does not carry {itf.ip} (it has "
                            f"{', '.join(addrs) or 'no address'})")
    try:
        facts["docker"] = run_docker(node, "version", "--format", "{{.Server.Version}}",
                                     timeout=timeout).stdout.strip()
    except NodeError as exc:
        detail = str(exc)
        if "context" in detail and "not found" in detail:
            problems.append(f"{node.name}: there is no Docker context {node.docker_context}: "
                            f"docker context create {node.docker_context} --docker "
                            f"host=ssh://{node.ssh_target}")
        else:
            problems.append(f"{node.name}: the Docker engine does not answer through context "
                            f"{node.docker_context}: {detail.split(': ', 2)[-1]}")
    try:
        facts["compose_controller"] = run_docker(node, "compose", "version", "--short",
                                                 timeout=timeout).stdout.strip()
    except NodeError as exc:
        problems.append(f"{node.name}: `docker --context {node.docker_context} compose version` "
                        f"fails on the controller: {str(exc).split(': ', 2)[-1]}")
    clock = None
    try:
        clock = measure_clock(node, timeout=timeout)
        if abs(clock.offset_s) > bound_s:
            side = "ahead of" if clock.offset_s > 0 else "behind"
            problems.append(f"{node.name}: its clock is {abs(clock.offset_s) * 1000:.1f} ms {side} "
                            f"the controller's (+/- {clock.rtt_s * 500:.1f} ms), beyond the bound "
                            f"of {bound_s * 1000:g} ms: synchronise it (chrony, NTP or PTP)")
    except NodeError as exc:
        problems.append(str(exc))
    disk, mem = facts.get("disk_free"), facts.get("mem_available")
    if need_disk and disk is not None and disk < need_disk:
        problems.append(f"{node.name}: {_gb(disk)} free in {facts.get('docker_root')}, less than "
                        f"the {_gb(need_disk)} this needs there")
    if need_mem and mem is not None and mem < need_mem:
        problems.append(f"{node.name}: {_gb(mem)} of memory available, less than the "
                        f"{_gb(need_mem)} this needs")
    return problems, facts, clock


def check_nodes(cluster: Cluster, *, need_disk_bytes: int | Mapping[str, int] = 0,
                need_mem_bytes: int | Mapping[str, int] = 0,
                clock_bound_s: float | None = None, timeout: float = 20,
                parallel: int = 8) -> CheckReport:
    """Check every node, changing nothing anywhere: SSH reachable (BatchMode, timeout); docker,
    ethtool, ip, python3 (the sampling agent) and tar installed; Docker Compose v2 on the node; each data-plane interface exists
    and carries its address; the engine answers through the node's Docker context, and Compose
    runs through it; the clock within ``clock_bound_s`` (default: the cluster file's
    clock_bound_ms) of the controller's; free disk in Docker's root folder and available memory
    at least the sizes given (one number for every node, or per node name). Every problem is
    collected, one sentence each, in node order."""
    bound = clock_bound_s if clock_bound_s is not None else cluster.clock_bound_ms / 1000
    report = CheckReport(clock_bound_s=bound)
    control_dir()  # a folder ssh may not use is one sentence, not one per node

    def need(value: int | Mapping[str, int], name: str) -> int:
        return int(value.get(name, 0)) if isinstance(value, Mapping) else int(value)

    workers = max(1, min(parallel, len(cluster.nodes)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {node.name: pool.submit(_check_node, node, need(need_disk_bytes, node.name),
                                          need(need_mem_bytes, node.name), bound, timeout)
                   for node in cluster.nodes}
    for node in cluster.nodes:
        problems, facts, clock = futures[node.name].result()
        report.problems += problems
        report.facts[node.name] = facts
        if clock is not None:
            report.clocks[node.name] = clock
    return report


# ---------------------------------------------------------------------------------------------
# Command line


def _describe(node: Node, report: CheckReport) -> str:
    facts = report.facts.get(node.name, {})
    parts = [f"{node.name} {node.ssh_target}"]
    if facts.get("docker"):
        parts.append(f"Docker {facts['docker']}")
    if facts.get("compose"):
        parts.append(f"Compose {facts['compose']}")
    for name, itf in facts.get("interfaces", {}).items():
        parts.append(f"{name} {itf['state']} mtu {itf['mtu']}")
    clock = report.clocks.get(node.name)
    if clock:
        parts.append(f"clock {clock.offset_s * 1000:+.3f} ms (rtt {clock.rtt_s * 1000:.3f} ms)")
    if facts.get("disk_free") is not None:
        parts.append(f"disk {_gb(facts['disk_free'])} free")
    if facts.get("mem_available") is not None:
        parts.append(f"memory {_gb(facts['mem_available'])} available")
    return ", ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tierbench.placement.nodes",
                                     description="Check a cluster's nodes (changes nothing).")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run every node check and print what it saw")
    check.add_argument("cluster", nargs="?", help=f"cluster file (default ${CLUSTER_ENV})")
    check.add_argument("--disk-gb", type=float, default=0, help="free disk needed per node")
    check.add_argument("--mem-gb", type=float, default=0, help="memory needed per node")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    prov = sub.add_parser("provenance", help="print every node's provenance as JSON")
    prov.add_argument("cluster", nargs="?", help=f"cluster file (default ${CLUSTER_ENV})")
    args = parser.parse_args(argv)
    path = cluster_path(args.cluster)
    if path is None:
        print(f"nodes: give a cluster file or set {CLUSTER_ENV}", file=sys.stderr)
        return 2
    try:
        cluster = load_cluster(path)
    except ClusterError as exc:
        print(exc, file=sys.stderr)
        return 2
    start = time.monotonic()
    try:
        if args.command == "provenance":
            control_dir()
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                out = list(pool.map(node_provenance, cluster.nodes))
            print(json.dumps(out, indent=2))
            return 0
        report = check_nodes(cluster, need_disk_bytes=int(args.disk_gb * 1e9),
                             need_mem_bytes=int(args.mem_gb * 1e9))
    except NodeError as exc:
        print(f"nodes: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for node in cluster.nodes:
            print(f"nodes: {_describe(node, report)}")
        for problem in report.problems:
            print(f"nodes: {problem}", file=sys.stderr)
        if report.ok:
            print(f"nodes: all {len(cluster.nodes)} node(s) ready (clock bound "
                  f"{report.clock_bound_s * 1000:g} ms; checked in "
                  f"{time.monotonic() - start:.1f} s)")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
