"""Sharing a rack safely, without a stack (issue 39, items 4-7): names and paths with control
characters refused, devices in use refused from captured lsblk/blkid/holders/swaps outputs,
system folders and folders tierbench does not own refused before root uses them, and the
per-node run lock (held, stale, released)."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import pytest

from tierbench.config import files, paths
from tierbench.config.errors import ConfigError
from tierbench.config.models import Model, safe_name, text, validate
from tierbench.kinds import registry
from tierbench.modes.model import ModeFile
from tierbench.kinds.web import services
from tierbench.placement import compose, model, owned, runlock
from tierbench.tiers import disks, diskuse
from tierbench.placement.clusterfile import ClusterError, parse_cluster
from tierbench.transport import Transport

ROOT = Path(__file__).resolve().parent.parent

CLUSTER: dict[str, Any] = {
    "version": 1,
    "nodes": [{"name": "node1", "address": "198.18.16.11",
               "interfaces": [{"name": "eth0", "address": "198.18.16.11/24"}]}],
    "roles": {"loadgen": "node1", "proxy": "node1", "web": "node1"},
}


def cluster_problems(**change: Any) -> list[str]:
    data = copy.deepcopy(CLUSTER)
    node = change.pop("node", {})
    data["nodes"][0].update(node)
    data.update(change)
    try:
        parse_cluster(data, registry.roles(), "c.yml")
    except ClusterError as exc:
        return exc.problems
    return []


# --------------------------------------------------------------------------- strict names


@pytest.mark.parametrize(("change", "sentence"), [
    ({"workdir": "/\n"}, "c.yml: workdir: '/\\n' holds a control character ('\\n' at position "
     "1); names and paths may not"),
    ({"workdir": "/srv/tb\n"}, "c.yml: workdir: '/srv/tb\\n' holds a control character ('\\n' "
     "at position 7); names and paths may not"),
    ({"node": {"name": "node1\n"}}, "c.yml: nodes[0].name: 'node1\\n' holds a control "
     "character ('\\n' at position 5); names and paths may not"),
    ({"node": {"user": "root\n"}}, "c.yml: nodes[0].user: 'root\\n' holds a control character "
     "('\\n' at position 4); names and paths may not"),
    ({"node": {"address": "n1.example.org\n"}}, "c.yml: nodes[0].address: 'n1.example.org\\n' "
     "holds a control character ('\\n' at position 14); names and paths may not"),
    ({"node": {"context": "ctx\x1b"}}, "c.yml: nodes[0].context: 'ctx\\x1b' holds a control "
     "character ('\\x1b' at position 3); names and paths may not"),
    ({"ssh_config": "ssh\tconfig"}, "c.yml: ssh_config: 'ssh\\tconfig' holds a control "
     "character ('\\t' at position 3); names and paths may not"),
], ids=["workdir-root", "workdir", "node", "user", "address", "context", "ssh_config"])
def test_a_cluster_file_name_or_path_with_a_control_character_is_refused(
        change: dict[str, Any], sentence: str) -> None:
    assert cluster_problems(**change) == [sentence]


def test_an_interface_name_with_a_trailing_newline_is_refused() -> None:
    itf = [{"name": "eth0\n", "address": "198.18.16.11/24"}]
    assert cluster_problems(node={"interfaces": itf}) == [
        "c.yml: nodes[0].interfaces[0].name: 'eth0\\n' holds a control character ('\\n' at "
        "position 4); names and paths may not"]


class Named(Model):
    name: Annotated[str, safe_name("dc-single")]
    kind: Annotated[str, text(r"^[a-z][a-z0-9-]*$", "web")] = "web"
    log: Annotated[str, text(example="wc_day46_1.gz")] = "x.gz"


@pytest.mark.parametrize(("data", "sentence"), [
    ({"name": "dc-single\n"}, "e.yml: name: holds a control character ('\\n' at position 9); "
     "names and paths may not, got 'dc-single\\n'"),
    ({"name": "ok", "kind": "web\n"}, "e.yml: kind: holds a control character ('\\n' at "
     "position 3); names and paths may not, got 'web\\n'"),
    ({"name": "ok", "log": "day\r46.gz"}, "e.yml: log: holds a control character ('\\r' at "
     "position 3); names and paths may not, got 'day\\r46.gz'"),
], ids=["safe_name", "pattern", "free-text"])
def test_an_experiment_value_with_a_control_character_is_refused(
        data: dict[str, Any], sentence: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(Named, data, "e.yml")
    assert str(info.value) == sentence


def test_a_mode_file_with_a_newline_in_a_name_is_refused() -> None:
    for data, key in (({"tiers": ["proxy\n"]}, "tiers[0]"),
                      ({"extends": "offloads-on\n"}, "extends[0]"),
                      ({"host_interfaces": ["eth0\n"]}, "host_interfaces[0]"),
                      ({"sysctls": {"net.core.rmem_max\n": 1}}, "sysctls.'net.core.rmem_max\\n'")):
        with pytest.raises(ConfigError, match="^" + re.escape(f"m.yml: {key}: ")):
            validate(ModeFile, data, "m.yml")


# --------------------------------------------------------------------------- real disks in use

SWAPS_NONE = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


def lsblk(*devices: dict[str, Any]) -> str:
    return json.dumps({"blockdevices": list(devices)})


def disk(name: str, fstype: str | None = None, mountpoint: str | None = None,
         children: list[dict[str, Any]] | None = None, kind: str = "disk") -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": kind, "fstype": fstype, "mountpoint": mountpoint}
    if children:
        out["children"] = children
    return out


IN_USE = [
    # an active volume group: the PV is held by its logical volume's dm device
    (lsblk(disk("/dev/sdb", "LVM2_member", children=[
        disk("/dev/mapper/vg0-data", "ext4", kind="lvm")])),
     "TYPE=LVM2_member\nUUID=x\n", SWAPS_NONE, {"sdb": ["dm-0"]},
     "it is held by dm-0 (/sys/class/block/sdb/holders)"),
    # a PV whose volume group is not active: its signature still says whose it is
    (lsblk(disk("/dev/sdb", "LVM2_member")), "TYPE=LVM2_member\n", SWAPS_NONE, {},
     "it is an LVM physical volume"),
    # an md member of an array not assembled (lsblk without udev shows no fstype)
    (lsblk(disk("/dev/sdc")), "UUID=y\nTYPE=linux_raid_member\n", SWAPS_NONE, {},
     "it is a member of an md RAID set"),
    (lsblk(disk("/dev/sdc", mountpoint="[SWAP]")), "TYPE=swap\n",
     SWAPS_NONE + "/dev/sdc  partition\t8388604\t0\t-2\n", {},
     "it is active swap (/proc/swaps)"),
    (lsblk(disk("/dev/sdc")), "", SWAPS_NONE + "/dev/sdc  partition\t8388604\t0\t-2\n", {},
     "it is active swap (/proc/swaps)"),
    (lsblk(disk("/dev/sdc")), "TYPE=swap\n", SWAPS_NONE, {}, "it holds a swap area"),
    # a dm-crypt or multipath member
    (lsblk(disk("/dev/sdd", children=[disk("/dev/mapper/mpatha", kind="mpath")])), "",
     SWAPS_NONE, {"sdd": ["dm-3"]}, "it is held by dm-3 (/sys/class/block/sdd/holders)"),
    # partitions, one mounted
    (lsblk(disk("/dev/sde", children=[disk("/dev/sde1", "ext4", "/home", kind="part")])),
     "PTUUID=z\nPTTYPE=gpt\n", SWAPS_NONE, {}, "/dev/sde1 is mounted at /home"),
    # partitions, none mounted: a partition table in use
    (lsblk(disk("/dev/sde", children=[disk("/dev/sde1", "ext4", kind="part"),
                                      disk("/dev/sde2", "xfs", kind="part")])),
     "PTUUID=z\nPTTYPE=gpt\n", SWAPS_NONE, {},
     "it has a gpt partition table with 2 partition(s) (/dev/sde1, /dev/sde2)"),
    # a partition that is an md member
    (lsblk(disk("/dev/sdf", children=[disk("/dev/sdf1", "linux_raid_member", kind="part")])),
     "PTTYPE=dos\n", SWAPS_NONE, {"sdf1": ["md0"]},
     "/dev/sdf1 is held by md0 (/sys/class/block/sdf1/holders)"),
    (lsblk(disk("/dev/sdf", children=[disk("/dev/sdf1", "zfs_member", kind="part")])),
     "PTTYPE=dos\n", SWAPS_NONE, {}, "/dev/sdf1 is a member of a ZFS pool"),
]


@pytest.mark.parametrize(("lsblk_out", "blkid_out", "swaps", "holders", "why"), IN_USE,
                         ids=["lvm-active", "lvm-pv", "md-member", "swap-lsblk", "swap-proc",
                              "swap-signature", "dm-holder", "partition-mounted",
                              "partition-table", "partition-md", "partition-zfs"])
def test_a_device_in_use_is_named_with_why(lsblk_out: str, blkid_out: str, swaps: str,
                                           holders: dict[str, list[str]], why: str) -> None:
    dev = json.loads(lsblk_out)["blockdevices"][0]["name"]
    assert diskuse.why_in_use(dev, lsblk_out, blkid_out, swaps, holders) == why


def test_an_unused_device_passes() -> None:
    """A blank disk, or one with an old file system that wipe: true will replace."""
    assert diskuse.why_in_use("/dev/sdg", lsblk(disk("/dev/sdg")), "", SWAPS_NONE,
                              {"sdg": []}) is None
    assert diskuse.why_in_use("/dev/sdg", lsblk(disk("/dev/sdg", "ext3")), "TYPE=ext3\n",
                              SWAPS_NONE, {}) is None
    assert diskuse.parse_holders("sdg:\nsdg1:dm-0 dm-1 \n") == {"sdg": [], "sdg1": ["dm-0",
                                                                                   "dm-1"]}


def test_preflight_refuses_an_lvm_device_in_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through disks.preflight on this host, every command answered as on a host whose /dev/sdb
    is an active LVM physical volume: refused before anything is written."""
    seen: list[list[str]] = []

    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess:
        seen.append(list(argv))
        answers = {"id": "0\n", "stat": "block special file\n",
                   "realpath": "\n".join(a for a in argv[1:] if a.startswith("/")) + "\n",
                   "lsblk": lsblk(disk("/dev/sdb", "LVM2_member", children=[
                       disk("/dev/mapper/vg0-data", "ext4", kind="lvm")])),
                   "blkid": "TYPE=LVM2_member\n", "blockdev": f"{1 << 40}\n"}
        if argv[0] == "cat":
            out = "/dev/vda / ext4 rw 0 0\n" if argv[1] == "/proc/self/mounts" else SWAPS_NONE
        elif argv[0] == "sh" and "holders" in argv[2]:
            out = "sdb:dm-0\nvg0-data:\n"
        else:
            out = answers.get(argv[0], "")
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(subprocess, "run", run)
    system = disks.resolve({"mine": disks.DiskSystemSpec(devices=["/dev/sdb"], wipe=True)})["mine"]
    plan = disks.plan(system, disks.layout(system), ["web"], [1 << 20])
    with pytest.raises(disks.DiskError) as info:
        disks.preflight([plan])
    assert str(info.value) == ("disk system mine: /dev/sdb is in use (it is held by dm-0 "
                               "(/sys/class/block/sdb/holders)): name a device nothing uses")
    assert not [a for a in seen if a[0] in ("mkfs.ext3", "mount", "blockdev")]


