"""The import graph matches ARCHITECTURE.md: floors import only floors below them, there is no
import cycle (lazy imports included), no private name is used across modules, and the analysis
package imports nothing of tierbench or workloads. Also: every shipped experiment's plan is the
one stored in tests/data/plans/ (the points, their order and the time estimate)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tierbench import runner
from tierbench.kinds import registry

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tierbench", "analysis", "workloads")


def modules() -> dict[str, Path]:
    """Every module of our packages, by dotted name (a package is its __init__)."""
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(target module, names imported from it, line) of every import in a module."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    out.append((full, [], node.lineno))
                else:
                    out.append((base, [alias.name], node.lineno))
    return [(t, n, line) for t, n, line in out if t in MODULES]


def graph() -> dict[str, set[str]]:
    return {name: {t for t, _, _ in imports(name, path) if t != name}
            for name, path in MODULES.items()}


def floors() -> list[tuple[int, str]]:
    """(floor, package prefix) rows of ARCHITECTURE.md's table."""
    rows = []
    for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows += [(int(cells[0]), p) for p in re.findall(r"`([\w.]+)`", cells[2])]
    return rows


def floor_of(module: str) -> tuple[int, str]:
    """The floor of a module and the package prefix that put it there (longest match)."""
    best = max(((len(p), f, p) for f, p in floors()
                if module == p or module.startswith(p + ".")), default=None)
    if best is None:
        raise AssertionError(f"{module} is in no layer of ARCHITECTURE.md's table")
    return best[1], best[2]


def test_the_floor_table_is_readable() -> None:
    """No cell of the floor table over about 400 characters (the detail is in the section below
    it and in tierbench/README.md)."""
    long = [(line.split("|")[2].strip(), len(cell.strip()))
            for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines()
            if re.match(r"\| \d+ \|", line) for cell in line.split("|") if len(cell.strip()) > 420]
    assert not long, long


def test_every_module_has_a_floor() -> None:
    for name in MODULES:
        floor_of(name)


def test_imports_go_down_the_floors() -> None:
    bad = []
    for name, targets in graph().items():
        f, pkg = floor_of(name)
        for t in targets:
            tf, tpkg = floor_of(t)
            if tf > f or (tf == f and tpkg != pkg):
                bad.append(f"{name} (floor {f}) imports {t} (floor {tf})")
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    g = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_no_private_names_across_modules() -> None:
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for target, names, line in imports(name, path):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}:{line} imports {target}.{n}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in MODULES:
                        aliases[a.asname or a.name] = full
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in MODULES:
                        aliases[a.asname or a.name] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and aliases[node.value.id] != name:
                bad.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


def test_analysis_reads_result_files_only() -> None:
    """analysis imports nothing of tierbench or workloads but the statistics it shares with the
    runner's stopping rule (tierbench.stats, on the ground floor)."""
    bad = [f"{name} imports {t}" for name, targets in graph().items()
           if name.split(".")[0] == "analysis" for t in targets
           if t.split(".")[0] in ("tierbench", "workloads")
           and not t.startswith("tierbench.stats")]
    assert not bad, "\n".join(bad)
    assert "tierbench.stats.precision" in graph()["analysis.tables"]


