"""What the stack tests that drive the `tierbench` command share: the command itself, and an
environment with results and state in a temporary folder, checked for root and Compose v2
(a missing prerequisite fails the test, it never skips), cleaned with `tierbench clean` after;
for the cluster-lab modules, a lab brought up and down around the module with every node's NIC
state compared, and the runs on it."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tierbench.kinds import registry
from tierbench.placement import clusterfile, model, nodes

ROOT = Path(__file__).resolve().parent.parent
TIERBENCH = [sys.executable, "-m", "tierbench.cli"]


def tierbench(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`tierbench ARGS` from the checkout, output captured as text."""
    return subprocess.run([*TIERBENCH, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def cli_env(base: Path, **extra: str) -> Iterator[dict[str, str]]:
    """The environment of `tierbench` runs with results and state under `base` (and `extra`
    variables); the stack is removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the stack tests need root: run `make test` as root")
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        pytest.fail("docker compose v2 is missing: run `make setup`")
    env = dict(os.environ, TIERBENCH_RESULTS=str(base / "results"),
               TIERBENCH_STATE_DIR=str(base / "state"), **extra)
    try:
        yield env
    finally:
        tierbench(env, "clean", timeout=300)


TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
NO_ORANGEFS_SOURCE = 3  # setup/orangefs-image.sh: no source tarball could be had


def orangefs_image() -> None:
    """The OrangeFS images built (setup/orangefs-image.sh --offline: from ORANGEFS_TARBALL or the
    verified tarball a previous build cached; tests never download). Without a source the test
    skips, saying so; where CI has built them (TIERBENCH_REQUIRE_ORANGEFS=1, .ci/run) it fails."""
    done = subprocess.run([str(ROOT / "setup" / "orangefs-image.sh"), "--offline"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    if done.returncode == NO_ORANGEFS_SOURCE:
        why = ("tierbench-orangefs cannot be built here: "
               + done.stderr.strip().splitlines()[-1].removeprefix("setup: "))
        if os.environ.get("TIERBENCH_REQUIRE_ORANGEFS") == "1":
            pytest.fail(why + " (TIERBENCH_REQUIRE_ORANGEFS=1: the OrangeFS tests must run)")
        pytest.skip(why)
    assert done.returncode == 0, done.stderr[-2000:]


def db_window_rel(window_s: float) -> float:
    """How far a figure from the database's counters over the sampled window of `window_s`
    seconds may be from the same figure from wrk's rate over its whole measured run, relative:
    the window is the whole seconds of samples inside the run, whose rate changes from second to
    second (a second's worth: 1 / window_s), plus 10 % for requests that cross the window's
    edges. Fails when the window is too short for the figure to tell one transaction per request
    from two."""
    rel = 1 / window_s + 0.1
    assert rel < 0.4, f"a {window_s:.1f} s window cannot tell 1 transaction per request from 2"
    return rel


def lab_containers() -> list[str]:
    """The lab cluster's node containers (label org.tierbench.lab), by name."""
    done = subprocess.run(["docker", "ps", "-a", "--filter", "label=org.tierbench.lab", "--format",
                           "{{.Names}}"], capture_output=True, text=True, check=False)
    return sorted(done.stdout.split())


def require_free_lab() -> None:
    """What the lab tests need: root, a Docker engine that answers, and no lab already up (the
    test would replace it). A missing prerequisite fails the test; it never skips."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root: run `make test` as root")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("no Docker engine answers: run `make setup`")
    if lab_containers():
        pytest.fail(f"a lab is up ({', '.join(lab_containers())}): the lab tests would replace "
                    "it; run `make lab-down` first")


LAB_SH = ROOT / "setup" / "lab.sh"
LAB_CLUSTER = ROOT / "lab" / "cluster.yml"
EXPERIMENTS = ROOT / "tests" / "data" / "experiments"


def nic_state(cluster: clusterfile.Cluster) -> dict[str, str]:
    """Every node's data-plane interface as the tools print its settings: ethtool -k/-c/-g/-l,
    MTU, qdisc."""
    script = ("for o in -k -c -g -l; do echo \"== ethtool $o\"; ethtool $o eth0 2>&1; done; "
              "ip -o link show dev eth0 | grep -o 'mtu [0-9]*'; tc qdisc show dev eth0")
    return {n.name: nodes.run_on_node(n, script, timeout=30).stdout for n in cluster.nodes}


@contextmanager
def lab_cluster(tmp_path_factory: pytest.TempPathFactory, size: int = 4,
                roles: dict[str, object] | None = None,
                settings: dict[str, object] | None = None) -> Iterator[dict]:
    """A lab of `size` nodes (`setup/lab.sh up SIZE`, no image shipped up front: the runner ships
    what each node needs) for a test module, results and state in temporary folders, as
    {"env", "cluster", "path", "before", "results"}: `path` is the lab's cluster file, or with
    `roles` or `settings` a copy beside it (its ssh_config is relative) whose roles those
    replace, and whose top-level keys `settings` replace (e.g. rollback_timeout_s); `before` is
    every node's NIC state, which must hold again at the end. Afterwards `tierbench clean
    --cluster` and `setup/lab.sh down`; no lab container may stay."""
    require_free_lab()
    results = tmp_path_factory.mktemp("results")
    env = {**os.environ, "LAB_IMAGES": "none", "TIERBENCH_RESULTS": str(results),
           "TIERBENCH_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
    env.pop("TIERBENCH_CLUSTER", None)
    path = LAB_CLUSTER.with_name("cluster-test.yml") if roles or settings else LAB_CLUSTER
    try:
        up = subprocess.run([str(LAB_SH), "up", str(size)], env=env, capture_output=True,
                            text=True, timeout=900)
        assert up.returncode == 0, up.stderr[-3000:]
        if roles or settings:
            data = yaml.safe_load(LAB_CLUSTER.read_text())
            data["roles"].update(roles or {})
            data.update(settings or {})
            path.write_text(yaml.safe_dump(data))
        cluster = clusterfile.load_cluster(path, registry.roles())
        before = nic_state(cluster)
        yield {"env": env, "cluster": cluster, "path": path, "before": before,
               "results": results}
        assert nic_state(cluster) == before
    finally:
        clean = tierbench(env, "clean", "--cluster", str(path), timeout=300)
        down = subprocess.run([str(LAB_SH), "down"], capture_output=True, text=True, timeout=300)
        if roles or settings:
            path.unlink(missing_ok=True)
        assert down.returncode == 0, down.stderr
        assert lab_containers() == []
        assert clean.returncode == 0, clean.stderr


def lab_run(lab: dict, experiment: str, *extra: str,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """`tierbench run tests/data/experiments/EXPERIMENT --cluster LAB EXTRA...`."""
    return tierbench(lab["env"], "run", str(EXPERIMENTS / experiment), "--cluster",
                     str(lab["path"]), *extra, timeout=timeout)


def last_run(lab: dict, name: str) -> Path:
    """The newest results folder of experiment `name` in the lab's results."""
    return sorted((lab["results"] / name).iterdir())[-1]


def summary_rows(run_dir: Path) -> list[dict[str, str]]:
    """A run's summary.csv, one dict per row."""
    with (run_dir / "summary.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------- who listens where

# Every listening TCP socket and bound UDP socket in a lab node's own network namespace (`ss
# -ltnup` inside the node container), each marked by whether a process holding it runs in a
# container of the tierbench project on that node (its cgroup names the container).
_LISTENING = r"""
ids=$(docker ps -q --no-trunc --filter label=com.docker.compose.project=@PROJECT@)
ss -Hltnup | while IFS= read -r line; do
  ours=no
  for pid in $(printf '%s\n' "$line" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
    cgroup=$(cat "/proc/$pid/cgroup" 2>/dev/null || true)
    for id in $ids; do case $cgroup in *"$id"*) ours=yes ;; esac; done
  done
  printf '%s %s\n' "$ours" "$line"
done
"""


def node_container(node: str) -> str:
    """The lab's container of a node (node3: tierbench-node3)."""
    return f"tierbench-{node}"


def listening(node: str) -> list[dict]:
    """What listens in a lab node's network namespace: [{"proto", "address", "port",
    "processes", "tierbench"}] (``address`` without brackets; ``tierbench``: held by a process
    of a tierbench container)."""
    done = subprocess.run(["docker", "exec", node_container(node), "bash", "-c", _LISTENING.replace("@PROJECT@", model.PROJECT)],
                          capture_output=True, text=True, timeout=60, check=True)
    found = []
    for line in done.stdout.splitlines():
        ours, proto, _state, _recv, _send, local, *rest = line.split()
        address, _, port = local.rpartition(":")
        found.append({"proto": proto, "address": address.strip("[]"), "port": int(port),
                      "processes": sorted(set(re.findall(r'\("([^"]+)",pid=', " ".join(rest)))),
                      "tierbench": ours == "yes"})
    return found


class Listeners:
    """Every node's listening sockets, read once a second while the block runs (a run's
    services, and its Locust master, which listens only during a point) and once at its end:
    ``seen`` holds each (node, proto, address, port, processes) of tierbench's processes."""

    def __init__(self, cluster: clusterfile.Cluster) -> None:
        self.cluster = cluster
        self.seen: set[tuple[str, str, str, int, tuple[str, ...]]] = set()
        self.readings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def read(self) -> None:
        for node in self.cluster.nodes:
            for s in listening(node.name):
                if s["tierbench"]:
                    self.seen.add((node.name, s["proto"], s["address"], s["port"],
                                   tuple(s["processes"])))
        self.readings += 1

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self.read()
            except subprocess.SubprocessError:
                pass  # a node busy for a moment: the next reading
            self._stop.wait(1.0)

    def __enter__(self) -> Listeners:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        self.read()

    def misplaced(self) -> list[str]:
        """Every tierbench listener not on its node's data-plane address (first interface)."""
        data_plane = {n.name: n.interface().ip for n in self.cluster.nodes}
        return [f"{node}: {', '.join(procs)} on {proto} {address}:{port} (its data-plane "
                f"address is {data_plane[node]})"
                for node, proto, address, port, procs in sorted(self.seen)
                if address != data_plane[node]]

    def ports(self) -> set[tuple[str, int]]:
        """(node, port) of every tierbench listener seen."""
        return {(node, port) for node, _proto, _address, port, _procs in self.seen}

    def processes(self) -> set[tuple[str, str]]:
        """(node, process name) of every tierbench listener seen."""
        return {(node, p) for node, *_rest, procs in self.seen for p in procs}


# A FastCGI request for /dyn/none (dyn.php answers 404 at once, without the database), sent from
# a node: prints how many bytes came back (0: the server closed the connection unanswered).
_FASTCGI = r"""
import socket, struct, sys
def record(kind, body):
    return struct.pack("!BBHHBx", 1, kind, 1, len(body), 0) + body
def pair(k, v):
    return bytes([len(k), len(v)]) + k.encode() + v.encode()
params = b"".join(pair(k, v) for k, v in (
    ("SCRIPT_FILENAME", "/srv/app/dyn.php"), ("SCRIPT_NAME", "/dyn"), ("REQUEST_METHOD", "GET"),
    ("REQUEST_URI", "/dyn/none"), ("QUERY_STRING", ""), ("SERVER_PROTOCOL", "HTTP/1.0")))
request = (record(1, struct.pack("!HB5x", 1, 0)) + record(4, params) + record(4, b"")
           + record(5, b""))
answer = b""
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
    try:
        s.sendall(request)
        while chunk := s.recv(65536):
            answer += chunk
    except OSError:
        pass
print(len(answer))
"""

# A PostgreSQL startup message for the tierbench role, sent from a node: prints the first
# answer's type (R: the server asks for the password; E: an error) and its text.
_POSTGRES = r"""
import socket, struct, sys
body = struct.pack("!I", 196608) + b"user\0tierbench\0database\0tierbench\0\0"
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
    s.sendall(struct.pack("!I", len(body) + 4) + body)
    answer = s.recv(4096)
print(answer[:1].decode(), answer[5:].replace(b"\0", b" ").decode(errors="replace"))
"""


def fastcgi_answer(node: str, address: str, port: int = 9000) -> int:
    """Bytes a FastCGI request from ``node`` to address:port got back (0: refused)."""
    done = subprocess.run(["docker", "exec", "-i", node_container(node), "python3", "-",
                           address, str(port)], input=_FASTCGI, capture_output=True, text=True,
                          timeout=60, check=True)
    return int(done.stdout.strip())


def postgres_answer(node: str, address: str, port: int = 5432) -> tuple[str, str]:
    """(first answer's type, its text) of a PostgreSQL startup from ``node``: ("R", ...) when
    the server goes on to ask for the password, ("E", why) when it refuses."""
    done = subprocess.run(["docker", "exec", "-i", node_container(node), "python3", "-",
                           address, str(port)], input=_POSTGRES, capture_output=True, text=True,
                          timeout=60, check=True)
    kind, _, text = done.stdout.strip().partition(" ")
    return kind, text