# --------------------------------------------------------------------------- one checkout's own


def test_each_checkout_has_its_own_project_and_state_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(files.PROJECT_ENV, raising=False)
    monkeypatch.delenv("TIERBENCH_STATE_DIR", raising=False)
    a, b = tmp_path / "alice" / "tierbench", tmp_path / "bob" / "tierbench"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    assert files.project_name(a) != files.project_name(b)
    assert files.project_name(a) == files.project_name(a / ".." / "tierbench")  # stable
    assert re.fullmatch(r"tierbench-[0-9a-f]{6}", files.project_name(a))
    assert files.state_dir() == Path("/run/tierbench") / model.PROJECT
    (b / ".env").write_text("LOADGEN_CPUS=0\nTIERBENCH_PROJECT=tierbench-bob\n")
    assert files.project_name(b) == "tierbench-bob"
    monkeypatch.setenv(files.PROJECT_ENV, "tierbench")  # the old single name, on purpose
    assert files.project_name(b) == "tierbench"
    for bad in ("other", "tierbench-Bob", "tierbench-bob\n", "tierbench-../x"):
        monkeypatch.setenv(files.PROJECT_ENV, bad)
        with pytest.raises(ConfigError, match=r"^TIERBENCH_PROJECT=.* is not a project name "
                                              r"tierbench can own"):
            files.project_name(b)


