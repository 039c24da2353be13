"""A paper's claims as data: checkable statements over named conditions of a run's results.

A study file (experiments/studies/<id>.yml) lists, per catalogue row, the claims its paper makes
in each figure, in the project's own words, each with its source (study, section, figure). A
claim compares the values of one metric (a summary.csv column: ``tps``, ``mean_ms``, ...) under
named **conditions**: a condition is a filter on the results' columns (``{mode: offloads-on,
trace: single-4k}``), and its value in one repetition is the mean of the points it matches in
that repetition. Every claim is a contrast of the logs of such means:

- ``direction``: A is above B (``higher: true``) or below it; a change within ``negligible``
  (a fraction: 0.05 = 5 %) either way counts as none.
- ``ratio``: A / B is ``ratio`` within ``tolerance`` (a fraction: the band ratio / (1 + t) to
  ratio x (1 + t)).
- ``trend``: over ``factor`` from ``levels[0]`` to ``levels[1]``, A rises (``higher: true``) or
  falls; with ``b``, the ratio A / B does (a gap that shrinks: ``higher: false`` when A is above
  B).
- ``order``: the conditions of ``order`` from highest to lowest, each above the next.

``where`` is added to every condition. Pydantic only (no pandas): the study files' loader in
tierbench validates claims with this model; ``analysis.claims`` evaluates them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Value = str | int | float | bool
Condition = dict[str, Value | list[Value]]
KINDS = ("direction", "ratio", "trend", "order")


class Claim(BaseModel):
    """One checkable statement of a paper about one figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=r"^[a-z0-9][\w.-]*$")]
    figure: Annotated[str, Field(min_length=1)]
    source: Annotated[str, Field(pattern=r"^\d{3} .+")]  # "004 §6.2, Fig. 15"
    says: Annotated[str, Field(min_length=10)]
    experiment: Annotated[str, Field(pattern=r"^[\w.-]+$")]
    metric: Annotated[str, Field(pattern=r"^[\w.]+$")]
    kind: Literal["direction", "ratio", "trend", "order"]
    a: Condition | None = None
    b: Condition | None = None
    where: Condition = Field(default_factory=dict)
    higher: bool = True
    ratio: Annotated[float, Field(gt=0)] | None = None
    tolerance: Annotated[float, Field(gt=0, le=10)] = 0.1
    negligible: Annotated[float, Field(ge=0, lt=1)] = 0.05
    factor: str | None = None
    levels: list[Value] | None = None
    order: list[Condition] | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Claim:
        need = {"direction": ("a", "b"), "ratio": ("a", "b", "ratio"),
                "trend": ("a", "factor", "levels"), "order": ("order",)}[self.kind]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} claim needs {', '.join(missing)}")
        if self.kind == "trend":
            assert self.levels is not None and self.factor is not None
            if len(self.levels) != 2 or str(self.levels[0]) == str(self.levels[1]):
                raise ValueError("a trend claim's levels are two different values of its "
                                 "factor (from, to)")
            if self.factor in (self.a or {}) or self.factor in (self.b or {}):
                raise ValueError(f"a trend claim's conditions cannot fix its factor "
                                 f"{self.factor!r}")
        if self.kind == "order" and len(self.order or []) < 2:
            raise ValueError("an order claim lists at least two conditions")
        if self.kind != "ratio" and self.ratio is not None:
            raise ValueError("only a ratio claim has a ratio")
        return self


class Claims(BaseModel):
    """The claims of one catalogue row (what a study file's ``claims:`` holds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    claims: list[Claim]

    @model_validator(mode="after")
    def _unique(self) -> Claims:
        ids = [c.id for c in self.claims]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"claim id {twice[0]!r} is used twice")
        return self
