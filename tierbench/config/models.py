"""Declared models for the files users write (pydantic), with messages in tierbench's voice.

Every model forbids unknown keys and every field type below checks its value itself, so a
problem reads "FILE: load.users: must be a whole number >= 1, got 0", one sentence naming the
file and key, and the same models give the JSON Schema users can point their editor at.

A field names its type twice, for the type checker and for the file: ``seed: Annotated[int,
whole(0)] = 1`` is an int to mypy, and pydantic validates it (and shows it in the JSON Schema)
as the type ``whole(0)`` makes (a :class:`Rule`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError

from tierbench.config.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

# Control characters (a newline, a tab, an escape...): never in a name or a path a file gives,
# where a trailing newline would otherwise slip past a pattern's `$` into a command or a path.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def control_problem(value: str) -> str | None:
    """Why ``value`` cannot be a name or a path because of a control character, or None."""
    found = CONTROL.search(value)
    if found is None:
        return None
    return (f"holds a control character ({found.group()!r} at position {found.start()}); "
            "names and paths may not")


def problem(message: str, sub: str | None = None, **ctx: Any) -> PydanticCustomError:
    """A validation problem with our own wording ({name} fields filled from ctx); ``sub`` is a
    key below the value being validated that the problem is about (it joins the key path)."""
    if sub is not None:
        ctx["sub"] = sub
    return PydanticCustomError("tierbench", message, ctx)


class Model(BaseModel):
    """Base of every file model: unknown keys are refused, naming the allowed ones."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise problem("must be a mapping (key: value), got {got}", got=_short(data))
        allowed = {f.alias or n for n, f in cls.model_fields.items()}
        unknown = sorted(set(map(str, data)) - allowed)
        if unknown:
            raise problem("unknown key {key} (allowed: {allowed})", key=repr(unknown[0]),
                          allowed=", ".join(sorted(allowed)))
        return data


@dataclass(frozen=True, eq=False)
class Rule:
    """How a field's value is checked, as the metadata of its ``Annotated`` type (its only
    metadata): ``runtime``, the type pydantic validates the value as (the annotated type is
    what the type checker sees: int for whole(), float for number(), str for text())."""

    runtime: Any

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        return handler.generate_schema(self.runtime)


def runtime(item: Any) -> Any:
    """The type pydantic validates as: a Rule's, else the type itself."""
    return item.runtime if isinstance(item, Rule) else item


def made(form: Any, *args: Any) -> Any:
    """``form[args]``, a type made at run time from values (a Literal of given strings, a list
    of a Rule's type), which a type checker cannot read as a type."""
    return form[args if len(args) > 1 else args[0]]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"from {lo:g} to {hi:g}"
    if lo is not None:
        return f">= {lo:g}"
    return f"<= {hi:g}" if hi is not None else ""


def whole(lo: int | None = None, hi: int | None = None) -> Rule:
    """A whole number (not a bool) within [lo, hi]."""
    def check(value: Any) -> Any:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
            raise problem("must be a whole number {bound}, got {got}",
                          bound=_bound(lo, hi), got=_short(value))
        return value
    return Rule(Annotated[int, Field(ge=lo, le=hi), BeforeValidator(check)])