def test_compose_commands_name_the_checkouts_project(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **_kw: (
        seen.append(list(argv)), subprocess.CompletedProcess(argv, 0, "{}", ""))[1])
    compose.compose(["-f", "docker-compose.yml", "ps"], {})
    compose.config_of(["-f", "docker-compose.yml"], {})
    assert [a[:4] for a in seen] == [["docker", "compose", "-p", model.PROJECT]] * 2


class Engine:
    """A Docker engine with containers and volumes of three checkouts and another program."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.projects = ["tierbench", "tierbench-0a1b2c", model.PROJECT, "someoneelse"]

    def __call__(self, *args: str) -> str:
        self.calls.append(args)
        if args[:2] == ("ps", "-a") and "--format" in args:
            return "\n".join(self.projects) + "\n"
        if args[:2] == ("volume", "ls") and "--format" in args:
            return "tierbench-0a1b2c\n\n"
        if args[:2] == ("network", "ls") and "--format" in args:
            return "\nbridge\ntierbench-c50aaf\n"  # a network its clean left alone
        if args[:2] == ("network", "ls") and "-q" in args:
            return f"net-{args[-1].rsplit('=', 1)[-1]}\n"
        if args[:2] == ("ps", "-aq"):
            project = args[-1].rsplit('=', 1)[-1]
            return f"id-{project}\n" if project in self.projects else ""
        return ""

    def removed(self) -> list[str]:
        return [a[-1].removeprefix("id-") for a in self.calls if a[:2] == ("rm", "-f")]

    def networks_removed(self) -> list[str]:
        return [a[-1].removeprefix("net-") for a in self.calls if a[:2] == ("network", "rm")]


def test_clean_removes_only_this_checkouts_project_unless_all() -> None:
    engine = Engine()
    compose.remove_project(engine)
    assert engine.removed() == [model.PROJECT]
    assert not [a for a in engine.calls if "--format" in a]  # nobody else's even listed
    engine = Engine()
    compose.remove_project(engine, every=True)
    assert sorted(engine.removed()) == sorted(["tierbench", "tierbench-0a1b2c", model.PROJECT])
    # a project with nothing but a network (what a bring-up is refused on) goes too: the CI run
    # of 8 Dec 2026 was refused on one that `clean --all` had said it removed
    assert "tierbench-c50aaf" in engine.networks_removed()
    assert compose.ours(model.PROJECT) and not compose.ours("tierbench-0a1b2c")
    assert compose.ours("tierbench-0a1b2c", every=True) and not compose.ours("tierbenchx", True)
    assert compose.TMPFS_SOURCE == model.PROJECT


def test_a_network_gone_between_its_listing_and_its_inspection_ends_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Docker lists net-gone after the refused `network rm`, then says it is "not found" (removed
    # meanwhile): clean goes on with the one still there
    monkeypatch.setattr(compose.time, "sleep", lambda s: None)
    attached = {"net-a": [f"{model.PROJECT}-web-1"]}
    calls: list[tuple[str, ...]] = []

    def engine(*args: str) -> str:
        calls.append(args)
        if args[:2] == ("network", "ls"):
            return "net-a\nnet-gone\n" if attached else ""
        if args[:2] == ("network", "inspect"):
            if args[-1] == "net-gone":
                raise model.StackError("`docker network inspect -f ...` failed: Error response "
                                       "from daemon: network net-gone not found")
            return " ".join(attached[args[-1]]) + " "
        if args[:2] == ("network", "disconnect"):
            attached[args[-2]].remove(args[-1])
        if args[:2] == ("network", "rm"):
            if attached.get("net-a"):
                raise model.StackError("`docker network rm net-a` failed: Error response from "
                                       "daemon: network net-a id x has active endpoints")
            attached.clear()
        return ""

    compose._remove_networks(engine, model.PROJECT, pause_s=0)
    assert ("network", "disconnect", "-f", "net-a", f"{model.PROJECT}-web-1") in calls
    assert not attached


def test_a_network_left_with_stale_endpoints_is_disconnected_and_removed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Docker may keep a removed container's endpoint on the project's network (a study run
    # lost six experiments to it): the project's endpoints are force-disconnected, then the
    # network is removed; anything else attached is never touched, and the error names it. The
    # networks `network rm` did remove are not inspected (Docker: "not found", a failed clean).
    monkeypatch.setattr(compose.time, "sleep", lambda s: None)
    attached = {"net-a": [f"{model.PROJECT}-web-1"], "net-b": []}
    calls: list[tuple[str, ...]] = []

    def engine(*args: str) -> str:
        calls.append(args)
        if args[:2] == ("network", "ls"):
            return "\n".join(attached) + "\n"
        if args[:2] == ("network", "inspect"):
            if args[-1] not in attached:
                raise model.StackError(f"`docker network inspect -f ...` failed: Error response "
                                       f"from daemon: network {args[-1]} not found")
            return " ".join(attached[args[-1]]) + " "
        if args[:2] == ("network", "disconnect"):
            attached[args[-2]].remove(args[-1])
        if args[:2] == ("network", "rm"):
            busy = [n for n in args[2:] if attached[n]]
            for n in args[2:]:  # as Docker: the others are removed, the busy one refused
                if n not in busy:
                    del attached[n]
            if busy:
                raise model.StackError(f"`docker network rm {busy[0]} ...` failed: Error "
                                       "response from daemon: error while removing network: "
                                       f"network x_back id {busy[0]} has active endpoints")
        return ""

    compose.remove_project(engine)
    assert attached == {}
    assert ("network", "disconnect", "-f", "net-a", f"{model.PROJECT}-web-1") in calls
    attached.update({"net-a": [f"{model.PROJECT}-web-1", "someone-elses-1"]})
    calls.clear()
    with pytest.raises(model.StackError, match=r"active endpoints \(still attached: "
                                               r"someone-elses-1\)"):
        compose.remove_project(engine)
    assert not [c for c in calls if c[:2] == ("network", "disconnect")]

    # Docker counts an endpoint it lists nowhere: the network is kept, with a sentence
    attached.clear()
    attached.update({"net-a": []})

    def ghost(*args: str) -> str:
        if args[:2] == ("network", "rm"):
            raise model.StackError("`docker network rm net-a ...` failed: Error response from "
                                   "daemon: network x_back id net-a has active endpoints")
        return engine(*args)

    compose.remove_project(ghost)
    assert "kept the network(s) net-a: Docker counts an endpoint" in capsys.readouterr().err

    def refusing(*args: str) -> str:
        if args[:2] == ("network", "rm"):
            raise model.StackError("`docker network rm ...` failed: permission denied")
        return "net-a\n" if args[:2] == ("network", "ls") else ""

    with pytest.raises(model.StackError, match="permission denied"):
        compose.remove_project(refusing)


# --------------------------------------------------------------------------- the run lock

HOLDER = """
import sys, time
from tierbench.placement import runlock
from pathlib import Path
lock = runlock.HostLock(Path(sys.argv[1]))
lock.acquire(runlock.me("tierbench run quick"))
print("HELD", flush=True)
time.sleep(120)
"""


def test_a_second_run_on_this_host_is_refused_naming_who_holds_the_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "HELD"
        lock = runlock.HostLock(tmp_path)
        with pytest.raises(runlock.LockHeld) as info:
            lock.acquire(runlock.me("tierbench run other"))
        sentence = str(info.value)
        assert "\n" not in sentence
        assert re.fullmatch(
            rf"this host is in use by another tierbench run, held by user \S+ on host "
            rf"{re.escape(socket.gethostname())} \(pid {holder.pid}, checkout "
            rf"{re.escape(str(ROOT))}, `tierbench run quick`, since \S+Z, \d+ s ago\): wait for "
            rf"it to end, or ask its owner \(lock {re.escape(str(tmp_path))}/run.lock\)",
            sentence), sentence
    finally:
        holder.kill()  # SIGKILL: no release ran; the kernel lets the lock go
        holder.wait()
    lock = runlock.HostLock(tmp_path)
    lock.acquire(runlock.me("tierbench run other"))
    assert lock.stale is not None and lock.stale.pid == holder.pid  # its record, replaced
    assert runlock.parse_owner((tmp_path / "run.lock").read_text()).command == \
        "tierbench run other"  # type: ignore[union-attr]
    lock.release()
    assert (tmp_path / "run.lock").read_text() == ""


def test_the_lock_is_released_on_any_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runlock.LOCK_DIR_ENV, str(tmp_path))
    with pytest.raises(RuntimeError):
        with runlock.hold("tierbench run quick"):
            with pytest.raises(runlock.LockHeld):
                with runlock.hold("tierbench clean"):
                    pass
            raise RuntimeError("a point failed")
    with runlock.hold("tierbench run quick") as locks:
        assert isinstance(locks[0], runlock.HostLock)


# `sh -c` stands in for ssh: the node's "remote" command runs here, in tmp_path
NODE = Transport("node1", ("sh", "-c"), "tierbench-node1")


def test_a_nodes_lock_is_held_by_its_session_and_refuses_a_second_run(tmp_path: Path) -> None:
    first = runlock.NodeLock(NODE, str(tmp_path / "locks"))
    first.acquire(runlock.me("tierbench run quick --cluster c.yml"))
    try:
        held = runlock.parse_owner((tmp_path / "locks" / "run.lock").read_text())
        assert held is not None and held.node_pid and held.pid == os.getpid()
        other = runlock.Owner("bob", "controller2", 4242, "/home/bob/tierbench", "tierbench-bob",
                              "tierbench run dc-static --cluster c.yml", held.since)
        with pytest.raises(runlock.LockHeld) as info:
            runlock.NodeLock(NODE, str(tmp_path / "locks")).acquire(other)
        assert str(info.value).startswith(
            f"node node1 is in use by another tierbench run, held by user {held.user} on host "
            f"{held.host} (pid {os.getpid()}, checkout {ROOT}, `tierbench run quick --cluster "
            "c.yml`, since ")
    finally:
        first.release()
    second = runlock.NodeLock(NODE, str(tmp_path / "locks"))
    second.acquire(runlock.me("tierbench run dc-static"))  # free once the session ended
    second.release()


def test_a_stale_node_lock_of_a_dead_controller_process_is_taken_over(tmp_path: Path) -> None:
    """The session outlived its controller (a half-open SSH connection): the record names this
    host and a pid gone here, so the holder on the node is ended and the lock taken."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = runlock.Owner("alice", socket.gethostname(), gone.pid, str(ROOT), model.PROJECT,
                         "tierbench run quick", "2026-01-01T00:00:00Z")
    first = runlock.NodeLock(NODE, str(tmp_path / "locks"))
    first.acquire(dead)
    try:
        mine = runlock.NodeLock(NODE, str(tmp_path / "locks"))
        mine.acquire(runlock.me("tierbench run quick"))
        owner = runlock.parse_owner((tmp_path / "locks" / "run.lock").read_text())
        assert owner is not None and owner.pid == os.getpid()
        mine.release()
    finally:
        first.release()