def kind_lookups(path: Path) -> list[int]:
    """Lines where a module looks an experiment's kind up again by its name
    (``registry.kind(x.kind)``, ``kind(x.kind)``)."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.args
            and (isinstance(node.func, ast.Attribute) and node.func.attr == "kind"
                 or isinstance(node.func, ast.Name) and node.func.id == "kind")
            and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "kind"]


def test_a_loaded_experiment_carries_its_kind(tmp_path: Path) -> None:
    """Past the registry, an experiment's kind is ``exp.impl`` (set when it is loaded), never
    looked up again by its name: the experiment goes down the calls, not back to the registry."""
    bad = [f"{name}:{line}" for name, path in MODULES.items()
           if name != "tierbench.kinds.registry" for line in kind_lookups(path)]
    assert not bad, bad
    module = tmp_path / "m.py"
    module.write_text("def f(exp):\n    return registry.kind(exp.kind).points(exp)\n")
    assert kind_lookups(module) == [2]


# Imports made inside a function (lazy) of one of our modules by a module of another package:
# only the analysis package's readers and report, from the commands that write or read results
# (pandas, pyarrow and matplotlib take seconds to load, which every other command would pay).
# ARCHITECTURE.md "Lazy imports" lists the same.
LAZY_ENTRY_POINTS = {
    ("tierbench.runner", "analysis.load"): "the report at the end of a run (write_report)",
    ("tierbench.runner", "analysis.report"): "the report at the end of a run (write_report)",
    ("tierbench.study", "analysis.study"): "a study's report",
    ("tierbench.study", "analysis.claims"): "a study's claims",
    ("tierbench.cli", "analysis.claims"): "tierbench claims",
    ("tierbench.cli", "analysis.runs"): "tierbench runs",
    ("tierbench.cli", "analysis.compare"): "tierbench compare",
    ("tierbench.cli", "analysis.load"): "tierbench compare",
    ("tierbench.advise.run", "analysis.advise"): "the advice of an advise run",
    ("tierbench.advise.confirm", "analysis.advise"): "the advice's confirmation",
}


def lazy_imports(name: str, path: Path) -> set[tuple[str, str]]:
    """(module, target) of every import inside a function of a module of ours of another
    package than the module's own."""
    tree = ast.parse(path.read_text(), str(path))
    inner = {n.lineno for fn in ast.walk(tree)
             if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    own = floor_of(name)[1]
    return {(name, t) for t, _, line in imports(name, path)
            if line in inner and floor_of(t)[1] != own}


def test_no_lazy_imports_across_floors() -> None:
    """A module imports what it uses at its top (the stopping rule's statistics included), but
    for the analysis package's entry points listed above; an import kept inside a function
    for its start-up cost (scipy) stays within one package (tierbench.stats.quantiles)."""
    found = set().union(*(lazy_imports(name, path) for name, path in MODULES.items()))
    assert found <= set(LAZY_ENTRY_POINTS), sorted(found - set(LAZY_ENTRY_POINTS))


def test_the_lazy_import_check_can_fail(tmp_path: Path) -> None:
    """An import of another package inside a function is found; at the top it is not."""
    module = tmp_path / "m.py"
    module.write_text("from tierbench.kinds import registry\n\n"
                      "def f():\n    from analysis import tables\n    return tables\n")
    assert lazy_imports("tierbench.blocks", module) == {("tierbench.blocks", "analysis.tables")}


def test_the_command_line_starts_without_scipy_or_pandas() -> None:
    """The stopping rule's statistics are imported at the runner's top, and cost no start-up:
    scipy comes at the first quantile, pandas only with the analysis entry points above."""
    code = ("import sys, tierbench.cli; "
            "print(sorted(m for m in ('scipy', 'pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A cycle, an upward import and a private name are each caught by the helpers above."""
    g = {"a": {"b"}, "b": {"a"}}
    seen: list[str] = []

    def walk(n: str, path: list[str]) -> None:
        for m in g[n]:
            if m in path:
                seen.append(m)
                return
            walk(m, path + [m])

    walk("a", ["a"])
    assert seen == ["a"]
    assert floor_of("tierbench.cli")[0] > floor_of("tierbench.runner")[0] > \
        floor_of("tierbench.kinds.web")[0] > floor_of("tierbench.placement.compose")[0] > \
        floor_of("tierbench.modes.apply")[0] > floor_of("tierbench.interfaces.netif")[0] > \
        floor_of("tierbench.config.models")[0]
    with pytest.raises(AssertionError, match="no layer"):
        floor_of("elsewhere.module")


def closure(g: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` reaches through its imports (itself aside)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for t in g.get(todo.pop(), set()) - seen:
            seen.add(t)
            todo.append(t)
    return seen - {start}


def concrete_placers() -> set[str]:
    """The modules that bring services up: those defining a subclass of Placer (this host's,
    a cluster's) and Compose's (compose.py, which this host's placer drives)."""
    found = {"tierbench.placement.compose"}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "Placer" for b in node.bases):
                found.add(name)
    return found


def test_the_placer_interface_imports_no_concrete_placer() -> None:
    """placement/placer.py (the interface the kinds call) and placement/model.py (what they
    hand it and get back) reach no placer and not Compose, however indirectly."""
    concrete = concrete_placers()
    assert {"tierbench.placement.local", "tierbench.placement.cluster"} <= concrete
    g = graph()
    for module in ("tierbench.placement.placer", "tierbench.placement.model"):
        assert not closure(g, module) & concrete, (module, closure(g, module) & concrete)


def test_the_placer_check_can_fail() -> None:
    """An indirect import of a concrete placer is found."""
    g = {"p": {"m"}, "m": {"c"}, "c": set()}
    assert closure(g, "p") & {"c"} == {"c"}
    assert closure(g, "c") == set()


# What a module of tierbench.kinds may import of the placement: the interface it calls and the
# model it hands it and gets back (ARCHITECTURE.md, "Where services run: the placement"). The
# disk systems and OrangeFS are the shared tiers' (tierbench.tiers), space checks tierbench.space.
KIND_PLACEMENT = ("tierbench.placement.placer", "tierbench.placement.model")


def placement_imports(g: dict[str, set[str]]) -> list[str]:
    """Every import by a module of tierbench.kinds of a placement module other than the
    interface and the model (lazy imports included)."""
    return [f"{name} imports {t}" for name, targets in sorted(g.items())
            if name == "tierbench.kinds" or name.startswith("tierbench.kinds.")
            for t in sorted(targets)
            if (t == "tierbench.placement" or t.startswith("tierbench.placement."))
            and t not in KIND_PLACEMENT]


def test_kinds_import_only_the_placer_and_the_model() -> None:
    """Kinds reach the placement through one seam: the Placer interface and the placement's
    model; never Compose, a concrete placer, the cluster file or a node's commands."""
    bad = placement_imports(graph())
    assert not bad, "\n".join(bad)


def test_the_kinds_placement_check_can_fail(tmp_path: Path) -> None:
    """An import of Compose or of this host's placer by a kind's module is caught, in a
    function too; of the interface, the model or a tier, or by a module outside
    tierbench.kinds, it is not."""
    g = {"tierbench.kinds.a.x": {"tierbench.placement.compose", "tierbench.placement.placer",
                                 "tierbench.placement.model", "tierbench.tiers.disks"},
         "tierbench.kinds.registry": {"tierbench.placement.local"},
         "tierbench.runner": {"tierbench.placement.local"}}
    assert placement_imports(g) == ["tierbench.kinds.a.x imports tierbench.placement.compose",
                                    "tierbench.kinds.registry imports tierbench.placement.local"]
    module = tmp_path / "m.py"
    module.write_text("from tierbench.placement import model, placer\n\n"
                      "def f():\n    from tierbench.placement import compose\n"
                      "    return compose\n")
    found = {"tierbench.kinds.a.m": {t for t, _, _ in imports("tierbench.kinds.a.m", module)}}
    assert placement_imports(found) == ["tierbench.kinds.a.m imports tierbench.placement.compose"]


def kind_packages() -> dict[str, str]:
    """Each kind's own modules' prefix, by kind name, from the registry: the package of its
    class's module ``kind`` (tierbench.kinds.web), or the module itself for a one-module kind
    (tierbench.kinds.disk)."""
    out = {}
    for name, kind in registry.kinds().items():
        module = type(kind).__module__
        out[name] = module.removesuffix(".kind") if module.endswith(".kind") else module
    return out


def kind_of_module(module: str, packages: dict[str, str]) -> str | None:
    """The kind a module belongs to (None: no kind's, e.g. the contract or a shared tier)."""
    return next((k for k, p in packages.items()
                 if module == p or module.startswith(p + ".")), None)


def other_kinds_imported(module_kind: str, g: dict[str, set[str]],
                         packages: dict[str, str]) -> list[str]:
    """Every import by one kind's modules of another kind's module."""
    return [f"{name} imports {t} (the {kind_of_module(t, packages)} kind's)"
            for name, targets in sorted(g.items())
            if kind_of_module(name, packages) == module_kind
            for t in sorted(targets) if kind_of_module(t, packages) not in (None, module_kind)]


@pytest.mark.parametrize("kind", sorted(registry.kinds()))
def test_no_kind_imports_another(kind: str) -> None:
    """Kinds are sealed: what two kinds share is on a floor below them (tierbench.tiers: the
    OrangeFS cluster), never in one of them."""
    bad = other_kinds_imported(kind, graph(), kind_packages())
    assert not bad, "\n".join(bad)


def test_the_command_line_imports_no_kind() -> None:
    """tierbench.cli reaches kinds through the registry (a kind's own subcommands:
    Kind.commands), never a kind's module."""
    packages = kind_packages()
    bad = [t for t in graph()["tierbench.cli"] if kind_of_module(t, packages)]
    assert not bad, bad


def test_the_sealed_kind_checks_can_fail() -> None:
    """An import of another kind's module is caught; of the contract or a tier it is not."""
    packages = {"a": "tierbench.kinds.a", "b": "tierbench.kinds.b"}
    g = {"tierbench.kinds.a.x": {"tierbench.kinds.b.y", "tierbench.kinds.contract",
                                 "tierbench.tiers.orangefs", "tierbench.kinds.a.z"},
         "tierbench.kinds.b.y": set()}
    assert other_kinds_imported("a", g, packages) == \
        ["tierbench.kinds.a.x imports tierbench.kinds.b.y (the b kind's)"]
    assert other_kinds_imported("b", g, packages) == []
    assert kind_packages()["web"] == "tierbench.kinds.web"
    assert kind_packages()["disk"] == "tierbench.kinds.disk"


# Names in placement modules that look like a kind's but are the placement's own: the variables
# it gives every compose file and the stack's password it makes.
PLACEMENT_OWN = {
    "SERVERS_CGROUP": "the servers' parent cgroup, set for every bring-up (compose.py)",
    "TIERBENCH_NODE_DIR": "this checkout's folder in the cluster's workdir on a node, set for "
                          "every bring-up (cluster.py)",
    "TIERBENCH_TAG": "the images' tag (compose.py)",
    "DB_PASSWORD": "the stack's password, made at bring-up for any service that reads it "
                   "(access.py)",
}


def compose_names() -> set[str]:
    """Every service the shipped compose files define and every variable they read."""
    found: set[str] = set()
    for path in [ROOT / "docker-compose.yml", *sorted((ROOT / "compose").glob("*.yml"))]:
        text = path.read_text()
        block = re.search(r"^services:\n((?:[ #].*\n|\n)*)", text, re.M)
        if block:
            found |= set(re.findall(r"^  ([\w.-]+):", block.group(1), re.M))
        found |= set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    return found


def named_strings(path: Path, words: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every string in a module's code (docstrings aside) that is one of
    ``words``, f-strings' literal parts included."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and node.value in words]


def test_placement_names_no_kind() -> None:
    """No placement module names a kind's role (the kinds declare them: Kind.declared_roles),
    a service of the compose files or a variable they read: placement takes what it needs
    of them as data (the cluster file's Roles, a Services spec's cpusets and admissions)."""
    words = (set(registry.roles().names) | compose_names()) - set(PLACEMENT_OWN)
    assert {"web", "pfs_io", "fs-server", "PROXY_CPUS", "APP_CLIENTS"} <= words
    bad = [f"{name}:{line} names {text!r}" for name, path in MODULES.items()
           if floor_of(name)[1] == "tierbench.placement"
           for line, text in named_strings(path, words)]
    assert not bad, "\n".join(bad)


def test_the_kind_name_check_can_fail(tmp_path: Path) -> None:
    """A role or a service named in code is caught; in a docstring it is not."""
    module = tmp_path / "m.py"
    module.write_text('"""Runs on web."""\nROLE = "web"\nNAME = f"{ROLE}-x"\n'
                      'def f():\n    """The proxy."""\n    return ("proxy", f"pvfs-io{1}")\n')
    assert named_strings(module, {"web", "proxy", "pvfs-io1"}) == [(2, "web"), (6, "proxy")]




def sampler_uses(path: Path) -> list[int]:
    """Lines where a module reaches an object's ``sampler`` attribute."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "sampler"]


def test_only_the_runner_drives_the_sampler(tmp_path: Path) -> None:
    """The runner starts and stops a point's sampler; a kind marks, reads counters and closes
    its window through the point context (PointContext.mark, marks_at, now, close_window),
    never the sampler itself."""
    bad = [f"{name}:{line} uses the sampler" for name, path in MODULES.items()
           if name.startswith("tierbench.kinds.") and name != "tierbench.kinds.contract"
           for line in sampler_uses(path)]
    assert not bad, "\n".join(bad)
    module = tmp_path / "m.py"
    module.write_text("def run(ctx):\n    ctx.mark()\n    return ctx.sampler.stop()\n")
    assert sampler_uses(module) == [3]


def cluster_reads(path: Path) -> list[int]:
    """Lines where a module reads an object's ``cluster`` attribute (a placer's cluster file)."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "cluster"]


def test_no_kind_asks_whether_it_runs_on_a_cluster(tmp_path: Path) -> None:
    """A kind never branches on "here or a node": its host commands go through the placer's
    transports (Placer.host, Placer.hosts), its load-time checks ask Placer.here, its plan
    words come from the placer (Placer.network_words, Placer.placed_words); no module of
    tierbench.kinds reads a placer's ``cluster``."""
    bad = [f"{name}:{line} reads .cluster" for name, path in MODULES.items()
           if name.startswith("tierbench.kinds.") for line in cluster_reads(path)]
    assert not bad, "\n".join(bad)
    module = tmp_path / "m.py"
    module.write_text("def f(exp, where):\n    x = where.host('web')\n"
                      "    return exp.placer.cluster is None or x\n")
    assert cluster_reads(module) == [3]


EXPERIMENTS = sorted(p.stem for p in (ROOT / "tests" / "data" / "plans").glob("*.txt"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_plans_are_unchanged(name: str) -> None:
    """The points of every shipped experiment, in order, as stored (update the stored copy
    only for an intended change, and say so in the commit)."""
    stored = (ROOT / "tests" / "data" / "plans" / f"{name}.txt").read_text()
    plan = "\n".join(runner.plan_lines(registry.load_experiment(name))) + "\n"
    assert plan.replace(f"{ROOT}/", "<checkout>/") == stored


def test_every_shipped_experiment_has_a_stored_plan() -> None:
    shipped = sorted(p.stem for p in (ROOT / "experiments").glob("*.yml"))
    assert shipped == EXPERIMENTS
