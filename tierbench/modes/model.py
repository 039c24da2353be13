"""Mode files: declared schema, ``extends:``, and the Mode a run applies.

A mode file sets, for a scope (some tiers or roles of a deployment, or named host interfaces),
NIC features, MTU, channels, RSS, RPS/XPS masks, interrupt coalescing, rings and header-data
split, a root qdisc, sysctls and server options. Applying them is :mod:`tierbench.modes.apply`'s
job; which tiers exist is the workload kind's (:mod:`tierbench.kinds`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from tierbench.config.errors import ConfigError
from tierbench.config.files import MODES_DIR, read_yaml, resolve_path
from tierbench.config.models import (
    Model,
    Rule,
    choice,
    flag,
    non_empty_list,
    number,
    problem,
    text,
    validate,
    whole,
)
from tierbench.interfaces.netif import FEATURE_ALIASES, Endpoint, NicSettings

__all__ = [
    "CHANNEL_KEYS",
    "COALESCE_KEYS",
    "MODES_DIR",
    "RING_KEYS",
    "ROLES",
    "Knobs",
    "Mode",
    "ModeFile",
    "bind",
    "diff_modes",
    "host_endpoints",
    "list_modes",
    "load_layered",
    "load_mode",
    "load_mode_list",
    "of_parts",
]

ROLES = ("servers", "clients")
CHANNEL_KEYS = ("rx", "tx", "other", "combined")
COALESCE_BOOL_KEYS = ("adaptive-rx", "adaptive-tx", "cqe-mode-rx", "cqe-mode-tx")
COALESCE_INT_KEYS = (
    "rx-usecs", "rx-frames", "rx-usecs-irq", "rx-frames-irq",
    "tx-usecs", "tx-frames", "tx-usecs-irq", "tx-frames-irq",
    "stats-block-usecs", "sample-interval", "pkt-rate-low", "pkt-rate-high",
    "rx-usecs-low", "rx-frames-low", "tx-usecs-low", "tx-frames-low",
    "rx-usecs-high", "rx-frames-high", "tx-usecs-high", "tx-frames-high",
)
COALESCE_KEYS = COALESCE_BOOL_KEYS + COALESCE_INT_KEYS
RING_INT_KEYS = ("rx", "rx-mini", "rx-jumbo", "tx", "rx-buf-len", "cqe-size")
RING_BOOL_KEYS = ("tx-push", "tcp-data-split")
RING_KEYS = RING_INT_KEYS + RING_BOOL_KEYS
OPTION = re.compile(r"^[a-z][a-z0-9_]*$")
RATE = r"^\d+(\.\d+)?([kmgtKMGT]?bit|[kmgtKMGT]?bps)$"
SIZE = r"^\d+([kmgKMG]?[bB]|[kmgKMG]bit)?$"
TIME = r"^\d+(\.\d+)?(s|ms|us)$"
PERCENT = r"^\d+(\.\d+)?%$"
MASK = r"^(all|(0x)?[0-9a-fA-F]+(,[0-9a-fA-F]+)*)$"
SYSCTL = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_-]+)+$")
IFNAME = r"^[\w.:@-]{1,15}$"


# --------------------------------------------------------------------------- file schema


def _mapping(what: str, item_problem: Callable[[Any, Any], PydanticCustomError | None]
             ) -> Callable[[Any], Any]:
    """A check of a mapping of ``what`` (None: empty): the first item ``item_problem(key,
    value)`` finds a problem with is refused."""
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise problem(f"must be a mapping of {what}")
        for key, item in value.items():
            found = item_problem(key, item)
            if found is not None:
                raise found
        return value
    return check


def _on_off(key: str, item: Any) -> PydanticCustomError | None:
    return None if isinstance(item, bool) else problem("must be on or off, got {got}", sub=key,
                                                       got=repr(item))


def _settings(keys: tuple[str, ...], bool_keys: tuple[str, ...], minimum: int) -> Rule:
    """An ethtool settings mapping (-C, -G): known keys, on/off or whole-number values."""
    def item_problem(key: Any, item: Any) -> PydanticCustomError | None:
        if key not in keys:
            return problem("unknown key {key} (allowed: {allowed})", key=repr(key),
                           allowed=", ".join(sorted(keys)))
        if key in bool_keys:
            return _on_off(key, item)
        if not isinstance(item, int) or isinstance(item, bool) or item < minimum:
            return problem("must be a whole number >= {lo}, got {got}", sub=key, lo=minimum,
                           got=repr(item))
        return None
    schema = {"type": "object", "additionalProperties": False, "properties": {
        k: {"type": "boolean"} if k in bool_keys else {"type": "integer", "minimum": minimum}
        for k in keys}}
    return Rule(Annotated[dict[str, Any], BeforeValidator(_mapping("setting: value", item_problem)),
                          WithJsonSchema(schema)])


def _feature_problem(key: Any, item: Any) -> PydanticCustomError | None:
    if not isinstance(key, str) or (key not in FEATURE_ALIASES and "-" not in key):
        return problem("not a feature name (short names: {names}; or a long ethtool -k name)",
                       sub=str(key), names=", ".join(sorted(FEATURE_ALIASES)))
    return _on_off(key, item)


Features = Annotated[dict[str, bool], BeforeValidator(_mapping("feature: on|off",
                                                                _feature_problem))]


class Channels(Model):
    """ethtool -L counts."""

    rx: Annotated[int, whole(1)] | None = None
    tx: Annotated[int, whole(1)] | None = None
    other: Annotated[int, whole(0)] | None = None
    combined: Annotated[int, whole(1)] | None = None


class Rss(Model):
    """ethtool -X: spread equally over N queues, by weights, or the driver default."""

    equal: Annotated[int, whole(1)] | None = None
    weights: Annotated[list[int], non_empty_list(whole(0), "whole numbers")] | None = None
    default: Annotated[bool, flag()] | None = None

    @model_validator(mode="after")
    def _one(self) -> Rss:
        given = [k for k in ("equal", "weights", "default") if getattr(self, k) is not None]
        if len(given) > 1:
            raise problem("give one of equal, weights or default, not several")
        if self.default is False:
            raise problem("must be on", sub="default")
        return self


class Nic(Model):
    """Link settings of every interface in the mode's scope."""

    features: Features = {}
    mtu: Annotated[int, whole(68)] | None = None
    channels: Channels = Channels()
    rss: Rss = Rss()
    rps_cpus: Annotated[str, text(MASK, "all, or a hex CPU mask such as 3 or ff")] | None = None
    xps_cpus: Annotated[str, text(MASK, "all, or a hex CPU mask such as 3 or ff")] | None = None
    rps_flow_cnt: Annotated[int, whole(0)] | None = None
    coalesce: Annotated[dict[str, Any], _settings(COALESCE_KEYS, COALESCE_BOOL_KEYS, 0)] = {}
    rings: Annotated[dict[str, Any], _settings(RING_KEYS, RING_BOOL_KEYS, 1)] = {}