def test_a_node_lock_held_without_a_record_is_asked_again_before_a_refusal(
        tmp_path: Path) -> None:
    """A holder between taking the lock and writing its record (or between emptying it and
    ending): asked again, so that a second run is refused naming who holds it, or takes the
    lock once it is free; held on with no record, refused saying so."""
    folder = tmp_path / "locks"
    folder.mkdir()
    (folder / "run.lock").touch()
    holder = subprocess.Popen(["flock", str(folder / "run.lock"), "sleep", "1"])
    try:
        time.sleep(0.2)
        lock = runlock.NodeLock(NODE, str(folder))
        lock.acquire(runlock.me("tierbench run quick"))  # once the record-less holder ended
        lock.release()
    finally:
        holder.wait()
    holder = subprocess.Popen(["flock", str(folder / "run.lock"), "sleep", "30"])
    try:
        time.sleep(0.2)
        started = time.monotonic()
        with pytest.raises(runlock.LockHeld, match="held by a run whose owner it does not record"):
            runlock.NodeLock(NODE, str(folder)).acquire(runlock.me("tierbench run quick"))
        assert time.monotonic() - started >= runlock.UNRECORDED_TRIES * runlock.UNRECORDED_WAIT_S
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------- paths root uses

@pytest.mark.parametrize(("path", "why"), [
    ("/", "is the root folder"),
    ("/etc", "is the system folder /etc"),
    ("/usr/local/tierbench", "is inside the system folder /usr"),
    ("/srv", "is a top-level folder (/srv), which is not tierbench's alone"),
    ("/data/", "is a top-level folder (/data), which is not tierbench's alone"),
    ("/home", "is the system folder /home, which every user and program share"),
    ("/var/lib", "is the system folder /var/lib, which every user and program share"),
    ("/run", "is the system folder /run, which every user and program share"),
    ("/tmp", "is the system folder /tmp, which every user and program share"),
    ("/home/alice", "is a folder directly in /home, which every user and program share (a "
     "folder of tierbench's own there is named tierbench..., e.g. /home/tierbench)"),
    ("/var/lib/docker", "is a folder directly in /var/lib, which every user and program share "
     "(a folder of tierbench's own there is named tierbench..., e.g. /var/lib/tierbench)"),
    ("/var/lib/../../etc", "is the system folder /etc"),
    ("relative/state", "is not an absolute path"),
    ("/srv/tb\n", "holds a control character ('\\n' at position 7); names and paths may not"),
])
def test_system_folders_are_refused(path: str, why: str) -> None:
    assert paths.system_problem(path) == why


