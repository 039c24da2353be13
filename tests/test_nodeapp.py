"""tierbench's node bundle (tierbench/nodeapp.py): the programs that run on cluster nodes (the
rollback guard's agent, the sampling agent) go there as one zip application of the package's own
files, put in a private folder and run with ``python3 -I BUNDLE PROGRAM ARGS``, never as source
spliced into ``python3 -c``. Here: what the bundle holds and that it runs without tierbench
installed, where it is put, and the commands the guard and the sampling agent run on a node."""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tierbench import nodeapp
from tierbench.interfaces.netif import NetifError
from tierbench.interfaces import cpu
from tierbench.measure import agent
from tierbench.modes import cpus, deadman, guard
from tierbench.transport import LOCAL, CompletedProcess, Transport

ROOT = Path(__file__).resolve().parent.parent


def bundle_modules() -> dict[str, str]:
    """The bundle's Python files by module name, read from the zip itself."""
    with zipfile.ZipFile(io.BytesIO(nodeapp.bundle())) as zf:
        return {name[:-3].replace("/", ".").removesuffix(".__init__"): zf.read(name).decode()
                for name in zf.namelist() if name.endswith(".py")}


def test_the_bundle_imports_only_itself_and_the_standard_library() -> None:
    """Each module of the bundle is the checkout's file, and imports only the standard
    library and the bundle's other modules, in the grammar of the oldest python3 it allows."""
    modules = bundle_modules()
    assert set(modules) >= {"__main__", "tierbench", "tierbench.transport",
                            "tierbench.modes.deadman", "tierbench.measure.nodesampler"}
    for rel in nodeapp.FILES:
        assert modules["tierbench." + rel[:-3].replace("/", ".")] == (
            ROOT / "tierbench" / rel).read_text()
    bad = []
    for name, text in modules.items():
        for node in ast.walk(ast.parse(text, name, feature_version=nodeapp.MIN_PYTHON)):
            found = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or "."] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{name} imports {n}" for n in found
                    if n not in modules and n.split(".")[0] not in sys.stdlib_module_names
                    and n != "__future__"]
    assert not bad, bad
    assert set(nodeapp.PROGRAMS.values()) <= set(modules)


def test_the_bundle_runs_without_tierbench_installed(tmp_path: Path) -> None:
    """A copy of the bundle in an empty folder, run by the plain python3 with -I: its usage
    names its programs; a program it does not have is refused."""
    path = tmp_path / nodeapp.NAME
    path.write_bytes(nodeapp.bundle())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(["python3", "-I", str(path)], capture_output=True, text=True,
                          timeout=30, cwd=tmp_path, env=env)
    assert done.returncode == 1 and "{deadman,sample,cpu,pids}" in done.stderr, done.stderr
    done = subprocess.run(["python3", "-I", str(path), "deadman"], capture_output=True,
                          text=True, timeout=30, cwd=tmp_path, env=env)
    assert done.returncode == 2 and "deadman arm FOLDER PLAN_JSON" in done.stderr, done.stderr


def test_an_old_python_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / nodeapp.NAME
    path.write_bytes(nodeapp.bundle())
    program = ("import runpy, sys\nsys.version_info = (3, 9, 2)\nsys.version = '3.9.2 (x)'\n"
               f"sys.argv = [{str(path)!r}, 'sample', '{{}}']\nrunpy.run_path(sys.argv[0])\n")
    done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip() == ("tierbench's node programs need python3 3.10 or newer; "
                                   "this node has 3.9.2")