class Qdisc(Model):
    """A root qdisc: tbf or htb rate shaping, or netem delay/loss."""

    kind: Annotated[str, choice("tbf", "htb", "netem")]
    rate: Annotated[str, text(RATE, "1gbit or 10gbit")] | None = None
    ceil: Annotated[str, text(RATE, "1gbit or 10gbit")] | None = None
    burst: Annotated[str, text(SIZE, "256kb")] | None = None
    latency: Annotated[str, text(TIME, "10ms")] | None = None
    delay: Annotated[str, text(TIME, "10ms")] | None = None
    jitter: Annotated[str, text(TIME, "10ms")] | None = None
    loss: Annotated[str, text(PERCENT, "0.1%")] | None = None
    limit: Annotated[int, whole(1)] | None = None

    @model_validator(mode="after")
    def _per_kind(self) -> Qdisc:
        allowed = {"tbf": {"rate", "burst", "latency"}, "htb": {"rate", "ceil", "burst"},
                   "netem": {"delay", "jitter", "loss", "rate", "limit"}}[self.kind]
        given = {k for k in Qdisc.model_fields if k != "kind" and getattr(self, k) is not None}
        extra = sorted(given - allowed)
        if extra:
            raise problem("unknown key {key} for kind {kind} (allowed: {allowed})",
                          key=repr(extra[0]), kind=self.kind,
                          allowed=", ".join(sorted(allowed | {"kind"})))
        if self.kind in ("tbf", "htb") and self.rate is None:
            raise problem("required for {kind} (e.g. 1gbit)", sub="rate", kind=self.kind)
        if self.kind == "netem" and not given:
            raise problem("netem needs at least one of delay, jitter, loss, rate, limit")
        if self.jitter is not None and self.delay is None:
            raise problem("needs delay too", sub="jitter")
        return self