def test_tierbench_folders_pass() -> None:
    for path in ("/var/lib/tierbench", "/var/lib/tierbench/disk-images/tierbench-abc123",
                 "/run/tierbench", "/run/tierbench/tierbench-abc123/docroot-tmpfs",
                 "/run/tierbench/docroot-tmpfs", "/srv/tb", "/data/tb", "/tmp/x/state"):
        assert paths.system_problem(path) is None, path


def test_env_paths_are_refused_in_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as info:
        services.tmpfs_docroot({"DOCROOT_TMPFS_DIR": "/srv"})
    assert str(info.value) == (
        "DOCROOT_TMPFS_DIR='/srv' is a top-level folder (/srv), which is not tierbench's alone: "
        "tierbench mounts, writes and removes things there as root; give it a folder of its own "
        "such as /var/lib/tierbench/NAME or /run/tierbench/NAME")
    with pytest.raises(ConfigError, match=r"^HOT_TMPFS_DIR='/run' is the system folder /run"):
        services.hot_dir({"HOT_TMPFS_DIR": "/run"})
    with pytest.raises(disks.DiskError, match=r"^DISK_IMAGE_DIR='/var/lib' is the system "):
        disks.image_dir({"DISK_IMAGE_DIR": "/var/lib"})
    monkeypatch.setenv("TIERBENCH_STATE_DIR", "/")
    with pytest.raises(ConfigError, match=r"^TIERBENCH_STATE_DIR='/' is the root folder: "):
        files.state_dir()
    for bad in ("/srv", "/data", "/home/alice"):
        assert cluster_problems(workdir=bad)[0].startswith(f"c.yml: workdir: {bad} is "), bad


