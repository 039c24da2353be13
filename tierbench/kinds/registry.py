"""Finds the workload kinds (every module or subpackage of this package that defines or exports
a Kind subclass) and loads experiment files: the one place where an experiment's kind is
decided."""

from __future__ import annotations

import importlib
import importlib.util
import math
import pkgutil
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from tierbench import kinds as package
from tierbench.config.errors import ConfigError
from tierbench.config.files import EXPERIMENTS_DIR, MODES_DIR, read_yaml, resolve_path
from tierbench.config.models import (Model, name_problem, non_empty_list, number, safe_name, text,
                                     validate, whole)
from tierbench.kinds.contract import Experiment, Kind, Precision
from tierbench.modes.model import Mode, ModeFile, load_mode_list
from tierbench.placement.model import Roles
from tierbench.placement.placer import Placer


class Envelope(Model):
    """The keys every experiment file has, whatever its kind."""

    name: Annotated[str, safe_name("dc-single")] | None = None
    description: str = ""
    kind: Annotated[str, text(r"^[a-z][a-z0-9-]*$", "web")] | None = None
    seed: Annotated[int, whole(0)] = 1
    repetitions: Annotated[int, whole(1)] = 1
    settle_s: Annotated[float, number(0)] = 1
    variation_pct: Annotated[float, number(0.1, 100)] | None = None
    precision: Precision | None = None
    # a mode's name, or a+b: modes applied one over another (a platform and an offload setting)
    modes: Annotated[list[str], non_empty_list(text(r"^[\w./-]+(\+[\w./-]+)*$", "offloads-on"),
                                               "mode names")]


@lru_cache(maxsize=1)
def kinds() -> dict[str, Kind]:
    """Every kind, by name (found by importing each module of tierbench.kinds, and for a
    subpackage its module ``kind``: a kind's class is defined there; the subpackage's
    ``__init__`` imports nothing, so its modules import each other without a cycle)."""
    found: dict[str, Kind] = {}
    for info in pkgutil.iter_modules(package.__path__):
        name = f"{package.__name__}.{info.name}"
        if info.ispkg:
            if importlib.util.find_spec(f"{name}.kind") is None:
                continue  # a package of helpers (families), no kind
            name += ".kind"
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Kind) and value is not Kind
                    and value.name and value.__module__ == module.__name__):
                found[value.name] = value()
    return dict(sorted(found.items()))


@lru_cache(maxsize=1)
def roles() -> Roles:
    """Every role a cluster file may place: the roles each kind declares (``Kind.declared_roles``),
    handed to the placement, which names none (a role two kinds declare is declared alike)."""
    return Roles.merged(r for k in kinds().values() for r in k.declared_roles)


def kind(name: str) -> Kind:
    """The kind of that name."""
    known = kinds()
    if name not in known:
        raise ConfigError(f"no workload kind named {name!r} (known: {', '.join(known)})")
    return known[name]


def kind_of(data: dict[str, Any]) -> str:
    """An experiment file's kind: its `kind:` key, else the kind whose key it has (traces:,
    pfs:, ...: ``Kind.key`` or ``Kind.block``); no kind is the default."""
    if data.get("kind") is not None:
        return str(data["kind"])
    keys = {name: k.key or k.block for name, k in kinds().items() if k.key or k.block}
    for name, key in keys.items():
        if key in data:
            return name
    raise ConfigError("none given: name the experiment's kind (kind: "
                      f"{', '.join(kinds())}) or give the key of one ("
                      f"{', '.join(f'{key}: {name}' for name, key in keys.items())})")


def load_experiment(name: str, modes_dir: Path = MODES_DIR,
                    placer: Placer | None = None) -> Experiment:
    """Load and validate an experiment file (by name in experiments/, or by path), to run on
    ``placer`` (the command line makes it; None: this host with nothing brought up, Placer(),
    enough to plan and check it)."""
    path = resolve_path(name, EXPERIMENTS_DIR, "experiment")
    data = read_yaml(path, "experiment file")
    return experiment_from(data, str(path), path.stem,
                           lambda where: load_mode_list(where, data.get("modes"), modes_dir),
                           placer)


