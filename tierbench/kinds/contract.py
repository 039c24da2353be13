"""The workload-kind contract: everything the runner and the report know of a kind of work.

A kind (web traces through wrk or Locust, OrangeFS benchmarks, network micro-benchmarks, ...)
is one module in this package with one subclass of :class:`Kind`. It declares

- its experiment settings (a declared model, validated on load, one sentence per problem),
- its factors (the axes of the cross product, in an order that fixes the shuffled run order),
- what it needs brought up for a point (its deployment key) and how to bring that up,
- how it prepares (file sets, traces, seeds: sizes checked against free space first),
- how it runs one point and what it measured (summary values with units, per-second rows),
- its summary columns, its progress line and its report section (figures, tables and the
  paper's reference numbers, as data the report renders).

The runner (tierbench.runner) does everything else the same way for every kind: plan, order,
repetitions, modes applied, verified and restored around each point, 1 Hz sampling, the
summary, the manifest and resume. The report (analysis.report) reads only the result files,
in which the runner writes the kind's report section. Inspired by PerfKitBenchmarker's
GetConfig/Prepare/Run/Cleanup with samples, and flent's declarative test definitions.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, model_validator

from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.models import Model, check, number, text, whole
from tierbench.interfaces.netif import Endpoint
from tierbench.kinds import families
from tierbench.measure.kernelview import is_view_column
from tierbench.measure.sampler import CgroupCpu, CgroupGroup, Sampler, marks_at
from tierbench.modes.model import Mode
from tierbench.placement import model
from tierbench.placement.model import Container, Role
from tierbench.placement.placer import Placer
from tierbench.space import Need
from tierbench.transport import Transport

CLIENT, SERVER = "client", "server"

# A kind's three types (see Kind): its settings model, its deployment's handles, what its
# prepare() returns.
S = TypeVar("S", bound=BaseModel)
I = TypeVar("I")  # noqa: E741 (the deployment's Info)
P = TypeVar("P")


@dataclass(frozen=True)
class Command:
    """A subcommand a kind adds to the tierbench command: its name and one line of help, its
    arguments added to its parser, and what it does (the exit code)."""
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


class RunEnds(TierbenchError):
    """The kind says the run cannot go on (a server stopped for good); one sentence why."""


class PointFailed(TierbenchError):
    """One point could not be measured; the run records the error and goes on."""


@dataclass(frozen=True)
class Column:
    """A summary column the kind writes: name, unit and what it means."""

    name: str
    unit: str = ""
    description: str = ""


@dataclass(frozen=True)
class Point:
    """One measured run: a mode, a repetition and the kind's factor values."""

    index: int
    mode: str
    repetition: int
    factors: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """Directory name of the point: p001, p002, ..."""
        return f"p{self.index:03d}"

    def __getitem__(self, name: str) -> Any:
        return self.factors[name]


class Precision(Model):
    """A precision target (experiment key `precision`, or `tierbench run --precision`): run
    repetitions in blocks (every mode of a condition once per block) until every comparison of
    a mode with the baseline on ``metric`` has a 95 % interval within ±``half_width_pct`` % of
    the estimated ratio (tierbench.stats.precision), or settles ``decision_pct`` (a practical
    threshold: above, below or within it), or ``max_repetitions`` blocks, or ``budget_min`` minutes."""

    metric: Annotated[str, text(r"^[\w.-]+$", "tps")] = "tps"
    half_width_pct: Annotated[float, number(0.1, 100)] = 5.0
    min_repetitions: Annotated[int, whole(3, 1000)] = 8
    max_repetitions: Annotated[int, whole(2, 1000)] = 30
    budget_min: Annotated[float, number(0.01)] | None = None
    # a practical threshold in %: a comparison is also resolved once its interval lies wholly
    # above +threshold, wholly below -threshold or within ±threshold (tierbench.stats.precision)
    decision_pct: Annotated[float, number(0, 1000)] | None = None
    # the bring-ups the first min_repetitions blocks are spread over (later blocks go on in new
    # ones of as many blocks): blocks nested in deployments (tierbench.blocks); 1: one for all
    deployments: Annotated[int, whole(1, 100)] = 2

    @model_validator(mode="after")
    def _ordered(self) -> Precision:
        check(self.min_repetitions <= self.max_repetitions,
              f"min_repetitions ({self.min_repetitions}) must not exceed max_repetitions "
              f"({self.max_repetitions})")
        check(self.deployments <= self.min_repetitions,
              f"deployments ({self.deployments}) must not exceed min_repetitions "
              f"({self.min_repetitions}): each bring-up holds at least one of the first blocks")
        return self