def test_the_bundle_goes_into_a_private_folder_of_its_own(tmp_path: Path) -> None:
    """put_argv: a fresh folder (mode 0700) under the parent given, holding the bundle only;
    another put makes another folder; a parent that does not exist: nothing printed."""
    argv = nodeapp.put_argv(str(tmp_path), "tierbench-x.")
    pattern = nodeapp.folder_pattern(str(tmp_path), "tierbench-x.")
    folders = []
    for _ in range(2):
        done = LOCAL.run(argv, input=nodeapp.bundle(), text=False, timeout=30)
        folder = done.stdout.decode().strip()
        assert done.returncode == 0 and pattern.match(folder), (folder, done.stderr)
        assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
        assert os.listdir(folder) == [nodeapp.NAME]
        assert Path(folder, nodeapp.NAME).read_bytes() == nodeapp.bundle()
        folders.append(folder)
    assert folders[0] != folders[1] and Path(folders[0]).parent == tmp_path
    done = LOCAL.run(nodeapp.put_argv(str(tmp_path / "none"), "tierbench-x."),
                     input=nodeapp.bundle(), text=False, timeout=30)
    assert done.returncode != 0 and not done.stdout.strip()
    assert not pattern.match(f"{tmp_path}/tierbench-x.a/../../etc")
    assert not pattern.match(f"{tmp_path}/other.abc")


class Recorder:
    """A node's transport that records each command (argv, input) and answers from a list."""

    def __init__(self, answers: list[tuple], remote: bool = True) -> None:
        self.calls: list[tuple[list[str], object]] = []
        self.answers = answers
        self.remote, self.name = remote, "node1" if remote else None

    def run(self, argv: list[str], *, timeout: float, input: object = None,
            text: bool = True) -> CompletedProcess:
        self.calls.append((list(argv), input))
        rc, out, *err = self.answers.pop(0)
        return CompletedProcess(argv, rc, out, err[0] if err else type(out)())


def test_the_guard_puts_the_bundle_then_arms_its_agent_with_argv() -> None:
    folder = "/run/tierbench-guard.AbC123xyz0"
    commands = [{"argv": ["ip", "link", "set", "dev", "eth0", "mtu", "1500"], "what": "w",
                 "pid": None, "netns_ino": None, "enter": True}]
    node = Recorder([(0, (folder + "\n").encode()), (0, folder + "\n")])
    g = guard.Guard(30.0)
    assert g.start(node, commands) == folder  # type: ignore[arg-type]
    (put, given), (arm, none) = node.calls
    assert put == ["sh", "-c", nodeapp.PUT, "sh", "/run", deadman.PREFIX]
    assert given == nodeapp.bundle() and none is None
    assert arm[:6] == ["python3", "-I", f"{folder}/{nodeapp.NAME}", "deadman", "arm", folder]
    assert json.loads(arm[6]) == {"timeout_s": 30.0, "commands": commands}
    assert len(arm) == 7  # the plan is an argument, not source
    here = Recorder([(0, f"/tmp/x/{deadman.PREFIX}abc\n".encode()), (0, "nope\n"), (0, "")],
                    remote=False)
    with pytest.raises(NetifError, match=r"^the rollback guard could not start on this host "
                                         r"\(python3 is needed there\): nope$"):
        guard.Guard(5.0, base="/tmp/x").start(here, [])  # type: ignore[arg-type]
    assert here.calls[1][0][0] == sys.executable  # this host: this interpreter
    assert here.calls[2][0] == ["rm", "-rf", "--", f"/tmp/x/{deadman.PREFIX}abc"]


def test_the_guard_refuses_a_folder_it_did_not_ask_for() -> None:
    """A put that prints anything but a fresh folder under the base: nothing run, nothing
    removed."""
    node = Recorder([(0, b"/etc\n")])
    with pytest.raises(NetifError, match=r"^the rollback guard could not start on node1 "
                                         r"\(/run writable by the SSH user is needed there\)"):
        guard.Guard(30.0).start(node, [])  # type: ignore[arg-type]
    assert len(node.calls) == 1