def test_a_folder_is_used_only_when_tierbench_made_it_or_it_is_empty(tmp_path: Path) -> None:
    new = tmp_path / "new" / "docroot-tmpfs"
    owned.claim(str(new), "the tmpfs folder")
    assert (new / paths.MARKER).read_text() == f"tierbench {model.PROJECT}\n"
    owned.claim(str(new), "the tmpfs folder")  # again: its own
    empty = tmp_path / "empty"
    empty.mkdir()
    owned.claim(str(empty), "the tmpfs folder")
    assert (empty / paths.MARKER).is_file()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work")
    with pytest.raises(owned.OwnershipError) as info:
        owned.claim(str(theirs), "the cluster's workdir", ("results", "workloads"))
    assert str(info.value) == (
        f"the cluster's workdir {theirs} holds thesis.tex and has no .tierbench-owner (tierbench "
        "did not make it): tierbench mounts, writes and removes things there as root, so it uses "
        "only a folder it made (or an empty one); give it another")
    assert not (theirs / paths.MARKER).exists()
    link = tmp_path / "link"
    link.symlink_to(empty)
    with pytest.raises(owned.OwnershipError, match="is a symbolic link and has no"):
        owned.claim(str(link), "the tmpfs folder")
    with pytest.raises(owned.OwnershipError, match=r"^the tmpfs folder /etc is the system folder"):
        owned.claim("/etc", "the tmpfs folder")