@dataclass
class Experiment(Generic[S]):
    """A resolved experiment file: the common envelope and the kind's validated settings."""

    name: str
    description: str
    source: str
    kind: str
    seed: int
    repetitions: int
    settle_s: float
    modes: list[Mode]
    settings: S
    # the kind itself (the registry's Kind named `kind`), so that no caller looks it up again
    impl: Kind[S, Any, Any] = field(repr=False, compare=False)
    variation_pct: float = 5.0  # run-to-run variation of one point's primary figure (sd/mean)
    precision: Precision | None = None  # blocks until resolved, instead of `repetitions`
    scale: float = 1.0  # --scale: windows, counts and repetitions shortened by this factor
    scaled: list[str] = field(default_factory=list)  # what --scale changed, for the plan
    profile: str | None = None  # --profile categories: CPU by kernel category per point
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    # where it runs: this host, or the cluster given on the command line (made once per run by
    # the command line; the default, Placer(), is this host with nothing brought up)
    placer: Placer = field(default_factory=Placer, repr=False, compare=False)

    def mode(self, name: str) -> Mode:
        """The mode of that name."""
        return next(m for m in self.modes if m.name == name)


@dataclass
class Tier:
    """Containers that play one part in a deployment (loadgen, proxy, pfs-server, ...): their
    interfaces (for modes) and their role (client or server: which modes cover them)."""

    name: str
    role: str
    endpoints: list[Endpoint]
    containers: list[Container] = field(default_factory=list)


@dataclass
class Deployment(Generic[I]):
    """What is up for a deployment key: tiers (modes act on their endpoints), the CPU counters,
    host interfaces and probes (a server's own counters) the sampler reads, and the kind's own
    handles (``info``: a dataclass of the kind's, e.g. kinds.web.stack.WebInfo). ``placer`` is
    the placement it runs on (each kind hands its placer in; by default Placer(), this host),
    which makes the sampler: on a cluster, an agent per node."""

    key: Hashable
    tiers: dict[str, Tier]
    counters: dict[str, CgroupCpu | CgroupGroup | Any]
    ifaces: dict[str, str]
    containers: dict[str, Container] = field(default_factory=dict)
    # None only where I is None (a kind that keeps no handles, e.g. the tests' kinds)
    info: I = cast(Any, None)
    placer: Placer = field(default_factory=Placer, repr=False, compare=False)
    probes: dict[str, Callable[[], dict]] = field(default_factory=dict)

    def sampler(self, out: Path) -> Sampler | Any:
        """A 1 Hz sampler of this deployment's counters, writing JSON lines to ``out``."""
        return self.placer.sampler(out, self.counters, self.ifaces, self.probes)

    def endpoints(self, mode: Mode) -> list[Endpoint]:
        """The endpoints a container-scope mode covers here (its tiers, roles or all; an
        interface that carries several tiers, a cluster node's NIC, once)."""
        return list(dict.fromkeys(ep for t in self.tiers.values() if mode.covers(t.name, t.role)
                                  for ep in t.endpoints))

    def watched(self) -> list[Endpoint]:
        """Every endpoint of every tier (recorded before, during and after each point)."""
        return list(dict.fromkeys(ep for t in self.tiers.values() for ep in t.endpoints))

    def cpu_containers(self, mode: Mode) -> list[tuple[str, Transport, int]] | None:
        """(tier, its host's transport, PID there) of the containers a cpu: mode covers, where
        the placement reaches them so (a cluster's nodes); None where the mode acts behind the
        endpoints' namespaces (one host): Placer.cpu_containers."""
        return self.placer.cpu_containers([(t.name, c) for t in self.tiers.values()
                                           if mode.covers(t.name, t.role) for c in t.containers])

    def host_endpoints(self, mode: Mode) -> list[Endpoint] | None:
        """A host-scope mode's interfaces where this deployment runs."""
        return self.placer.host_endpoints(mode.host_interfaces,
                                          [c for t in self.tiers.values() for c in t.containers])