def _sysctls(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise problem("must be a mapping of sysctl: value")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not SYSCTL.fullmatch(key):
            raise problem("not a sysctl name like net.core.rmem_max",
                          sub=key if isinstance(key, str) and key.isprintable() else repr(key))
        out[key] = _sysctl_value(key, item)
    return out


def _sysctl_value(key: str, value: Any) -> str:
    if isinstance(value, list) and value:
        for i, v in enumerate(value):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise problem("must be a whole number >= 0, got {got}", sub=f"{key}[{i}]",
                              got=repr(v))
        return " ".join(str(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or str(value).strip() == "":
        raise problem("must be a number, a string or a list of numbers", sub=key)
    return " ".join(str(value).split())


Sysctls = Annotated[dict[str, str], BeforeValidator(_sysctls),
                    WithJsonSchema({"type": "object", "additionalProperties": {
                        "anyOf": [{"type": "integer"}, {"type": "string"},
                                  {"type": "array", "items": {"type": "integer"}}]}})]


class Cpu(Model):
    """The CPUs of the covered tiers' containers: which ones (a cpuset) and how much of their
    time (a limit in CPUs, CFS quota), as `docker update --cpuset-cpus --cpus` would set them;
    per container (each its own limit), or per platform: one cpuset and one limit shared by
    the tiers a host holds (their common parent cgroup): every server tier (roles: [servers]),
    or the mode's tiers where the kind starts them under a parent of their own."""

    cpuset: Annotated[str, text(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", "0-1 or 1 or 0,2")] | None = None
    limit: Annotated[float, number(0.01, 1024)] | None = None
    per: Annotated[str, choice("container", "platform")] | None = None

    @model_validator(mode="after")
    def _some(self) -> Cpu:
        if self.cpuset is None and self.limit is None:
            raise problem("give cpuset, limit or both")
        return self


def _option_problem(key: Any, item: Any) -> PydanticCustomError | None:
    if not isinstance(key, str) or not OPTION.fullmatch(key):
        return problem("not a server option name like web_sendfile",
                       sub=key if isinstance(key, str) and key.isprintable() else repr(key))
    return _on_off(key, item)


# Server options (on/off, by name): which names exist is the kind's that runs the servers
# (`Kind.server_options`, checked when an experiment uses the mode); changing one restarts
# the services it concerns.
ServerOptions = Annotated[dict[str, bool], BeforeValidator(_mapping("option: on|off",
                                                                     _option_problem)),
                          WithJsonSchema({"type": "object",
                                          "additionalProperties": {"type": "boolean"}})]


def _names(value: Any) -> Any:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise problem("must be a mode name or a list of mode names, got {got}", got=repr(value))
    return value


class ModeFile(Model):
    """One mode file as written (before ``extends:`` is merged in)."""

    description: str = ""
    extends: Annotated[list[Annotated[str, text(r"^[\w.-]+$", "a mode name")]], BeforeValidator(_names),
                       WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array",
                                                                      "items": {"type": "string"}}],
                                       "description": "mode(s) this one builds on"})] = []
    tiers: Annotated[list[str], non_empty_list(text(r"^[a-z][a-z0-9-]*$", "proxy"), "tier names")] | None = None
    roles: Annotated[list[str], non_empty_list(choice(*ROLES), "roles (servers, clients)")] | None = None
    host_interfaces: Annotated[list[str], non_empty_list(text(IFNAME, "eth0"), "interface names")] | None = None
    nic: Nic = Nic()
    qdisc: Qdisc | None = None
    sysctls: Sysctls = {}
    cpu: Cpu | None = None
    server: ServerOptions = {}


# --------------------------------------------------------------------------- the mode


@dataclass(frozen=True)
class Knobs:
    """Settings beyond features and MTU: link queues, coalescing, rings, qdisc, sysctls."""

    channels: dict[str, int] = field(default_factory=dict)
    rss: dict[str, Any] = field(default_factory=dict)
    rps_cpus: str | None = None
    xps_cpus: str | None = None
    rps_flow_cnt: int | None = None
    coalesce: dict[str, int | bool] = field(default_factory=dict)
    rings: dict[str, int | bool] = field(default_factory=dict)
    qdisc: dict[str, Any] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mode:
    """A named, declarative set of settings applied to some tiers, roles or host interfaces.

    ``tiers`` and ``roles`` empty: every tier of the deployment the mode is used with."""

    name: str
    description: str
    tiers: tuple[str, ...]
    nic: NicSettings
    source: str
    host_interfaces: tuple[str, ...] = ()
    knobs: Knobs = field(default_factory=Knobs)
    server: dict[str, bool] = field(default_factory=dict)
    extends: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    cpu: dict[str, Any] = field(default_factory=dict)
    # A mode of several scoped parts (of_parts): each part sets its settings over its own tiers
    # or roles, the later over the earlier where they meet; ``placed`` (bind) is what each
    # endpoint of one deployment gets. nic and knobs above are the parts' union: what the mode
    # sets somewhere (sets_nothing, the guard's and the qdisc's checks), never applied as such.
    parts: tuple[Mode, ...] = ()
    placed: tuple[tuple[str, Mode], ...] = ()

    @property
    def scope(self) -> str:
        """``host`` when the mode names host interfaces, else ``container``."""
        return "host" if self.host_interfaces else "container"

    @property
    def sets_nothing(self) -> bool:
        """True for a mode that only names a condition (a baseline that changes no setting)."""
        return not (self.nic.features or self.nic.mtu is not None or self.server or self.cpu
                    or self.knobs != Knobs() or self.host_interfaces)

    @property
    def needs_restart(self) -> bool:
        """True when the mode sets server options (they need a service restart)."""
        return bool(self.server)

    def covers(self, tier: str, role: str) -> bool:
        """Whether the mode applies to a deployment tier of this name and role (client/server)."""
        if self.parts:
            return any(p.covers(tier, role) for p in self.parts)
        if self.host_interfaces:
            return False
        if self.tiers:
            return tier in self.tiers
        if self.roles:
            return f"{role}s" in self.roles
        return True

    def at(self, label: str) -> Mode:
        """What the mode sets on the endpoint ``label``: itself, or for a mode of parts the
        parts that cover the endpoint, layered (bound to a deployment first: bind)."""
        if not self.parts:
            return self
        for placed_label, mode in self.placed:
            if placed_label == label:
                return mode
        if not self.placed:
            raise ValueError(f"mode {self.name} of parts applied before it was bound to a "
                             "deployment (runner.bound)")
        raise ValueError(f"mode {self.name}: no part covers {label}")

    def platform(self) -> str:
        """The CPUs the mode gives and, when it shapes its tiers' links, their rate, in words
        (the plan prints it for every point)."""
        rate = self.knobs.qdisc.get("rate")
        link = f", links {self.knobs.qdisc['kind']} {rate}" if rate and self.cpu else ""
        return self.cpu_words() + link

    def cpu_words(self) -> str:
        """The CPUs the mode gives, in words."""
        if not self.cpu:
            return "platform=the stack's cpusets (.env *_CPUS), no CPU limit"
        cpus = f"CPUs {self.cpu['cpuset']}" if "cpuset" in self.cpu else "the stack's cpusets"
        limit = self.cpu.get("limit")
        if self.cpu.get("per") == "platform":
            time = "no limit" if limit is None else f"{limit:g} CPU of time in all"
            shared = " and ".join(self.tiers) if self.tiers else "the server tiers"
            return f"platform={cpus}, {time}, shared by {shared}"
        who = ", ".join(self.tiers or self.roles) or "every tier, load generator included"
        time = "no limit" if limit is None else f"{limit:g} CPU of time each"
        return f"platform={cpus}, {time} ({who}; per container)"

    def as_dict(self) -> dict[str, Any]:
        """The mode as it will be recorded in the manifest."""
        k = self.knobs
        nic: dict[str, Any] = {"features": dict(self.nic.features), "mtu": self.nic.mtu}
        for key in ("channels", "rss", "coalesce", "rings"):
            if getattr(k, key):
                nic[key] = dict(getattr(k, key))
        for key in ("rps_cpus", "xps_cpus", "rps_flow_cnt"):
            if getattr(k, key) is not None:
                nic[key] = getattr(k, key)
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "tiers": list(self.tiers),
            "nic": nic,
            "source": self.source,
        }
        optional = (("roles", list(self.roles)), ("host_interfaces", list(self.host_interfaces)),
                    ("qdisc", dict(k.qdisc)), ("sysctls", dict(k.sysctls)),
                    ("cpu", dict(self.cpu)), ("server", dict(self.server)),
                    ("extends", list(self.extends)))
        out.update((key, value) for key, value in optional if value)
        if self.parts:
            out["parts"] = [p.as_dict() for p in self.parts]
        return out