def test_a_workdir_from_before_markers_is_adopted(tmp_path: Path) -> None:
    old = tmp_path / "workdir"
    for entry in ("results", "workloads", "disks"):
        (old / entry).mkdir(parents=True)
    owned.claim(str(old), "the cluster's workdir", ("results", "workloads"))
    assert (old / paths.MARKER).read_text().splitlines() == [
        f"tierbench {model.PROJECT}", "results", "workloads"]


def test_clean_removes_only_what_the_marker_names(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    owned.claim(str(ours), "the cluster's workdir", ("results",))
    (ours / "results" / "run1").mkdir(parents=True)
    (ours / "notes").mkdir()
    assert owned.remove_entry(str(ours), "results") and not (ours / "results").exists()
    assert not owned.remove_entry(str(ours), "notes") and (ours / "notes").is_dir()
    theirs = tmp_path / "theirs"
    (theirs / "results").mkdir(parents=True)
    assert not owned.remove_entry(str(theirs), "results") and (theirs / "results").is_dir()
    # a checkout that never ran there: nothing to remove, nothing to report
    assert owned.remove_entry(str(tmp_path / "never"), "results")
    assert not (tmp_path / "never").exists()


def test_a_tmpfs_is_not_mounted_over_someone_elses_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(compose, "_run", lambda argv, **_kw: seen.append(argv) or "")
    theirs = tmp_path / "docs"
    theirs.mkdir()
    (theirs / "report.odt").write_text("x")
    with pytest.raises(model.StackError, match=r"^the tmpfs folder .*/docs holds report.odt "):
        compose.mount_tmpfs(theirs, "1g")
    assert seen == []
    compose.mount_tmpfs(tmp_path / "mine", "1g")
    assert seen == [["mount", "-t", "tmpfs", "-o", "size=1g,mode=0755", model.PROJECT,
                     str(tmp_path / "mine")]]


def test_a_lock_folder_that_cannot_be_made_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(runlock.LockHeld, match=r"^cannot take this host's run lock .*/file/locks/"
                                               r"run.lock \(Not a directory\): run as root, or "
                                               r"set TIERBENCH_LOCK_DIR$"):
        runlock.HostLock(tmp_path / "file" / "locks").acquire(runlock.me("tierbench run quick"))


def test_a_bring_up_is_refused_while_another_checkouts_stack_is_up() -> None:
    """Its networks hold the stack's fixed addresses: refused in one sentence, never removed."""
    def engine(*args: str) -> str:
        return {"network": f"bridge\n{model.PROJECT}\ntierbench-0a1b2c\n",
                "ps": "someoneelse\n"}[args[0]]
    with pytest.raises(model.StackError) as info:
        compose.refuse_others(engine)
    assert str(info.value) == (
        "another checkout's stack (tierbench-0a1b2c) is up on this host, on the addresses and "
        "ports this one needs: its own `tierbench clean` removes it (or `tierbench clean --all`, "
        f"if it is nobody's any more); this checkout is {model.PROJECT}")
    compose.refuse_others(lambda *a: f"{model.PROJECT}\nbridge\n")  # its own: no refusal


def test_the_plan_says_which_modes_a_read_only_proc_sys_cannot_take(tmp_path: Path) -> None:
    """A node's /proc/sys read-only (a lab node) takes no host-wide sysctl: the plan says so
    before anything starts; the congestion control goes on routes and needs no such line."""
    root = ROOT
    quick = (root / "experiments" / "quick.yml").read_text()
    mixed = tmp_path / "quick-buffers.yml"
    mixed.write_text(quick.replace("modes: [offloads-on+tcp-cubic, offloads-off+tcp-cubic]",
                                   "modes: [offloads-on+tcp-cubic, big-socket-buffers]"))
    assert mixed.read_text() != quick

    def plan(experiment: Path) -> str:
        done = subprocess.run([sys.executable, "-m", "tierbench.cli", "plan", str(experiment),
                               "--cluster", str(root / "cluster.example.yml")], cwd=root,
                              capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "PYTHONPATH": str(root)})
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert ("  mode(s) big-socket-buffers set host-wide sysctls on the nodes: a node whose "
            "/proc/sys is read-only (a container, such as a lab node) cannot take them, and the "
            "run refuses them there before anything starts\n") in plan(mixed)
    assert "host-wide sysctls" not in plan(root / "experiments" / "quick.yml")


def test_a_bring_up_on_a_node_where_another_checkouts_stack_is_up_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With host networking a node's stack holds its ports: the run lock, free again once a run
    has ended with its stack up, would not keep a second checkout off them."""
    from tierbench.placement.cluster import ClusterPlacer

    where = ClusterPlacer(parse_cluster(copy.deepcopy(CLUSTER), registry.roles(), "c.yml"))
    up: dict[str, list[str]] = {"network": [], "ps": [model.PROJECT]}
    monkeypatch.setattr(ClusterPlacer, "docker_out",
                        staticmethod(lambda node, *args: "\n".join(up[args[0]]) + "\n"))
    where.refuse_others(["node1"])  # this checkout's own stack: no refusal
    up["network"] = ["tierbench-0a1b2c"]
    with pytest.raises(model.StackError, match=(
            r"^another checkout's stack \(tierbench-0a1b2c\) is up on node node1, on the "
            r"addresses and ports this one needs: its own `tierbench clean` removes it")):
        where.refuse_others(["node1"])
    assert where.node_dir == f"/var/lib/tierbench/{model.PROJECT}"