@dataclass
class PointContext(Generic[S, I, P]):
    """What a kind gets to run one point: the point's folder, the manifest entry it may add to,
    what prepare() returned, a logger for progress, and its window on the point's sampling.
    The runner alone starts the sampler (before run_point) and stops it (after); a kind asks
    for a sample now (:meth:`mark`, :meth:`marks_at`), reads every counter (:meth:`now`),
    closes its window when the measured part is over (:meth:`close_window`) and reads why
    sampling stopped (:attr:`sampling_error`) through the context, never the sampler itself."""

    exp: Experiment[S]
    point: Point
    deployment: Deployment[I]
    dir: Path
    record: dict[str, Any]
    sampler: Sampler  # the runner's: kinds go through the methods below
    prepared: P
    log: Callable[[str], None]

    def mark(self) -> dict[str, Any]:
        """A sample taken now, kept in time order with the 1 Hz ticks: a kind marks the start
        and the middle of a measured window, so that it holds two samples even when a loaded
        host delays the ticks by a second or more."""
        return self.sampler.mark()

    def marks_at(self, instants: Sequence[float]) -> Callable[[], None]:
        """A mark at each wall-clock instant, from a thread, while the kind runs the load in one
        blocking call; returns the function that cancels those not yet due."""
        return marks_at(self.sampler, instants)

    def now(self) -> dict[str, Any]:
        """Every counter read now (not kept as a sample), stamped with the wall clock."""
        return self.sampler.now()

    def close_window(self) -> list[dict[str, Any]]:
        """The measured part is over: sampling stops after one last sample (the runner's stop
        after run_point then does nothing more); every sample taken."""
        return self.sampler.stop()

    @property
    def sampling_error(self) -> str | None:
        """Why sampling stopped before the window closed (a counter that could not be read),
        or None."""
        return self.sampler.error


@dataclass
class PointResult:
    """What one point measured: summary values (the kind's columns), per-second rows, the
    measured window, and an error when the point failed (the run goes on)."""

    values: dict[str, Any] = field(default_factory=dict)
    per_second: list[dict[str, Any]] | None = None
    window: tuple[float, float] | None = None
    error: str | None = None