def number(lo: float | None = None, hi: float | None = None) -> Rule:
    """A number (int or float, not a bool) within [lo, hi]."""
    def check(value: Any) -> Any:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
            raise problem("must be a number {bound}, got {got}", bound=_bound(lo, hi),
                          got=_short(value))
        return value
    schema: dict[str, Any] = {"type": "number"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    return Rule(Annotated[int | float, BeforeValidator(check), WithJsonSchema(schema)])


def choice(*values: str) -> Rule:
    """One of the given strings."""
    def check(value: Any) -> Any:
        if value not in values:
            raise problem("must be one of {values}, got {got}", values=", ".join(values),
                          got=_short(value))
        return value
    return Rule(made(Annotated, made(Literal, *values), BeforeValidator(check)))


def flag() -> Rule:
    """on/off (YAML booleans)."""
    def check(value: Any) -> Any:
        if not isinstance(value, bool):
            raise problem("must be on or off, got {got}", got=_short(value))
        return value
    return Rule(Annotated[bool, BeforeValidator(check)])


def text(pattern: str | None = None, example: str = "", min_length: int = 1) -> Rule:
    """A string (matching pattern when given)."""
    compiled = re.compile(pattern) if pattern else None

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise problem("must be a string{like}, got {got}",
                          like=f" like {example}" if example else "", got=_short(value))
        value = str(value)
        why = control_problem(value)
        if why:
            raise problem("{why}, got {got}", why=why, got=_short(value))
        if len(value) < min_length or (compiled and not compiled.fullmatch(value)):
            raise problem("must look like {example}, got {got}", example=example or pattern,
                          got=_short(value))
        return value
    extra: dict[str, Any] = {"pattern": pattern} if pattern else {}
    return Rule(Annotated[str, Field(min_length=min_length, **extra), BeforeValidator(check)])


# A name that becomes part of a path (an experiment's results folder, a trace's file): letters,
# digits, '_' and '-', in parts joined by single dots, so never '..', '/' or a leading dot.
NAME = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
NAME_MAX = 100


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot name a file (see NAME), or None."""
    if len(value) > NAME_MAX:
        return f"is longer than {NAME_MAX} characters"
    if control_problem(value):
        return control_problem(value)
    if not re.fullmatch(NAME, value):
        return ("may hold only letters, digits, '.', '_' and '-', and never '..' or a leading "
                "or trailing '.' (it names files)")
    return None


def safe_name(example: str) -> Rule:
    """A name that becomes part of a path (NAME)."""
    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise problem("must be a name like {example}, got {got}", example=example,
                          got=_short(value))
        value = str(value)
        why = name_problem(value)
        if why:
            raise problem("{why}, got {got}", why=why, got=_short(value))
        return value
    return Rule(Annotated[str, Field(pattern=NAME, max_length=NAME_MAX), BeforeValidator(check)])


def one_or_many(item: Any, what: str = "value") -> Rule:
    """One value or a non-empty list of them (always a list after validation); ``item`` a type
    or a Rule."""
    def wrap(value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise problem("must be a {what} or a non-empty list of them", what=what)
            return value
        return [value]
    item = runtime(item)
    one = TypeAdapter(item).json_schema()
    schema = {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}]}
    return Rule(made(Annotated, made(list, item), BeforeValidator(wrap), WithJsonSchema(schema)))


def non_empty_list(item: Any, what: str) -> Rule:
    """A non-empty list (of `what`); ``item`` a type or a Rule."""
    def check(value: Any) -> Any:
        if not isinstance(value, list) or not value:
            raise problem("must be a non-empty list of {what}", what=what)
        return value
    return Rule(made(Annotated, made(list, runtime(item)), BeforeValidator(check)))


def location(loc: tuple[Any, ...]) -> str:
    """('traces', 0, 'size') -> 'traces[0].size' (pydantic's internal labels dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z_][\w-]*|[\w.-]+", part) and \
                not part.startswith(("function-", "list[", "json-or-python")):
            out += ("." if out else "") + part
    return out


def message(exc: ValidationError, where: str) -> str:
    """The first problem of a ValidationError as one sentence: 'WHERE: key.path: problem'."""
    err = exc.errors(include_url=False)[0]
    key = location(tuple(err["loc"]))
    sub = (err.get("ctx") or {}).get("sub")
    if sub:
        key = f"{key}.{sub}" if key else str(sub)
    msg = err["msg"]
    if err["type"] == "missing":
        msg = "required"
    elif err["type"] in ("string_type", "str_type"):
        msg = f"must be a string, got {_short(err.get('input'))}"
    elif err["type"] in ("list_type",):
        msg = f"must be a list, got {_short(err.get('input'))}"
    elif err["type"] in ("dict_type", "model_type"):
        msg = f"must be a mapping (key: value), got {_short(err.get('input'))}"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif err["type"] not in ("tierbench",):
        msg = msg[0].lower() + msg[1:] if msg else msg
    return f"{where}: {key}: {msg}" if key else f"{where}: {msg}"


def validate(model: type[M], data: Any, where: str) -> M:
    """``model`` validated from ``data``; ConfigError with one sentence naming where and key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(message(exc, where)) from None


def check(condition: bool, msg: str) -> None:
    """Raise a validation problem (inside a model validator) unless condition holds."""
    if not condition:
        raise problem(msg.replace("{", "{{").replace("}", "}}"))


Checker = Callable[[Any], Any]
