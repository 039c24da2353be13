"""Mode files: schema, validation (errors name the file and key), ``extends:``, and the CLI.

A mode file sets, for a scope (tiers of the stack, or named host interfaces), NIC features,
MTU, channels, RSS, RPS/XPS masks, interrupt coalescing, rings and header-data split, a root
qdisc, sysctls and server options.  Applying them is :mod:`tierbench.knobs`' job.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tierbench.netif import FEATURE_ALIASES, Endpoint, NetifError, NicSettings
from tierbench.schema import PFS_TIERS, ROOT, TIERS, ConfigError, check_keys, number, read_yaml, resolve_path

__all__ = [
    "CHANNEL_KEYS",
    "COALESCE_KEYS",
    "MODES_DIR",
    "RING_KEYS",
    "SERVER_KEYS",
    "ConfigError",
    "Knobs",
    "Mode",
    "add_modes_parser",
    "cmd_modes",
    "list_modes",
    "load_mode",
    "mode_endpoints",
]

MODES_DIR = ROOT / "modes"

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
SERVER_KEYS = ("web_sendfile", "web_mmap", "proxy_cache")
QDISC_KEYS = {
    "tbf": {"kind", "rate", "burst", "latency"},
    "htb": {"kind", "rate", "ceil", "burst"},
    "netem": {"kind", "delay", "jitter", "loss", "rate", "limit"},
}
_RATE = re.compile(r"^\d+(\.\d+)?([kmgt]?bit|[kmgt]?bps)$", re.I)
_SIZE = re.compile(r"^\d+([kmg]?b|[kmg]bit)?$", re.I)
_TIME = re.compile(r"^\d+(\.\d+)?(s|ms|us)$")
_PERCENT = re.compile(r"^\d+(\.\d+)?%$")
_MASK = re.compile(r"^(all|(0x)?[0-9a-f]+(,[0-9a-f]+)*)$", re.I)
_SYSCTL = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_-]+)+$")


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
    """A named, declarative set of settings applied to some tiers or host interfaces."""

    name: str
    description: str
    tiers: tuple[str, ...]
    nic: NicSettings
    source: str
    host_interfaces: tuple[str, ...] = ()
    knobs: Knobs = field(default_factory=Knobs)
    server: dict[str, bool] = field(default_factory=dict)
    extends: tuple[str, ...] = ()

    @property
    def scope(self) -> str:
        """``host`` when the mode names host interfaces, else ``container``."""
        return "host" if self.host_interfaces else "container"

    @property
    def needs_restart(self) -> bool:
        """True when the mode sets server options (they need a service restart)."""
        return bool(self.server)

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
        if self.host_interfaces:
            out["host_interfaces"] = list(self.host_interfaces)
        if k.qdisc:
            out["qdisc"] = dict(k.qdisc)
        if k.sysctls:
            out["sysctls"] = dict(k.sysctls)
        if self.server:
            out["server"] = dict(self.server)
        if self.extends:
            out["extends"] = list(self.extends)
        return out


# --------------------------------------------------------------------------- validation


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be on or off, got {value!r}")
    return value


def _mapping(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping")
    return value


def _pattern(where: str, value: Any, pattern: re.Pattern[str], example: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not pattern.match(
        str(value)
    ):
        raise ConfigError(f"{where}: must look like {example}, got {value!r}")
    return str(value)


def _settings_block(where: str, value: Any, keys: Any, bool_keys: Any, *, minimum: int) -> None:
    """An ethtool settings mapping (-C, -G): known keys, on/off or whole-number values."""
    block = _mapping(where, value)
    check_keys(where, block, set(keys))
    for key, item in block.items():
        if key in bool_keys:
            _bool(f"{where}.{key}", item)
        else:
            number(f"{where}.{key}", item, minimum=minimum, integer=True)


def _validate_nic(where: str, nic: dict[str, Any]) -> None:
    check_keys(where, nic, {"features", "mtu", "channels", "rss", "rps_cpus", "xps_cpus",
                            "rps_flow_cnt", "coalesce", "rings"})
    features = _mapping(f"{where}.features", nic.get("features"))
    if not isinstance(nic.get("features", {}) or {}, dict):
        raise ConfigError(f"{where}.features: must be a mapping of feature: on|off")
    for key, value in features.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.features.{key}: must be on or off, got {value!r}")
        if not isinstance(key, str) or (key not in FEATURE_ALIASES and "-" not in key):
            raise ConfigError(
                f"{where}.features.{key}: not a feature name (short names: "
                f"{', '.join(sorted(FEATURE_ALIASES))}; or a long ethtool -k name)"
            )
    if nic.get("mtu") is not None:
        number(f"{where}.mtu", nic["mtu"], minimum=68, integer=True)
    channels = _mapping(f"{where}.channels", nic.get("channels"))
    check_keys(f"{where}.channels", channels, set(CHANNEL_KEYS))
    for key, value in channels.items():
        number(f"{where}.channels.{key}", value, minimum=0 if key == "other" else 1, integer=True)
    rss = _mapping(f"{where}.rss", nic.get("rss"))
    check_keys(f"{where}.rss", rss, {"equal", "weights", "default"})
    if len(rss) > 1:
        raise ConfigError(f"{where}.rss: give one of equal, weights or default, not several")
    if "equal" in rss:
        number(f"{where}.rss.equal", rss["equal"], minimum=1, integer=True)
    if "weights" in rss:
        w = rss["weights"]
        if not isinstance(w, list) or not w:
            raise ConfigError(f"{where}.rss.weights: must be a non-empty list of whole numbers")
        for i, v in enumerate(w):
            number(f"{where}.rss.weights[{i}]", v, minimum=0, integer=True)
    if "default" in rss and rss["default"] is not True:
        raise ConfigError(f"{where}.rss.default: must be on")
    for key in ("rps_cpus", "xps_cpus"):
        if nic.get(key) is not None:
            _pattern(f"{where}.{key}", nic[key], _MASK, "all, or a hex CPU mask such as 3 or ff")
    if nic.get("rps_flow_cnt") is not None:
        number(f"{where}.rps_flow_cnt", nic["rps_flow_cnt"], minimum=0, integer=True)
    _settings_block(f"{where}.coalesce", nic.get("coalesce"), COALESCE_KEYS,
                    COALESCE_BOOL_KEYS, minimum=0)
    _settings_block(f"{where}.rings", nic.get("rings"), RING_KEYS, RING_BOOL_KEYS, minimum=1)


def _validate_qdisc(where: str, q: dict[str, Any]) -> None:
    kind = q.get("kind")
    if kind not in QDISC_KEYS:
        raise ConfigError(f"{where}.kind: must be one of {', '.join(QDISC_KEYS)}, got {kind!r}")
    check_keys(where, q, QDISC_KEYS[kind])
    if kind in ("tbf", "htb") and "rate" not in q:
        raise ConfigError(f"{where}.rate: required for {kind} (e.g. 1gbit)")
    if kind == "netem" and not set(q) - {"kind"}:
        raise ConfigError(f"{where}: netem needs at least one of delay, jitter, loss, rate, limit")
    if kind == "netem" and "jitter" in q and "delay" not in q:
        raise ConfigError(f"{where}.jitter: needs delay too")
    for key in ("rate", "ceil"):
        if key in q:
            _pattern(f"{where}.{key}", q[key], _RATE, "1gbit or 10gbit")
    if "burst" in q:
        _pattern(f"{where}.burst", q["burst"], _SIZE, "256kb")
    for key in ("latency", "delay", "jitter"):
        if key in q:
            _pattern(f"{where}.{key}", q[key], _TIME, "10ms")
    if "loss" in q:
        _pattern(f"{where}.loss", q["loss"], _PERCENT, "0.1%")
    if "limit" in q:
        number(f"{where}.limit", q["limit"], minimum=1, integer=True)


def _sysctl_value(where: str, value: Any) -> str:
    if isinstance(value, list) and value:
        return " ".join(str(number(f"{where}[{i}]", v, minimum=0, integer=True))
                        for i, v in enumerate(value))
    if isinstance(value, bool) or not isinstance(value, (int, str)) or str(value).strip() == "":
        raise ConfigError(f"{where}: must be a number, a string or a list of numbers")
    return " ".join(str(value).split())


def _validate(path: Path, data: dict[str, Any]) -> None:
    """Check one file's own keys and values (before ``extends:`` is merged in)."""
    where = str(path)
    check_keys(where, data, {"description", "extends", "tiers", "host_interfaces", "nic",
                             "qdisc", "sysctls", "server"})
    if "tiers" in data:
        tiers = data["tiers"]
        known = TIERS + PFS_TIERS
        if not isinstance(tiers, list) or not tiers or any(t not in known for t in tiers):
            raise ConfigError(
                f"{where}: tiers: must be a non-empty list of {', '.join(known)}, got {tiers!r}"
            )
    if "host_interfaces" in data:
        hi = data["host_interfaces"]
        if (not isinstance(hi, list) or not hi
                or any(not isinstance(i, str) or not re.match(r"^[\w.:@-]{1,15}$", i) for i in hi)):
            raise ConfigError(
                f"{where}: host_interfaces: must be a non-empty list of interface names, got {hi!r}"
            )
    if not isinstance(data.get("nic", {}) or {}, dict):
        raise ConfigError(f"{where}: nic: must be a mapping")
    _validate_nic(f"{where}: nic", data.get("nic") or {})
    if data.get("qdisc") is not None:
        _validate_qdisc(f"{where}: qdisc", _mapping(f"{where}: qdisc", data["qdisc"]))
    sysctls = _mapping(f"{where}: sysctls", data.get("sysctls"))
    for key, value in sysctls.items():
        if not isinstance(key, str) or not _SYSCTL.match(key):
            raise ConfigError(f"{where}: sysctls.{key}: not a sysctl name like net.core.rmem_max")
        _sysctl_value(f"{where}: sysctls.{key}", value)
    server = _mapping(f"{where}: server", data.get("server"))
    check_keys(f"{where}: server", server, set(SERVER_KEYS))
    for key, value in server.items():
        _bool(f"{where}: server.{key}", value)


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
    data = read_yaml(path)
    _validate(path, data)
    parents = data.get("extends") or []
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(f"{path}: extends: must be a mode name or a list of mode names")
    merged: dict[str, Any] = {}
    names: list[str] = []
    for parent in parents:
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
    own = {k: v for k, v in data.items() if k != "extends"}
    return _merge(merged, own), tuple(dict.fromkeys(names))