# --------------------------------------------------------------------------- modes of parts


def _over(a: Knobs, b: Knobs) -> Knobs:
    """The knobs of ``b`` set over those of ``a`` (mappings key by key; a qdisc replaced)."""
    return Knobs(
        channels={**a.channels, **b.channels}, rss=b.rss or a.rss,
        rps_cpus=a.rps_cpus if b.rps_cpus is None else b.rps_cpus,
        xps_cpus=a.xps_cpus if b.xps_cpus is None else b.xps_cpus,
        rps_flow_cnt=a.rps_flow_cnt if b.rps_flow_cnt is None else b.rps_flow_cnt,
        coalesce={**a.coalesce, **b.coalesce}, rings={**a.rings, **b.rings},
        qdisc=b.qdisc or a.qdisc, sysctls={**a.sysctls, **b.sysctls})


def _layered(name: str, description: str, parts: Iterable[Mode]) -> Mode:
    """One unscoped mode of the parts' interface settings, each over the one before (features
    by their long ethtool names, so that a part's `tso` and another's
    `tcp-segmentation-offload` are one feature, the later part's state)."""
    nic, knobs = NicSettings(), Knobs()
    for p in parts:
        nic = NicSettings(features={**nic.features, **{FEATURE_ALIASES.get(f, f): v
                                                       for f, v in p.nic.features.items()}},
                          mtu=nic.mtu if p.nic.mtu is None else p.nic.mtu)
        knobs = _over(knobs, p.knobs)
    return Mode(name=name, description=description, tiers=(), nic=nic, source="(parts)",
                knobs=knobs)


