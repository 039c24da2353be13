"""One transport (ARCHITECTURE.md): no module of tierbench, analysis or workloads starts a
process but tierbench/transport.py (no `subprocess`, `os.system`, `os.popen`, `os.exec*`,
`os.spawn*`, `os.posix_spawn*`, `pty.spawn` or asyncio's subprocesses), not even the programs
that run on cluster nodes (they go there in the node bundle, with the transport:
tests/test_nodeapp.py); ruff's banned-api rule (TID251 in pyproject.toml) says the same while
code is written; and a command that does not finish is one error, transport.DidNotFinish,
however it was run."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from tierbench import transport
from tierbench.placement import nodes
from tierbench.placement.model import Container
from tierbench.placement.nodes import NodeError
from tierbench.placement.local import LocalPlacer
from tierbench.transport import LOCAL, PIPE, DidNotFinish, Transport, TransportError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tierbench", "analysis", "workloads")
ALLOWED = {"tierbench/transport.py"}
STARTERS = {"os": ("system", "popen", "exec", "spawn", "posix_spawn", "fork"),
            "pty": ("spawn", "fork"), "asyncio": ("create_subprocess",)}


def process_starts(path: Path) -> list[tuple[int, str]]:
    """(line, what) of every way a module has to start a process by itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.split(".")[0] == "subprocess"]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = (node.module or "").split(".")[0]
            if module == "subprocess":
                found.append((node.lineno, f"from {node.module} import ..."))
            found += [(node.lineno, f"from {module} import {a.name}") for a in node.names
                      if a.name.startswith(STARTERS.get(module, ()))]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.attr.startswith(STARTERS.get(node.value.id, ()))):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_only_the_transport_starts_processes() -> None:
    bad = [f"{rel}:{line}: {what}"
           for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
           if (rel := str(path.relative_to(ROOT))) not in ALLOWED
           for line, what in process_starts(path)]
    assert not bad, "start processes through tierbench.transport:\n" + "\n".join(bad)


def test_ruff_bans_subprocess_with_the_same_exceptions() -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "TID251" in lint["extend-select"]
    assert "subprocess" in lint["flake8-tidy-imports"]["banned-api"]
    ignored = {f for f, rules in lint["per-file-ignores"].items() if "TID251" in rules}
    assert ignored == ALLOWED | {"tests/**"}


def test_the_check_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nimport subprocess as sp\nfrom subprocess import run\n"
                      "from os import execvp\nos.system('x')\nos.path.join('a')\n"
                      "import asyncio\nasyncio.create_subprocess_exec('x')\n"
                      "from tierbench.transport import run_argv\n")
    assert [line for line, _ in process_starts(module)] == [2, 3, 4, 5, 8]


def test_a_command_that_does_not_finish_is_one_error() -> None:
    """Run to its end or started and waited for, here or on a node: DidNotFinish (a
    TransportError with the seconds), never subprocess.TimeoutExpired or an exit code."""
    node = Transport("node1", ("sh", "-c"))
    for run in (lambda: LOCAL.run(["sleep", "5"], timeout=0.2),
                lambda: node.run("sleep 5", timeout=0.2),
                lambda: transport.run_argv(["sleep", "5"], timeout=0.2)):
        with pytest.raises(DidNotFinish) as info:
            run()
        assert isinstance(info.value, TransportError) and info.value.timeout == 0.2
    proc = LOCAL.popen(["sleep", "5"], stdin=PIPE, stdout=PIPE)
    try:
        with pytest.raises(DidNotFinish, match="did not finish within 0.2 s"):
            proc.wait(timeout=0.2)
        with pytest.raises(DidNotFinish):
            proc.communicate(timeout=0.2)
    finally:
        proc.kill()
        proc.wait()
    done = LOCAL.popen(["sh", "-c", "echo a; exit 3"], stdout=PIPE, text=True)
    assert done.communicate(timeout=10) == ("a\n", None) and done.returncode == 3


def test_a_container_command_that_does_not_finish_raises(monkeypatch) -> None:
    """The placer's docker and exec raise DidNotFinish too (docker once answered exit 124)."""
    monkeypatch.setattr(Transport, "docker", lambda self, *args: ["sleep", "5"])
    monkeypatch.setattr(Transport, "exec_argv", lambda self, *a, **k: ["sleep", "5"])
    box = Container(service="s", id="cid", name="n", pid=1, image="i", image_id="x",
                    cpuset="")
    with pytest.raises(DidNotFinish):
        LocalPlacer().docker(box, "inspect", timeout=0.2)
    with pytest.raises(DidNotFinish):
        LocalPlacer().exec(box, ["true"], timeout=0.2)


def test_here_or_on_a_node_is_one_call() -> None:
    """nodes.run_at runs here for no node, with run_on_node's checks and wording."""
    assert nodes.run_at(None, "echo a; echo b >&2").stdout == "a\n"
    assert nodes.run_at(None, "exit 3", check=False).returncode == 3
    with pytest.raises(NodeError, match=r"^this host: `echo oops >&2; exit 3` failed with exit code 3: oops$"):
        nodes.run_at(None, "echo oops >&2; exit 3")
    with pytest.raises(NodeError, match=r"^this host: `sleep 5`: .*did not finish within 0.2 s"):
        nodes.run_at(None, "sleep 5", timeout=0.2)