def test_the_sampling_agent_is_started_with_argv(tmp_path: Path) -> None:
    """agent_argv: the bundle put under /tmp on the node, then its `sample` program run with
    the configuration as one JSON argument by sh, which removes the folder afterwards."""
    folder = f"/tmp/{agent.BUNDLE_PREFIX}Zz09abcdef"
    node = Recorder([(0, folder.encode() + b"\n")])
    config = {"containers": {"web": 42}, "ifaces": {"web:eth0": "eth1"}, "interval": 1.0}
    argv = agent.agent_argv(node, config)  # type: ignore[arg-type]
    assert node.calls == [(["sh", "-c", nodeapp.PUT, "sh", "/tmp", agent.BUNDLE_PREFIX],
                           nodeapp.bundle())]
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sh", "python3", folder, "sample",
                                                     json.dumps(config)]
    # sh removes the folder once the program ended, whatever its exit code
    box = tmp_path / "box"
    box.mkdir()
    (box / nodeapp.NAME).write_bytes(nodeapp.bundle())
    done = LOCAL.run([*argv[:4], "python3", str(box), "sample", "not json"], timeout=30)
    assert done.returncode == 1 and "JSONDecodeError" in done.stderr and not box.exists()
    with pytest.raises(agent.AgentError, match="^/tmp: Permission denied$"):
        agent.agent_argv(Recorder([(1, b"", b"/tmp: Permission denied\n")]), config)  # type: ignore[arg-type]


def test_one_off_calls_put_run_and_remove_the_bundle_in_one_command(tmp_path: Path) -> None:
    """oneshot_argv: the CPU settings' and the tiers' processes' calls on a node; nothing is
    left in the parent afterwards, whatever the program answered."""
    node = Transport("nodec", ("sh", "-c"))
    me = os.getpid()
    argv = nodeapp.oneshot_argv("python3", str(tmp_path), "tierbench-pids.", "pids",
                                json.dumps([["tier", me]]))
    done = node.run(argv, input=nodeapp.bundle(), text=False, timeout=30)
    assert done.returncode == 0 and json.loads(done.stdout)[str(me)] == "tier"
    assert list(tmp_path.iterdir()) == []
    assert cpu.read(me, node) == cpu.read(me)  # cpu: read_cgroup there, as here
    with pytest.raises(NetifError, match=r"^nodec: process 999999999 is gone"):
        cpu.read(999999999, node)
    with pytest.raises(ValueError):
        nodeapp.oneshot_argv("python3", "/tmp", "x.", "rm")


def test_the_guard_puts_a_platform_back_with_the_bundle_it_runs_from(tmp_path: Path) -> None:
    """The CPU settings' restore commands run cgroupcpu from the agent's own bundle: a platform
    (a cgroup v2 folder stand-in) widened, then given its saved cpuset and limit back by an
    agent that was not renewed."""
    box = tmp_path / "platform"
    box.mkdir()
    (box / "cpuset.cpus").write_text("3\n")
    (box / "cpu.max").write_text("25000 100000\n")
    dirs = {"cpuset": str(box), "cpu": str(box), "version": "2"}
    state = {"platform": {"p": {"dirs": dirs, "label": "platform",
                                "values": {"cpuset": "0-1", "limit": 0.5}}}}
    argvs = [argv for _, argv in cpus.restore_commands(state)]
    assert [a[:5] for a in argvs] == [["python3", "-I", deadman.BUNDLE, "cpu", call]
                                      for call in ("widen_dirs", "write_dirs")]
    assert json.loads(argvs[0][5]) == {"dirs": dirs, "cpuset": "0-1"} and argvs[0][6] == "strict"
    commands = [{"argv": a, "what": "platform", "pid": None, "netns_ino": None, "enter": False}
                for a in argvs]
    folder = Path(guard.Guard(1.0, base=str(tmp_path)).start(LOCAL, commands))
    deadline = time.monotonic() + 10
    while not (folder / "fired").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = (folder / "log").read_text()
    assert "exit 0" in log and "failed" not in log, log
    assert (box / "cpuset.cpus").read_text() == "0-1"
    assert (box / "cpu.max").read_text() == "50000 100000"