def of_parts(name: str, description: str, parts: Iterable[Mode]) -> Mode:
    """One mode of several scoped parts (a part's own parts taken in its place): each part's
    interface settings over its tiers or roles, a later part over an earlier one where their
    scopes meet (a configuration whose server and client sides differ is one mode, and so is a
    change over a stated starting configuration). A part may set only interface settings (no
    sysctls, cpu, server options or host interfaces: those are not per endpoint); ConfigError
    in one sentence otherwise."""
    flat = [q for p in parts for q in (p.parts or (p,))]
    for p in flat:
        other = [k for k, v in (("sysctls", p.knobs.sysctls), ("cpu", p.cpu),
                                ("server", p.server), ("host_interfaces", p.host_interfaces))
                 if v]
        if other:
            raise ConfigError(f"mode {p.name}: {', '.join(other)}: a part of mode {name} may "
                              "set only interface settings (nic:, qdisc:), which apply per "
                              "interface")
    union = _layered(name, description, flat)
    return replace(union, source=" + ".join(dict.fromkeys(p.source for p in flat)),
                   parts=tuple(flat))


def bind(mode: Mode, tiers: Iterable[tuple[str, str, Iterable[Endpoint]]]) -> Mode:
    """A mode of parts with what each endpoint of a deployment gets (``tiers``: each tier's
    name, role and endpoints): the parts that cover any tier the endpoint carries, layered in
    the parts' order. Any other mode as it is."""
    if not mode.parts:
        return mode
    covering: dict[str, list[int]] = {}
    for tier, role, eps in tiers:
        mine = [i for i, p in enumerate(mode.parts) if p.covers(tier, role)]
        for ep in eps:
            have = covering.setdefault(ep.label, [])
            have += [i for i in mine if i not in have]
    placed = tuple((label, _layered(mode.name, mode.description,
                                    [mode.parts[i] for i in sorted(idx)]))
                   for label, idx in covering.items() if idx)
    return replace(mode, placed=placed)


