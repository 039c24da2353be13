"""Where the checkout's files live, and reading YAML files a user gave us without a traceback."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values

from tierbench.config.errors import ConfigError
from tierbench.config.paths import refusal

ROOT = Path(__file__).resolve().parent.parent.parent
EXPERIMENTS_DIR = ROOT / "experiments"
MODES_DIR = ROOT / "modes"
MAX_FILE_BYTES = 16 * 1024 * 1024  # an experiment, mode or cluster file is a few KB
# A run's own records, read back on --resume: the manifest keeps every point's interface and mode
# state before, during and after (about 0.5 MB a point on the 004 data center's 30 interfaces).
MAX_RECORD_BYTES = 1024 * 1024 * 1024  # parsed, about 8x that in memory


def results_root() -> Path:
    """Where runs are written: $TIERBENCH_RESULTS or results/ in the checkout."""
    return Path(os.environ.get("TIERBENCH_RESULTS", ROOT / "results")).resolve()


def fresh_run_dir(base: Path) -> Path:
    """A new folder base/<UTC time stamp> (base/<stamp>-2, -3, ... when that exists), made
    with its parents; its name is the run's id."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = base / stamp, 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{n}"
    path.mkdir(parents=True)
    return path


# The Compose project of this checkout: every container, network, volume, tmpfs, cgroup and
# state folder of its runs carries it, so that two checkouts on one host or rack (two users, or
# one user's two branches) never take or remove each other's. Stable per checkout: a short hash
# of the checkout's absolute path, unless TIERBENCH_PROJECT (environment, then .env) names it.
PROJECT_ENV = "TIERBENCH_PROJECT"
PROJECT_PREFIX = "tierbench"
PROJECT_NAME = re.compile(r"tierbench(-[a-z0-9][a-z0-9_]{0,30})?")
STATE_ROOT = Path("/run/tierbench")


def dotenv(path: Path | None = None) -> dict[str, str]:
    """The variables the checkout's .env sets (docker compose reads the same file), if there is
    one, parsed by python-dotenv: quotes, `export`, a comment after an unquoted value, ${VAR};
    a key without a value is left out. ConfigError in one sentence when it cannot be read."""
    path = path or ROOT / ".env"
    if not path.is_file():
        return {}
    try:
        values = dotenv_values(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else \
            (exc.strerror or str(exc))
        raise ConfigError(f"{path}: cannot be read ({reason})") from None
    return {k: v for k, v in values.items() if v is not None}


def default_project(root: Path = ROOT) -> str:
    """tierbench-<6 hex digits of the checkout's absolute path's SHA-256>."""
    return f"{PROJECT_PREFIX}-{hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:6]}"


def project_name(root: Path = ROOT) -> str:
    """This checkout's Compose project name (see PROJECT_ENV); ConfigError in one sentence
    when the override is not one tierbench can own."""
    given = os.environ.get(PROJECT_ENV) or dotenv(root / ".env").get(PROJECT_ENV)
    if not given:
        return default_project(root)
    if not PROJECT_NAME.fullmatch(given):
        raise ConfigError(f"{PROJECT_ENV}={given!r} is not a project name tierbench can own: "
                          "give tierbench or tierbench-NAME (NAME: lower case letters, digits "
                          "and '_', at most 31)")
    return given


def state_dir() -> Path:
    """Where this checkout's crash-safe state lives: $TIERBENCH_STATE_DIR, else
    /run/tierbench/<project> (one folder per checkout: its restore snapshot, disk systems,
    database password and tmpfs mount points)."""
    given = os.environ.get("TIERBENCH_STATE_DIR")
    if given and refusal(given, "TIERBENCH_STATE_DIR"):
        raise ConfigError(str(refusal(given, "TIERBENCH_STATE_DIR")))
    return Path(given) if given else STATE_ROOT / project_name()


def read_text(path: Path, what: str = "file", limit: int | None = None) -> str:
    """The text of a file a user gave, as UTF-8; one sentence when it cannot be read as text or
    is larger than `limit` bytes (default MAX_FILE_BYTES)."""
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        if path.is_dir():
            raise ConfigError(f"{path}: is a folder, not a {what}")
        size = path.stat().st_size
        if size > limit:
            raise ConfigError(f"{path}: {size} bytes is far too large for a {what} (at most "
                              f"{limit} bytes); is this the right file?")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except PermissionError:
        raise ConfigError(f"{path}: not readable (permission denied)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in data:
        raise ConfigError(f"{path}: is a binary file, not a {what} (YAML text)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: is not UTF-8 text (byte {exc.start} cannot be decoded); save "
                          f"the {what} as UTF-8") from None


def read_yaml(path: Path, what: str = "file") -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping; every problem is one sentence."""
    text = read_text(path, what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where} ({problem})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping (key: value lines) at the top level")
    return data


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
