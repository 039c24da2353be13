"""Shared helpers of the file schemas: the error class, YAML reading and value checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("loadgen", "proxy", "web")
# The OrangeFS tier's sides (compose/pvfs.yml): the clients, and the metadata + I/O servers.
PFS_TIERS = ("pfs-client", "pfs-server")


class ConfigError(Exception):
    """An experiment or mode file that cannot be used; the message names the file and key."""


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def check_keys(where: str, data: dict[str, Any], allowed: set[str]) -> None:
    """Refuse keys of ``data`` not in ``allowed``, naming the first unknown one."""
    unknown = sorted(set(map(str, data)) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def number(where: str, value: Any, *, minimum: float, integer: bool = False,
           maximum: float | None = None) -> Any:
    """Return ``value`` if it is a (whole) number >= minimum (and <= maximum when given), else
    raise ConfigError."""
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not ok or value < minimum or (maximum is not None and value > maximum):
        kind = "a whole number" if integer else "a number"
        bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{where}: must be {kind} {bound}, got {value!r}")
    return value


def resolve_path(name: str, folder: Path, what: str) -> Path:
    """A file given by path, or by bare name inside folder (with .yml added)."""
    path = Path(name)
    if path.suffix in (".yml", ".yaml") or path.exists():
        return path
    candidate = folder / f"{name}.yml"
    if candidate.exists():
        return candidate
    known = ", ".join(sorted(p.stem for p in folder.glob("*.yml")))
    raise ConfigError(f"no {what} named {name!r} (known: {known})")
