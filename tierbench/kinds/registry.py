"""Finds the workload kinds (every module of this package with a Kind subclass) and loads
experiment files: the one place where an experiment's kind is decided."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path
from typing import Any

from tierbench import kinds as package
from tierbench.config.errors import ConfigError
from tierbench.config.files import EXPERIMENTS_DIR, MODES_DIR, read_yaml, resolve_path
from tierbench.config.models import (Model, name_problem, non_empty_list, number, safe_name, text,
                                     validate, whole)
from tierbench.kinds.contract import Experiment, Kind
from tierbench.modes.model import load_mode_list

DEFAULT_KIND = "web"


class Envelope(Model):
    """The keys every experiment file has, whatever its kind."""

    name: safe_name("dc-single") | None = None
    description: str = ""
    kind: text(r"^[a-z][a-z0-9-]*$", "web") | None = None
    seed: whole(0) = 1
    repetitions: whole(1) = 1
    settle_s: number(0) = 1
    variation_pct: number(0.1, 100) | None = None
    modes: non_empty_list(text(r"^[\w./-]+$", "offloads-on"), "mode names")


@lru_cache(maxsize=1)
def kinds() -> dict[str, Kind]:
    """Every kind, by name (found by importing each module of tierbench.kinds)."""
    found: dict[str, Kind] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Kind) and value is not Kind \
                    and value.__module__ == module.__name__ and value.name:
                found[value.name] = value()
    return dict(sorted(found.items()))


def kind(name: str) -> Kind:
    """The kind of that name."""
    known = kinds()
    if name not in known:
        raise ConfigError(f"no workload kind named {name!r} (known: {', '.join(known)})")
    return known[name]


def kind_of(data: dict[str, Any]) -> str:
    """An experiment file's kind: its `kind:` key, else the kind whose block it has (pfs:, ...),
    else web."""
    if data.get("kind") is not None:
        return str(data["kind"])
    for name, k in kinds().items():
        block = getattr(k, "block", None)
        if block and block in data:
            return name
    return DEFAULT_KIND


def load_experiment(name: str, modes_dir: Path = MODES_DIR) -> Experiment:
    """Load and validate an experiment file (by name in experiments/, or by path)."""
    path = resolve_path(name, EXPERIMENTS_DIR, "experiment")
    data = read_yaml(path, "experiment file")
    where = str(path)
    try:
        k = kind(kind_of(data))
    except ConfigError as exc:
        raise ConfigError(f"{where}: kind: {exc}") from None
    own = set(Envelope.model_fields)
    theirs = {f.alias or n for n, f in k.model.model_fields.items()}
    unknown = sorted(set(map(str, data)) - own - theirs)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: "
                          f"{', '.join(sorted(own | theirs))})")
    env = validate(Envelope, {key: v for key, v in data.items() if key in own}, where)
    if env.name is None and name_problem(path.stem):  # the results folder is named after it
        raise ConfigError(f"{where}: the file's name {path.stem!r} "
                          f"{name_problem(path.stem)}: rename the file or give it a name: key")
    settings = validate(k.model, {key: v for key, v in data.items() if key in theirs}, where)
    exp = Experiment(
        name=env.name or path.stem,
        description=" ".join(env.description.split()),
        source=str(path),
        kind=k.name,
        seed=env.seed,
        repetitions=env.repetitions,
        settle_s=env.settle_s,
        variation_pct=env.variation_pct if env.variation_pct is not None else k.variation_pct,
        modes=load_mode_list(where, data.get("modes"), modes_dir),
        settings=settings,
        raw=data,
    )
    for m in exp.modes:
        unknown_tiers = [t for t in m.tiers if t not in k.tiers]
        if unknown_tiers and not m.host_interfaces:
            raise ConfigError(f"{where}: modes: {m.name} applies to tier {unknown_tiers[0]}, "
                              f"which a {k.name} experiment does not have (tiers: "
                              f"{', '.join(k.tiers)})")
    k.check(exp)
    return exp


def experiment_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of an experiment file of one kind (the common keys and the kind's)."""
    k = kind(name)
    env = Envelope.model_json_schema()
    own = k.model.model_json_schema()
    props = {**env["properties"], **own["properties"]}
    props["kind"] = {"const": k.name, "description": f"{k.name}: {k.description}"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"tierbench experiment ({k.name})",
        "description": f"An experiment file of kind {k.name}: {k.description}. Generated by "
                       "`tierbench schema experiment`; see experiments/README.md.",
        "type": "object",
        "properties": props,
        "required": sorted(set(env.get("required", [])) | set(own.get("required", []))),
        "additionalProperties": False,
        "$defs": {**env.get("$defs", {}), **own.get("$defs", {})},
    }
