"""Report families as data: one YAML file per family in this folder (`<name>.yml`, with its
`kind:` and `family:`), the report section a kind stores in every run's manifest.json
("report"). The keys are analysis/README.md's ("The report spec"); the papers' numbers in
`reference` carry the study and figure they come from. `tierbench plan` and `tierbench run`
check a kind's section with the analysis' model of a report spec before anything starts, and the
tests render every family.

A kind picks its family (by the experiment's name: `by_name`, or by its test), loads it
(`load`) and adds what the experiment decides: the `order` of its factors, optional columns.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

from tierbench import kinds
from tierbench.config.errors import ConfigError
from tierbench.config.files import read_yaml

FOLDER = Path(__file__).resolve().parent


def folders() -> list[Path]:
    """Where family files are: this folder, then the `families/` folder beside any other
    folder the kinds package is found in (a kind kept outside the checkout, as the tests'
    new kind is: tests/data/newkind/)."""
    others = [Path(p) / "families" for p in list(kinds.__path__)[1:]]
    return [FOLDER, *(f for f in others if f.is_dir())]


@lru_cache(maxsize=None)
def read(name: str) -> dict[str, Any]:
    """The family file <name>.yml as read (shared: `load` hands out copies)."""
    path = next((f / f"{name}.yml" for f in folders() if (f / f"{name}.yml").is_file()),
                FOLDER / f"{name}.yml")
    if not path.is_file():
        raise ConfigError(f"no report family named {name!r} in {FOLDER} (known: "
                          f"{', '.join(names())})")
    data = read_yaml(path, "report family")
    for key in ("kind", "family"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ConfigError(f"{path}: {key} must name the family's {key}")
    return data


def names(kind: str | None = None) -> list[str]:
    """The family files' names (sorted), all or those of one kind."""
    every = sorted({p.stem for f in folders() for p in f.glob("*.yml")})
    return every if kind is None else [n for n in every if read(n)["kind"] == kind]


def load(name: str) -> dict[str, Any]:
    """A fresh copy of family <name>, for a kind to complete."""
    return copy.deepcopy(read(name))


def by_name(kind: str, experiment: str, default: str) -> str:
    """The longest name of a family of `kind` that the experiment's name starts with, else
    `default`."""
    return max((n for n in names(kind) if experiment.startswith(n)), key=len, default=default)


def order(block: dict[str, Any], keys: dict[str, str]) -> dict[str, list[Any]]:
    """The report's `order`: for each factor (``keys``: factor -> the experiment key that
    lists its values) of which the experiment lists more than one value, those values in the
    file's order."""
    return {factor: list(block[key]) for factor, key in keys.items()
            if isinstance(block.get(key), list) and len(block[key]) > 1}