def load_mode(name: str, modes_dir: Path = MODES_DIR) -> Mode:
    """Load and validate one mode file (by name in modes/, or by path), resolving extends."""
    path = resolve_path(name, modes_dir, "mode")
    data, parents = _resolved(path, modes_dir, (path.resolve(),))
    where = str(path)
    if "tiers" in data and "host_interfaces" in data:
        raise ConfigError(
            f"{where}: tiers and host_interfaces: a mode has one scope; keep only one of them"
        )
    nic = data.get("nic") or {}
    features = nic.get("features") or {}
    knobs = Knobs(
        channels=dict(nic.get("channels") or {}),
        rss=dict(nic.get("rss") or {}),
        rps_cpus=None if nic.get("rps_cpus") is None else str(nic["rps_cpus"]).lower(),
        xps_cpus=None if nic.get("xps_cpus") is None else str(nic["xps_cpus"]).lower(),
        rps_flow_cnt=nic.get("rps_flow_cnt"),
        coalesce=dict(nic.get("coalesce") or {}),
        rings=dict(nic.get("rings") or {}),
        qdisc={k: (str(v) if k != "limit" else v) for k, v in (data.get("qdisc") or {}).items()},
        sysctls={k: _sysctl_value(f"{where}: sysctls.{k}", v)
                 for k, v in (data.get("sysctls") or {}).items()},
    )
    return Mode(
        name=path.stem,
        description=" ".join(str(data.get("description", "")).split()),
        tiers=tuple(data.get("tiers", [] if "host_interfaces" in data else list(TIERS))),
        nic=NicSettings(features=dict(features), mtu=nic.get("mtu")),
        source=str(path),
        host_interfaces=tuple(data.get("host_interfaces") or ()),
        knobs=knobs,
        server=dict(data.get("server") or {}),
        extends=parents,
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


# --------------------------------------------------------------------------- endpoints


def mode_endpoints(mode: Mode) -> list[Endpoint]:
    """Endpoints of a mode's scope: its host interfaces, or the running stack's tier veths."""
    from tierbench import netif

    if mode.host_interfaces:
        return [Endpoint("host", name, None) for name in mode.host_interfaces]
    from tierbench import stack  # needs Docker; imported only for container scope

    containers = stack.tier_containers()
    eps: list[Endpoint] = []
    for tier in mode.tiers:
        if tier not in containers:
            raise NetifError(
                f"mode {mode.name}: tier {tier} has no running container; start the stack "
                "(tierbench run) or check a mode with host_interfaces"
            )
        eps += netif.veth_endpoints(tier, containers[tier].pid)
    return eps


# --------------------------------------------------------------------------- CLI


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


def cmd_modes(args: argparse.Namespace) -> int:
    """``tierbench modes list|show|diff|check``: inspect modes; check changes nothing."""
    from tierbench import knobs

    modes_dir = Path(getattr(args, "modes_dir", None) or MODES_DIR)
    if args.modes_command == "list":
        for m in list_modes(modes_dir):
            scope = ", ".join(m.host_interfaces) if m.host_interfaces else ", ".join(m.tiers)
            restart = " (server restart)" if m.needs_restart else ""
            print(f"{m.name:<24} {m.scope}: {scope}{restart}  {m.description[:60]}")
        return 0
    if args.modes_command == "show":
        mode = load_mode(args.mode, modes_dir)
        text = yaml.safe_dump(mode.as_dict(), sort_keys=False, width=100, allow_unicode=True)
        print(text.rstrip())
        return 0
    if args.modes_command == "diff":
        a, b = load_mode(args.a, modes_dir), load_mode(args.b, modes_dir)
        lines = diff_modes(a, b)
        print("\n".join(lines) if lines else f"{a.name} and {b.name} set the same things")
        return 0
    mode = load_mode(args.mode, modes_dir)
    eps = mode_endpoints(mode)
    problems = knobs.check_mode(mode, eps)
    if problems:
        for p in problems:
            print(f"tierbench: {mode.name}: {p}")
        return 1
    print(f"tierbench: {mode.name}: every setting is possible on "
          f"{', '.join(ep.label for ep in eps)}; nothing was changed")
    return 0


def add_modes_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``modes list|show|diff|check`` to the CLI's subparsers."""
    p = subparsers.add_parser("modes", help="list, show, compare or check modes")
    p.add_argument("--modes-dir", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="modes_command", required=True)
    sub.add_parser("list", help="every mode file with its scope")
    s = sub.add_parser("show", help="a mode with extends resolved")
    s.add_argument("mode")
    d = sub.add_parser("diff", help="what differs between two modes")
    d.add_argument("a")
    d.add_argument("b")
    c = sub.add_parser("check", help="capability check on the real interfaces; changes nothing")
    c.add_argument("mode")
    p.set_defaults(func=cmd_modes)
    return p