# --------------------------------------------------------------------------- loading


def _merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Child keys override base keys; mappings merge key by key, except ``qdisc`` (replaced)."""
    out = dict(base)
    for key, value in child.items():
        if key in ("extends", "qdisc"):
            out[key] = value
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolved(path: Path, modes_dir: Path, chain: tuple[Path, ...]) -> tuple[dict, tuple[str, ...]]:
    """The file's data with its ``extends:`` parents merged in, and the parents' names."""
    data = read_yaml(path, "mode file")
    own = validate(ModeFile, data, str(path))
    merged: dict[str, Any] = {}
    names: list[str] = []
    for parent in own.extends:
        try:
            ppath = resolve_path(parent, modes_dir, "mode")
        except ConfigError as exc:
            raise ConfigError(f"{path}: extends: {exc}") from None
        if ppath.resolve() in chain:
            cycle = " -> ".join([p.stem for p in chain] + [ppath.stem])
            raise ConfigError(f"{path}: extends: {parent!r} makes a cycle ({cycle}); remove one")
        pdata, pnames = _resolved(ppath, modes_dir, chain + (ppath.resolve(),))
        merged = _merge(merged, pdata)
        names += [*pnames, ppath.stem]
    mine = {k: v for k, v in data.items() if k != "extends"}
    return _merge(merged, mine), tuple(dict.fromkeys(names))


def load_mode(name: str, modes_dir: Path = MODES_DIR) -> Mode:
    """Load and validate one mode file (by name in modes/, or by path), resolving extends;
    `a+b` names modes applied one over another (:func:`load_layered`), e.g. a platform and an
    offload setting as the two factors of one experiment."""
    if "+" in name and not Path(name).suffix and not Path(name).exists():
        return load_layered(name.split("+"), modes_dir)
    path = resolve_path(name, modes_dir, "mode")
    data, parents = _resolved(path, modes_dir, (path.resolve(),))
    return _mode(path.stem, data, parents, str(path))


def load_layered(names: list[str], modes_dir: Path = MODES_DIR) -> Mode:
    """Modes applied one over another, as a mode file with `extends: names` and nothing else
    would be (a later mode's keys override an earlier one's); named `a+b`."""
    merged: dict[str, Any] = {}
    parents: list[str] = []
    paths = []
    for name in names:
        path = resolve_path(name, modes_dir, "mode")
        data, pnames = _resolved(path, modes_dir, (path.resolve(),))
        merged = _merge(merged, data)
        parents += [*pnames, path.stem]
        paths.append(path)
    return _mode("+".join(p.stem for p in paths), merged, tuple(dict.fromkeys(parents)),
                 " + ".join(map(str, paths)))


def _mode(name: str, data: dict[str, Any], parents: tuple[str, ...], where: str) -> Mode:
    """A Mode from a mode file's data with its parents merged in."""
    scopes = [k for k in ("tiers", "roles", "host_interfaces") if data.get(k)]
    if len(scopes) > 1:
        raise ConfigError(f"{where}: {' and '.join(scopes)}: a mode has one scope; keep only one "
                          "of them")
    m = validate(ModeFile, data, where)
    if m.cpu is not None and m.host_interfaces:
        raise ConfigError(f"{where}: cpu: sets the CPUs of containers; a mode with "
                          "host_interfaces has none (drop one of them)")
    if m.cpu is not None and m.cpu.per == "platform" and list(m.roles or []) != ["servers"] \
            and not m.tiers:
        raise ConfigError(f"{where}: cpu.per: platform is the CPUs some tiers share (their "
                          "common parent cgroup); give the mode roles: [servers] or the tiers "
                          "that share it, or per: container")
    n = m.nic
    knobs = Knobs(
        channels={k: v for k, v in n.channels.model_dump().items() if v is not None},
        rss={k: v for k, v in n.rss.model_dump().items() if v is not None},
        rps_cpus=None if n.rps_cpus is None else n.rps_cpus.lower(),
        xps_cpus=None if n.xps_cpus is None else n.xps_cpus.lower(),
        rps_flow_cnt=n.rps_flow_cnt,
        coalesce=dict(n.coalesce),
        rings=dict(n.rings),
        qdisc=({k: (str(v) if k != "limit" else v)
                for k, v in m.qdisc.model_dump().items() if v is not None} if m.qdisc else {}),
        sysctls=dict(m.sysctls),
    )
    return Mode(
        name=name,
        description=" ".join(m.description.split()),
        tiers=tuple(m.tiers or ()),
        nic=NicSettings(features=dict(n.features), mtu=n.mtu),
        source=where,
        host_interfaces=tuple(m.host_interfaces or ()),
        knobs=knobs,
        server=dict(m.server),
        extends=parents,
        roles=tuple(m.roles or ()),
        cpu={k: v for k, v in m.cpu.model_dump().items() if v is not None} if m.cpu else {},
    )