class Kind(Generic[S, I, P]):
    """One kind of work. Subclasses set ``name``, ``model`` and ``tiers`` and implement
    ``axes``, ``point_seconds``, ``deploy`` and ``run_point``; every other method has a default
    (the plan's and progress lines from the axes, the resolved experiment from the settings,
    the summary's identity columns, the report section from the family file named after the
    kind) that a kind overrides where it knows better. A kind names its three types:
    ``class WebKind(Kind[WebSettings, WebInfo, WebPrepared])``: ``S`` the settings model
    (``model``; what ``exp.settings`` holds), ``I`` the deployment's handles
    (``Deployment.info``, a dataclass of the kind's), ``P`` what :meth:`prepare` returns (and
    :meth:`deploy` and ``PointContext.prepared`` get); None where a kind has none."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # Top-level keys of an experiment file that belong to this kind (validated by ``model``).
    model: ClassVar[type[BaseModel]]
    # The experiment key holding the kind's settings (pfs:, net:; the report's factor order).
    block: ClassVar[str] = ""
    # The experiment key whose presence names this kind in a file without `kind:` (else block:
    # the web kind's traces:); the registry has no default kind.
    key: ClassVar[str] = ""
    # A bare note for the plan's last line: "... plus <bring_up>".
    bring_up: ClassVar[str] = "bring-up"
    # Tier names this kind deploys (modes naming other tiers are refused at load).
    tiers: ClassVar[tuple[str, ...]] = ()
    # Run-to-run variation (sd/mean, %) of a point's primary figure on a quiet host, for the
    # plan's expected confidence intervals; an experiment may state its own (variation_pct).
    variation_pct: ClassVar[float] = 5.0
    # What --scale shortens: dotted paths into the kind's settings (measured windows, request
    # counts, file sizes), each with the least it may become (a window must hold two 1 Hz
    # samples; a count at least a few requests).
    scalable: ClassVar[dict[str, float]] = {}
    # The cluster file's roles the kind brings (name, what runs there, one node or a list,
    # server or client): the registry hands every kind's to the placement, which names none. A
    # role several kinds' services run on is declared alike by each (OrangeFS's by pfs, fs and
    # web: tiers/orangefs.py's ROLES).
    declared_roles: ClassVar[tuple[Role, ...]] = ()
    # The cluster file's roles the kind's services run on (declared by it or another kind); a
    # kind with none does not run on a cluster (its services have no host overlay yet).
    roles: ClassVar[tuple[str, ...]] = ()
    # Subcommands the kind adds to the tierbench command (`tierbench worker`: the web kind's
    # Locust workers for another node's master); the command line adds every kind's.
    commands: ClassVar[tuple[Command, ...]] = ()
    # The options a mode's `server:` block may set (on/off) for the kind's services; changing
    # one restarts the services it concerns. A kind with none refuses a mode that sets any.
    server_options: ClassVar[tuple[str, ...]] = ()
    # The widths the plan's point lines keep a point's factors (`what`) and its mode in.
    plan_widths: ClassVar[tuple[int, int]] = (34, 16)

    # -- experiment -----------------------------------------------------------------------

    def check(self, exp: Experiment[S]) -> None:
        """Cross-checks between settings and modes after validation (raise ConfigError); here:
        a mode's server options are ones the kind's servers have (``server_options``)."""
        self.check_server_options(exp)

    def check_server_options(self, exp: Experiment[S]) -> None:
        """Refuse a mode whose `server:` block names an option the kind's servers lack."""
        for m in exp.modes:
            unknown = sorted(set(m.server) - set(self.server_options))
            if unknown and not self.server_options:
                raise ConfigError(f"{exp.source}: modes: {m.name} sets server options "
                                  f"({', '.join(unknown)}), which the {self.name} kind's "
                                  "services do not have")
            if unknown:
                raise ConfigError(f"{exp.source}: modes: {m.name}: server: unknown key "
                                  f"{unknown[0]!r} (allowed: "
                                  f"{', '.join(sorted(self.server_options))})")

    def resolved(self, exp: Experiment[S]) -> dict[str, Any]:
        """The experiment with every default filled in and modes inlined, for the manifest:
        the envelope, then the kind's settings as validated."""
        return {**self.envelope(exp), **exp.settings.model_dump(mode="json")}

    def envelope(self, exp: Experiment[S]) -> dict[str, Any]:
        """The keys every resolved experiment starts with: name, kind, description, source,
        seed, repetitions, settle time and the modes inlined."""
        return {"name": exp.name, "kind": self.name, "description": exp.description,
                "source": exp.source, "seed": exp.seed, "repetitions": exp.repetitions,
                "settle_s": exp.settle_s, "modes": [m.as_dict() for m in exp.modes]}

    def axes(self, exp: Experiment[S]) -> list[tuple[str, list[Any]]]:
        """The cross product's axes in order, including "mode" (names) and "repetition"."""
        raise NotImplementedError

    def points(self, exp: Experiment[S], seed: int,
               repetitions: list[int] | None = None) -> list[Point]:
        """Every combination of the axes, shuffled with the seed, then ordered so that points
        needing the same deployment run together (see :meth:`order`). ``repetitions`` replaces
        the repetition axis's values (one block of a precision run: its block number)."""
        axes = [(name, list(repetitions) if name == "repetition" and repetitions else values)
                for name, values in self.axes(exp)]
        names = [name for name, _ in axes]
        combos = [dict(zip(names, values)) for values in itertools.product(*(v for _, v in axes))]
        random.Random(seed).shuffle(combos)
        ordered = self.order(exp, combos)
        return [Point(i + 1, c["mode"], c["repetition"], self.point_factors(c))
                for i, c in enumerate(ordered)]

    def point_factors(self, combo: dict[str, Any]) -> dict[str, Any]:
        """A point's factor values from one combination of the axes."""
        return {k: v for k, v in combo.items() if k not in ("mode", "repetition")}

    def order(self, exp: Experiment[S], combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled combinations grouped by deployment, groups in order of first appearance."""
        groups: dict[Hashable, list[dict[str, Any]]] = {}
        for c in combos:
            groups.setdefault(self.deployment_key(exp, c), []).append(c)
        return [c for g in groups.values() for c in g]

    def deployment_key(self, exp: Experiment[S], combo: dict[str, Any] | Point) -> Hashable:
        """What must be up for a point (hashable); points with equal keys share a deployment."""
        return None

    def modes(self, exp: Experiment[S]) -> list[Mode]:
        """Every mode a point may apply (checked against the deployment before the first
        point): the experiment's, unless the kind layers them over others (`point_mode`)."""
        return exp.modes

    def point_mode(self, exp: Experiment[S], point: Point) -> Mode:
        """The mode the runner applies for a point: the one it names, unless the kind layers it
        over another (the net kind's cases: 000 §4.3's cumulative socket options under it)."""
        return exp.mode(point.mode)

    def with_warm_pass(self, exp: Experiment[S]) -> Experiment[S]:
        """The experiment with one unmeasured pass over its working set before counting (a
        study row's recommended scale: shortened runs that must not measure a cold cache);
        unchanged where the kind has no cache to warm."""
        return exp

    # -- plan -----------------------------------------------------------------------------

    def point_seconds(self, exp: Experiment[S]) -> float:
        """Estimated wall time of one point."""
        raise NotImplementedError

    def plan_header(self, exp: Experiment[S], points: list[Point]) -> list[str]:
        """The plan's first lines: what runs and how long a point takes."""
        return [f"{self.plan_head(exp, points)}; {self.description}",
                f"per point: about {self.point_seconds(exp):.0f} s"]

    def plan_head(self, exp: Experiment[S], points: list[Point]) -> str:
        """The start of the plan's first line: the experiment, its points and their order."""
        return (f"experiment {exp.name} ({exp.source}): {len(points)} points, order shuffled "
                f"with seed {exp.seed}")

    def deployment_line(self, exp: Experiment[S], point: Point, first: bool) -> str:
        """The plan line before a point whose deployment differs from the previous one."""
        return f"  -- {self.deployment_key(exp, point)}"

    def point_line(self, exp: Experiment[S], point: Point) -> str:
        """One plan line per point: its factors, mode, repetition and time."""
        what, mode = self.plan_widths
        return (f"  {point.id}  {self.what(exp, point):<{what}} mode={point.mode:<{mode}} "
                f"rep={point.repetition}  ~{self.point_seconds(exp):.0f} s")

    def what(self, exp: Experiment[S], point: Point) -> str:
        """A point's factors in a few words (plan and progress lines)."""
        return " ".join(f"{name}={value}" for name, value in point.factors.items())

    # -- run ------------------------------------------------------------------------------

    def needs(self, exp: Experiment[S], points: list[Point]) -> list[Need]:
        """What the run will write where (file sets, seeds, storage, scratch), checked against
        free space and memory at plan and at run, before anything is written."""
        return []

    def cluster_roles(self, exp: Experiment[S]) -> list[str]:
        """The cluster roles this experiment's services run on (its kind's ``roles``)."""
        return list(self.roles)

    def preflight(self, exp: Experiment[S], points: list[Point]) -> None:
        """Refuse before anything is written or started (sizes vs free space, images,
        host features), one sentence per problem."""

    def prepare(self, exp: Experiment[S], run_dir: Path) -> P:
        """Write what the points need (traces, file-set specs, seeds) under run_dir (a kind
        whose P is None keeps this one)."""
        return cast(P, None)

    def deploy(self, exp: Experiment[S], key: Hashable, prepared: P,
               previous: Deployment[I] | None, point: Point) -> Deployment[I]:
        """Bring up what ``key`` needs for ``point`` (the first point that needs it), replacing
        ``previous`` when there is one."""
        raise NotImplementedError

    def redeploy(self, exp: Experiment[S], key: Hashable, prepared: P,
                 previous: Deployment[I], point: Point) -> Deployment[I]:
        """A fresh bring-up of what ``key`` needs (a precision run's next deployment): every
        service removed, then brought up as for the first point."""
        exp.placer.down()
        return self.deploy(exp, key, prepared, None, point)

    def provenance(self, exp: Experiment[S], deployment: Deployment[I]) -> dict[str, Any]:
        """Versions and settings of this kind's software, for the manifest."""
        return {}

    def run_point(self, ctx: PointContext[S, I, P]) -> PointResult:
        """Measure one point (the mode is applied and the runner's sampler runs: marks and the
        window's end go through ``ctx``)."""
        raise NotImplementedError

    def after_point(self, exp: Experiment[S], point: Point, row: dict[str, Any],
                    deployment: Deployment[I]) -> None:
        """Raise RunEnds when the run cannot go on after this point."""

    # -- results --------------------------------------------------------------------------

    def identity(self, exp: Experiment[S], point: Point) -> dict[str, Any]:
        """The values that identify a point in the summary: point, factors, mode, repetition."""
        return {"point": point.id, **point.factors, "mode": point.mode,
                "repetition": point.repetition}

    def columns(self, exp: Experiment[S]) -> list[Column]:
        """summary.csv's columns in order (identity ones first); values a point has beyond
        them follow, sorted by name, then `error`."""
        factors = [name for name, _ in self.axes(exp) if name not in ("mode", "repetition")]
        return [Column(c) for c in ("point", *factors, "mode", "repetition")]

    def point_title(self, exp: Experiment[S], point: Point) -> str:
        """How the progress line names a point."""
        return f"{point.id} {self.what(exp, point)} {point.mode} rep {point.repetition}"

    def brief(self, row: dict[str, Any]) -> str:
        """One progress line of a measured point: its error, else its first figures (the
        kind's: the runner's per-CPU view and counters left to summary.csv)."""
        return failed(row) or ", ".join(
            f"{k} {v:.4g}" for k, v in row.items()
            if isinstance(v, float) and not is_view_column(k))

    def clean(self, where: Placer) -> list[str]:
        """Stop whatever of this kind a crashed run left running on ``where`` (`tierbench
        clean`); notes."""
        return []

    def end_note(self, rows: list[dict[str, Any]]) -> str | None:
        """One line printed at the end of a run (e.g. how many points were client-bound)."""
        return None

    def finish(self, exp: Experiment[S], deployment: Deployment[I]) -> list[str]:
        """At the end of a run, whatever ended it: stop the services it started that admit
        whoever connects and that no later run reuses (the next run brings them up anew), so
        that they listen only while points need them; notes of what was stopped."""
        return []

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The report section as data (analysis/README.md: the report spec), from the resolved
        experiment (so that `tierbench report` can give it to runs whose manifest lacks it):
        the kind's family file (the longest family name the experiment's name starts with,
        else the one named after the kind), its factors in the experiment file's order."""
        spec = families.load(families.by_name(self.name, str(resolved.get("name", "")),
                                              self.name))
        block = resolved.get(self.block) if self.block else resolved
        spec["order"] = families.order(block if isinstance(block, dict) else {},
                                       {f: f for f in spec.get("factors", [])})
        return spec

    def running(self, where: Placer) -> Deployment[I] | None:
        """What of this kind is up right now on ``where`` (for `tierbench modes check`), or
        None."""
        return None