def experiment_from(data: dict[str, Any], where: str, default_name: str,
                    modes: Callable[[str], list[Mode]],
                    placer: Placer | None = None) -> Experiment:
    """Validate an experiment's data (as an experiment file holds it) into an Experiment that
    runs on ``placer`` (None: this host with nothing brought up, Placer()); ``modes(where)``
    gives its modes (the files its `modes:` names, or modes made in memory, e.g. by `tierbench
    advise`, whose names `modes:` then lists)."""
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
    if env.precision is not None and "repetitions" in data:
        raise ConfigError(f"{where}: repetitions: a precision target decides the repetitions "
                          "(precision.min_repetitions, max_repetitions): remove repetitions")
    if env.name is None and name_problem(default_name):  # the results folder is named after it
        raise ConfigError(f"{where}: the file's name {default_name!r} "
                          f"{name_problem(default_name)}: rename the file or give it a name: key")
    settings = validate(k.model, {key: v for key, v in data.items() if key in theirs}, where)
    exp = Experiment(
        name=env.name or default_name,
        description=" ".join(env.description.split()),
        source=where,
        kind=k.name,
        seed=env.seed,
        repetitions=env.precision.min_repetitions if env.precision else env.repetitions,
        settle_s=env.settle_s,
        variation_pct=env.variation_pct if env.variation_pct is not None else k.variation_pct,
        modes=modes(where),
        settings=settings,
        impl=k,
        precision=env.precision,
        raw=data,
        placer=placer or Placer(),
    )
    for m in exp.modes:
        unknown_tiers = [t for t in m.tiers if t not in k.tiers]
        if unknown_tiers and not m.host_interfaces:
            raise ConfigError(f"{where}: modes: {m.name} applies to tier {unknown_tiers[0]}, "
                              f"which a {k.name} experiment does not have (tiers: "
                              f"{', '.join(k.tiers)})")
    k.check(exp)
    if exp.precision is not None:
        check_precision(exp)
    return exp


def with_precision(exp: Experiment, **given: Any) -> Experiment:
    """The experiment with its precision target set or changed by the command line's options
    (those not None); unchanged when none is given."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return exp
    base = exp.precision.model_dump() if exp.precision is not None else {}
    exp.precision = validate(Precision, {**base, **given}, "command line: --precision")
    exp.repetitions = exp.precision.min_repetitions
    check_precision(exp)
    return exp


def with_scale(exp: Experiment, factor: float | None, *,
               keep_repetitions: bool = False) -> Experiment:
    """The experiment shortened (factor < 1) or lengthened: every setting its kind lists as
    scalable, times the factor but never below its least value, and the repetitions (at least
    2 where there were more than 1; kept with ``keep_repetitions``: a study row's recommended
    scale). Recorded as ``scale``; the plan lists each change."""
    if factor is None or factor == 1:
        return exp
    if not 0 < factor <= 100:
        raise ConfigError(f"--scale must be a number above 0 and at most 100, got {factor:g}")
    k = kind(exp.kind)
    changes = []
    for path, least in k.scalable.items():
        before = _value(exp.settings, path)
        exp.settings = _scaled(exp.settings, path.split("."), factor, least)
        after = _value(exp.settings, path)
        if before != after:
            changes.append(f"{path} {before} -> {after}")
    if exp.precision is None and exp.repetitions > 1 and not keep_repetitions:
        before = exp.repetitions
        exp.repetitions = max(2, math.ceil(exp.repetitions * factor))
        if exp.repetitions != before:
            changes.append(f"repetitions {before} -> {exp.repetitions}")
    exp.scale = factor
    exp.scaled = [f"scaled by {factor:g} (--scale"
                  + (" recommended, repetitions kept" if keep_repetitions else "") + "): "
                  + ("; ".join(changes) or "nothing this kind can shorten")]
    return exp


def _scaled(model: Any, path: list[str], factor: float, least: float) -> Any:
    """A copy of a settings model with the value at ``path`` scaled (None values stay)."""
    value = getattr(model, path[0], None)
    if value is None:
        return model
    if len(path) > 1:
        return model.model_copy(update={path[0]: _scaled(value, path[1:], factor, least)})
    if isinstance(value, list):
        new: Any = [_scaled_number(v, factor, least) for v in value]
    else:
        new = _scaled_number(value, factor, least)
    return model.model_copy(update={path[0]: new})


def _scaled_number(value: float, factor: float, least: float) -> float:
    scaled = max(least, value * factor) if value > least else value
    return math.ceil(scaled) if isinstance(value, int) and not isinstance(value, bool) \
        else round(scaled, 3)


def _value(model: Any, path: str) -> Any:
    for part in path.split("."):
        model = getattr(model, part, None)
    return model


def check_precision(exp: Experiment) -> None:
    """A precision target needs two modes to compare and a metric the kind's summary has."""
    assert exp.precision is not None
    if len(exp.modes) < 2:
        raise ConfigError(f"{exp.source}: precision: needs at least two modes to compare "
                          f"(modes: {', '.join(m.name for m in exp.modes)})")
    columns = [c.name for c in kind(exp.kind).columns(exp)]
    if exp.precision.metric not in columns:
        raise ConfigError(f"{exp.source}: precision.metric: {exp.precision.metric!r} is not a "
                          f"summary column of a {exp.kind} experiment (e.g. "
                          f"{', '.join(c for c in columns if c not in ('point', 'mode'))[:200]})")


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


def mode_schema() -> dict[str, Any]:
    """The JSON Schema of a mode file, its `server:` options those of every kind that has some
    (the modes floor names none; each kind checks its own when an experiment uses the mode)."""
    schema = ModeFile.model_json_schema()
    options = sorted({o for k in kinds().values() for o in k.server_options})
    schema["properties"]["server"] = {
        "type": "object", "additionalProperties": False,
        "description": "server options (on/off); changing one restarts the services it concerns",
        "properties": {o: {"type": "boolean"} for o in options}}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "tierbench mode",
            **schema}