def load_mode_list(where: str, names: Any, modes_dir: Path = MODES_DIR) -> list[Mode]:
    """An experiment's `modes:` (a non-empty list of distinct mode names), loaded."""
    if not isinstance(names, list) or not names or not all(isinstance(m, str) for m in names):
        raise ConfigError(f"{where}: modes: must be a non-empty list of mode names")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: modes: lists a mode twice")
    try:
        return [load_mode(m, modes_dir) for m in names]
    except ConfigError as exc:
        raise ConfigError(f"{where}: modes: {exc}") from None


def list_modes(modes_dir: Path = MODES_DIR) -> list[Mode]:
    """Every mode file in ``modes_dir``, loaded, sorted by name."""
    return [load_mode(str(p), modes_dir) for p in sorted(modes_dir.glob("*.yml"))]


def host_endpoints(mode: Mode) -> list[Endpoint]:
    """The host interfaces a host-scope mode names, as endpoints in the host's namespace."""
    return [Endpoint("host", name, None) for name in mode.host_interfaces]


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key in ("name", "source", "description"):
            continue
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, full + "."))
        elif value not in (None, {}, []):
            out[full] = value
    return out


def diff_modes(a: Mode, b: Mode) -> list[str]:
    """Lines ``key: A -> B`` for every setting that differs between two modes."""
    fa, fb = _flat(a.as_dict()), _flat(b.as_dict())
    lines = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, "-"), fb.get(key, "-")
        if va != vb:
            lines.append(f"{key}: {json.dumps(va)} -> {json.dumps(vb)}")
    return lines