def tool_versions(where: Placer, container: Container, tools: dict[str, list[str]],
                  missing: str = "unknown") -> dict[str, str]:
    """Each tool's version as a container reports it, for the manifest: the first line its
    command prints (some print it with a non-zero status: iperf -v), or ``missing`` when the
    command could not be started (status 126 or 127) or printed nothing."""
    out = {}
    for tool, argv in tools.items():
        done = where.exec(container, argv, timeout=30)
        lines = (done.stdout + done.stderr).strip().splitlines()
        out[tool] = lines[0] if lines and done.returncode not in (126, 127) else missing
    return out


def end_if_stopped(where: Placer, point: Point, row: dict[str, Any],
                   containers: list[Container], what: str = "") -> None:
    """End the run (RunEnds, one sentence) when any of ``containers`` stopped during the point
    (``what`` says what they are: "receiver "), with the point's error and where their logs
    are; on a cluster, a node whose Docker engine stopped answering ends it too."""
    try:
        running = {c.id for c in where.replicas()}
    except model.StackError as exc:
        raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
    down = [c for c in containers if c.id not in running]
    if down:
        raise RunEnds(f"{what}{', '.join(c.name for c in down)} stopped during {point.id}"
                      + (f" ({row['error']})" if row.get("error") else "")
                      + f": see `docker{where.context_arg(down[0].service)} logs "
                      f"{down[0].name}`; the run ends here")


def failed(row: dict[str, Any]) -> str | None:
    """The progress line of a point that failed (None: it did not)."""
    return f"FAILED ({row['error']})" if row.get("error") else None


def log(msg: str) -> None:
    """A progress line on stderr (stdout is for what a command prints as its result)."""
    print(msg, file=sys.stderr, flush=True)
