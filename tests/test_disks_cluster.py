"""Disk systems on a cluster without nodes or Docker: every host-side step of
tierbench/tiers/disks.py goes through one runner (disks.Host), here or over a node's SSH
prefix; the md decision is made on the node; the state file records the node (and its SSH argv)
so that teardown after a crash reaches it; a node's loop devices are told apart from the host's
and other nodes' by their images' names; the roles and refusals of the web and disk kinds on a
cluster; the disk benchmark's host overlay. Commands are recorded by a fake subprocess.run."""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_cluster import config, lab

from tierbench.kinds import registry
from tierbench.tiers import orangefs
from tierbench.kinds.web import webdisks
from tierbench.placement import cluster, hostnet, local, model, owned
from tierbench.tiers import diskbuild, disks
from tierbench import transport
from tierbench.transport import Transport

ROOT = Path(__file__).resolve().parent.parent
SSH = ("ssh", "-p", "22", "-l", "root", "--", "198.18.16.13")
NODE = disks.Host(Transport("node3", SSH), "/var/lib/tierbench/tb")


class FakeRun:
    """subprocess.run for disks.py: records (where, argv) and answers from a table of
    (predicate, stdout, returncode)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.mounts: dict[str, list[str]] = {"local": [], "node3": []}
        self.answers: list[tuple[object, str, int]] = []
        self.claims: list[str] = []

    def __call__(self, cmd, **kw):  # noqa: ANN001 - subprocess.run's signature
        assert all("\0" not in a for a in cmd), cmd  # as exec refuses
        if cmd[:len(SSH)] == list(SSH):
            where, argv = "node3", shlex.split(cmd[len(SSH)])
        else:
            assert cmd[0] != "ssh", cmd
            where, argv = "local", list(cmd)
        self.calls.append((where, argv))
        out, rc = self.answer(where, argv)
        return subprocess.CompletedProcess(cmd, rc, out, "")

    def answer(self, where: str, argv: list[str]) -> tuple[str, int]:
        for pred, out, rc in self.answers:
            if pred(where, argv):  # type: ignore[operator]
                return out, rc
        if argv[:3] == ["sh", "-c", owned.CLAIM]:  # the node's folders made tierbench's
            self.claims.append(argv[4])
            return "OK\n", 0
        if argv[:2] == ["cat", "/proc/self/mounts"]:
            return "".join(f"/dev/x {m} ext3 rw 0 0\n" for m in self.mounts[where]), 0
        if argv[0] == "mount":
            self.mounts[where].append(argv[-1])
            return "", 0
        if argv[0] == "umount":
            self.mounts[where].remove(argv[-1])
            return "", 0
        if argv[0] == "sh" and "losetup --find" in argv[2]:
            return "/dev/loop7\n", 0
        if argv[0] == "sh" and "df -PB1" in argv[2]:
            return f"{1 << 40}\n", 0
        if argv[0] == "sh" and "/proc/mdstat" in argv[2]:
            return "", 1  # no md
        if argv[0] == "sh" and "dmsetup targets" in argv[2]:
            return "", 1  # no device-mapper striping: btrfs
        if argv[0] in ("test", "find", "losetup"):
            return ("", 1) if argv[0] != "losetup" else ('{"loopdevices": []}', 0)
        return "", 0

    def on(self, where: str) -> list[list[str]]:
        return [a for w, a in self.calls if w == where]


@pytest.fixture()
def fake(monkeypatch, tmp_path) -> FakeRun:
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    run = FakeRun()
    monkeypatch.setattr(transport.subprocess, "run", run)  # the one place commands run
    return run


def ide_plan() -> disks.Plan:
    ide = disks.BUILTIN["ide"]
    return disks.plan(ide, disks.layout(ide), ["disk-bench"], [64 << 20])


def test_a_fresh_node_has_its_folders_claimed_before_the_disk_system_writes_there(fake) -> None:
    """A disk system can be a node's first writer (it is built before the workloads are sent):
    the workdir and this checkout's folder are made tierbench's first, else the workloads' claim
    later finds a folder without a marker and refuses the run (found on the lab)."""
    diskbuild.ensure(ide_plan(), {}, log=lambda _m: None, hosts=NODE)
    assert fake.claims == ["/var/lib/tierbench", "/var/lib/tierbench/tb"]
    node = fake.on("node3")
    first_claim = next(i for i, a in enumerate(node) if a[:3] == ["sh", "-c", owned.CLAIM])
    writes = [i for i, a in enumerate(node) if a[0] in ("mkdir", "fallocate", "mount")]
    assert writes and first_claim < min(writes)


def test_a_node_folder_of_someone_else_stops_the_disk_system_before_anything_is_made(fake) -> None:
    fake.answers.append((lambda w, a: a[:3] == ["sh", "-c", owned.CLAIM], "NOT-OURS holds x\n", 0))
    with pytest.raises(disks.DiskError, match="has no .tierbench-owner"):
        diskbuild.ensure(ide_plan(), {}, log=lambda _m: None, hosts=NODE)
    assert not any(a[0] in ("mkdir", "fallocate", "mount") for a in fake.on("node3"))


def test_a_node_builds_with_its_own_commands_and_the_state_names_the_node(fake) -> None:
    built = diskbuild.ensure(ide_plan(), {}, log=lambda _m: None, hosts=NODE)
    node = fake.on("node3")
    image = "/var/lib/tierbench/tb/disk-images/tierbench-disk@node3-ide-disk-bench-d1.img"
    assert ["fallocate", "-l", str(ide_plan().device_bytes), image] in node
    assert ["mkfs.ext3", "-q", "-F", "/dev/loop7"] in node
    assert ["mount", "-t", "ext3", "/dev/loop7", "/var/lib/tierbench/tb/disks/disk-bench"] in node
    # nothing of the build ran here: only the look for leftovers of this host (teardown first)
    assert not any(a[0] in ("fallocate", "mkfs.ext3", "mount", "mkdir") for a in fake.on("local"))
    server = built.server("disk-bench")
    assert server.devices == ["/dev/loop7"] and server.images == [image]
    state = json.loads(disks.state_path().read_text())
    assert state["servers"][0]["host"] == {"node": "node3", "ssh": list(SSH), "workdir": "/var/lib/tierbench/tb"}
    assert state["hosts"] == [{"node": "node3", "ssh": list(SSH), "workdir": "/var/lib/tierbench/tb"}]
    assert built.record()["servers"]["disk-bench"]["node"] == "node3"
    # what is built is kept when asked for again on the same node, not on another host
    assert diskbuild.current(ide_plan(), NODE) is not None
    assert diskbuild.current(ide_plan(), disks.LOCAL) is None


def test_raid0_is_decided_by_the_nodes_md(fake) -> None:
    raid = disks.BUILTIN["raid0"]
    p = disks.plan(raid, disks.layout(raid), ["web"], [64 << 20])
    fake.answers.append((lambda w, a: w == "node3" and a[0] == "sh" and "/proc/mdstat" in a[2],
                         "/sbin/mdadm\n", 0))
    built = diskbuild.ensure(p, {}, log=lambda _m: None, hosts={"web": NODE})
    node = fake.on("node3")
    # md stripes at 004 §3.2's 4 KB, not md's default 512 KiB chunk
    assert any(a[0] == "mdadm" and a[1] == "--create" and "--chunk=4" in a for a in node)
    assert not any(a[0] == "mkfs.btrfs" for a in node)
    assert built.filesystem == "ext3 on md RAID-0, 4 KiB chunk"
    assert disks.raid_kind(NODE) == "md" and disks.raid_kind(disks.LOCAL) == "btrfs"
    assert "node3" in disks.raid_words(NODE)  # the plan does not ask the node


def test_iops_limits_are_set_beside_the_bandwidths_and_read_back_from_io_max(fake) -> None:
    """A seek costs: the IDE and SCSI systems' request limits go into the containers'
    blkio_config and are read back from cgroup v2's io.max; one missing is a mismatch."""
    server = diskbuild.Server("web1", "/state/disks/web1", ["/dev/loop7"], [])
    assert diskbuild.throttles(server, disks.BUILTIN["ide"])["device_read_iops"] == [
        {"path": "/dev/loop7", "rate": disks.IDE_IOPS}]
    assert diskbuild.throttles(server, disks.BUILTIN["scsi"])["device_read_iops"] == [
        {"path": "/dev/loop7", "rate": disks.SCSI_IOPS}]
    assert "device_write_iops" not in diskbuild.throttles(server, disks.BUILTIN["scsi"])
    assert "device_read_iops" not in diskbuild.throttles(server, disks.BUILTIN["raid0"])
    assert "75/unlimited IOPS read/write" in disks.BUILTIN["ide"].describe()
    files = {"/proc/98/cgroup": "0::/system.slice/docker-abc.scope\n",
             "/proc/self/mountinfo": "30 20 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
             "/sys/fs/cgroup/system.slice/docker-abc.scope/io.max":
                 "7:7 rbps=35000000 wbps=39000000 riops=max wiops=max\n"}
    for path, text in files.items():
        fake.answers.append((lambda w, a, path=path: a == ["cat", path], text, 0))
    fake.answers.append((lambda w, a: a[:2] == ["stat", "-L"], "7:7\n", 0))
    limits, problems = diskbuild.check_throttles(server, disks.BUILTIN["ide"], 98)
    assert limits == {"/dev/loop7": {"read_bps": 35_000_000, "write_bps": 39_000_000,
                                     "read_iops": None, "write_iops": None}}
    assert problems == ["/dev/loop7: read_iops None in the cgroup, 75 wanted"]


def test_without_md_raid0_is_device_mapper_striping_at_4_kib_after_loading_modules(fake) -> None:
    raid = disks.BUILTIN["raid0"]
    p = disks.plan(raid, disks.layout(raid), ["web"], [64 << 20])
    fake.answers.append((lambda w, a: a[0] == "sh" and "dmsetup targets" in a[2], "", 0))
    built = diskbuild.ensure(p, {}, log=lambda _m: None, hosts={"web": NODE})
    node = fake.on("node3")
    load = next(i for i, a in enumerate(node) if a[0] == "sh" and "modprobe" in a[2])
    assert all(m in node[load][2] for m in ("md_mod", "raid0", "dm_mod"))
    create = next(i for i, a in enumerate(node) if a[:2] == ["dmsetup", "create"])
    assert load < create
    name, table = node[create][2], node[create][-1]
    sectors = p.device_bytes // 512 // 8 * 8
    assert table == (f"0 {3 * sectors} striped 3 8 /dev/loop7 0 /dev/loop7 0 /dev/loop7 0")
    assert name == "tierbench-disk-node3-web" and not any(a[0] == "mdadm" for a in node)
    assert ["mkfs.ext3", "-q", "-F", f"/dev/mapper/{name}"] in node
    assert built.filesystem == "ext3 on device-mapper RAID-0, 4 KiB chunk"
    assert disks.raid_kind(NODE) == "dm" and "device-mapper" in disks.STRIPE_WORDS["dm"]
    fake.calls.clear()
    fake.answers.append((lambda w, a: a == ["test", "-e", f"/dev/mapper/{name}"], "", 0))
    diskbuild.teardown({}, [NODE])
    assert ["dmsetup", "remove", name] in fake.on("node3")


def test_teardown_after_a_crash_reaches_the_recorded_node(fake) -> None:
    diskbuild.ensure(ide_plan(), {}, log=lambda _m: None, hosts=NODE)
    fake.calls.clear()
    image = "/var/lib/tierbench/tb/disk-images/tierbench-disk@node3-ide-disk-bench-d1.img"
    listing = {"loopdevices": [
        {"name": "/dev/loop7", "back-file": image},
        # the host's own image and another node's, in the same folder as the kernel shows it
        {"name": "/dev/loop1", "back-file": "/var/lib/tierbench/tb/disk-images/tierbench-disk-ide-web-d1.img"},
        {"name": "/dev/loop2", "back-file": "/var/lib/tierbench/tb/disk-images/tierbench-disk@node4-ide-web.img"}]}
    fake.answers.append((lambda w, a: w == "node3" and a[0] == "losetup" and "--list" in a,
                         json.dumps(listing), 0))
    notes = diskbuild.teardown({})
    node = fake.on("node3")
    assert ["umount", "/var/lib/tierbench/tb/disks/disk-bench"] in node
    assert ["losetup", "--detach", "/dev/loop7"] in node
    assert not any(a[:2] == ["losetup", "--detach"] and a[2] != "/dev/loop7" for a in node)
    assert not any(a[:2] == ["losetup", "--detach"] for a in fake.on("local"))
    assert any(a[0] == "sh" and "rm -rf" in a[2] and a[-1] == "/var/lib/tierbench/tb/disks" for a in node)
    assert not disks.state_path().exists() and "node3" in notes[0]


def test_teardown_looks_on_the_hosts_it_is_given_without_a_state(fake) -> None:
    fake.answers.append((lambda w, a: w == "node3" and a[0] == "find",
                         "/var/lib/tierbench/tb/disk-images/tierbench-disk@node3-scsi-web-d1.img\n", 0))
    diskbuild.teardown({}, [NODE])
    assert ["rm", "-f", "/var/lib/tierbench/tb/disk-images/tierbench-disk@node3-scsi-web-d1.img"] in \
        fake.on("node3")


def test_throttles_and_page_cache_are_read_and_dropped_on_the_node(fake) -> None:
    built = diskbuild.ensure(ide_plan(), {}, log=lambda _m: None, hosts=NODE)
    files = {"/proc/99/cgroup": "5:blkio:/docker/abc\n4:cpuacct:/docker/abc\n",
             "/proc/self/mountinfo": "40 30 0:35 / /sys/fs/cgroup/blkio rw - cgroup cgroup "
                                     "rw,blkio\n",
             "/sys/fs/cgroup/blkio/docker/abc/blkio.throttle.read_bps_device": "7:7 35000000\n",
             "/sys/fs/cgroup/blkio/docker/abc/blkio.throttle.write_bps_device": "7:7 39000000\n",
             "/sys/fs/cgroup/blkio/docker/abc/blkio.throttle.read_iops_device": "7:7 75\n",
             "/sys/fs/cgroup/blkio/docker/abc/blkio.throttle.write_iops_device": ""}
    for path, text in files.items():
        fake.answers.append((lambda w, a, path=path: w == "node3" and a == ["cat", path], text, 0))
    fake.answers.append((lambda w, a: w == "node3" and a[:2] == ["stat", "-L"], "7:7\n", 0))
    limits, problems = diskbuild.check_throttles(built.server("disk-bench"), disks.BUILTIN["ide"], 99)
    assert problems == [] and limits == {"/dev/loop7": {
        "read_bps": 35_000_000, "write_bps": 39_000_000, "read_iops": 75, "write_iops": None}}
    fake.answers.append((lambda w, a: w == "node3" and a[0] == "python3", "12\n", 0))
    assert diskbuild.evict(built) == 12
    assert not any(a[0] in ("cat", "stat", "python3") and "/proc/99" in " ".join(a)
                   for a in fake.on("local"))


def test_device_numbers_are_read_in_hex_and_given_in_decimal(fake) -> None:
    fake.answers.append((lambda w, a: a[:2] == ["stat", "-L"], "103:1f\n", 0))
    assert diskbuild.device_number("/dev/nvme0n1p31", NODE) == "259:31"


def test_preflight_asks_the_node(fake) -> None:
    fake.answers.append((lambda w, a: w == "node3" and a == ["id", "-u"], "1000\n", 0))
    with pytest.raises(disks.DiskError, match=r"^disk systems need root on node3 "):
        disks.preflight([ide_plan()], NODE)
    fake.answers.insert(0, (lambda w, a: w == "node3" and a == ["id", "-u"], "0\n", 0))
    fake.answers.append((lambda w, a: w == "node3" and a[0] == "sh" and "losetup" in a[2]
                         and "command -v" in a[2], "", 1))
    with pytest.raises(disks.DiskError, match=r"^losetup is missing on node3: install util-linux"):
        disks.preflight([ide_plan()], NODE)


def test_an_unreachable_node_is_one_sentence(fake) -> None:
    fake.answers.append((lambda w, a: w == "node3", "", 255))
    with pytest.raises(disks.DiskError, match="cannot reach node node3 over SSH"):
        diskbuild.ensure(ide_plan(), {}, log=lambda _m: None, hosts=NODE)


def test_the_cluster_placer_builds_on_the_roles_node() -> None:
    where = cluster.ClusterPlacer(lab(disk="node2"))
    host = disks.of_role(where, "disk")
    mine = f"/var/lib/tierbench/{model.PROJECT}"  # this checkout's folder in the workdir
    assert (host.node, host.workdir) == ("node2", mine)
    assert host.via.ssh[-1] == "198.18.16.12" and host.via.ssh[0] == "ssh"
    assert host.root() == Path(f"{mine}/disks")
    assert host.prefix() == "tierbench-disk@node2-"
    assert disks.of_role(where, "web").node == "node3"
    assert disks.of_role(local.LocalPlacer(), "web") is disks.LOCAL


def test_the_disk_benchmark_has_a_host_overlay_with_its_role() -> None:
    assert model.host_overlay("compose/disk.yml") == "compose/host-disk.yml"
    spec = config(["docker-compose.yml", "compose/disk.yml"], ["disk"])["services"]["disk-bench"]
    assert spec["network_mode"] == "host" and not spec.get("networks")
    assert spec["labels"][hostnet.ROLE_LABEL] == "disk"


@pytest.mark.parametrize("name", ["dc-disk-file", "dc-cache-hit", "dc-disk-classes"])
def test_disk_system_docroots_run_on_the_web_node(name: str) -> None:
    exp = registry.load_experiment(name)
    assert registry.kind("web").cluster_roles(exp) == ["loadgen", "proxy", "web"]


def test_web_servers_disks_go_to_the_web_node(monkeypatch) -> None:
    where = cluster.ClusterPlacer(lab())
    p = disks.plan(disks.BUILTIN["scsi"], disks.layout(disks.BUILTIN["scsi"]), ["web"],
                   [1 << 20])
    assert {s: h.node for s, h in webdisks.hosts_for(where, p).items()} == {"web": "node3"}


def test_each_servers_disks_are_built_on_the_node_its_container_goes_to() -> None:
    scsi = disks.BUILTIN["scsi"]
    web = disks.plan(scsi, disks.layout(scsi, 3), ["web", "web2", "web3"], [1 << 20])
    io = orangefs.storage_plan(disks.BUILTIN["ide"], 3, 3 << 20, client_disk_bytes=1 << 20)
    c = lab(web=["node2", "node3"], pfs_io=["node4", "node5"], pfs_clients=["node1", "node2"])
    where = cluster.ClusterPlacer(c)
    # the nodes place() gives the containers (round the role's nodes, in order)
    conf = config(["docker-compose.yml", "compose/web-servers.yml", "compose/pvfs.yml"], ["pfs"])
    wanted = ["web", "web2", "web3", "pvfs-io1", "pvfs-io2", "pvfs-io3", "pvfs-client"]
    placed = {s: next(iter(h)) for s, h in hostnet.place(conf, wanted, {}, c).items()}
    assert placed == {"web": "node2", "web2": "node3", "web3": "node2", "pvfs-io1": "node4",
                      "pvfs-io2": "node5", "pvfs-io3": "node4", "pvfs-client": "node1"}
    hosts = {**webdisks.hosts_for(where, web), **webdisks.hosts_for(where, io)}
    assert {s: h.node for s, h in hosts.items()} == placed
    assert webdisks.plans_by_role([web, io]) == {"web": [web], "pfs_io": [io]}
    # the images each node must hold: the busiest node's share of the system, on that role
    [need] = disks.disk_images([web], {}, functools.partial(webdisks.hosts_for, where), "web")
    assert need.bytes == 2 * web.device_bytes and need.role == "web"  # web and web3 on node2
    assert "scsi on each of 2 nodes, at most (2 devices)" in need.what
    [one] = disks.disk_images([web], {}, lambda p: dict.fromkeys(p.servers, disks.LOCAL), "web")
    assert one.bytes == web.image_bytes() and one.role is None


def test_a_web_nodes_file_set_job_writes_only_its_own_servers_disks() -> None:
    def server(name: str, node: str) -> diskbuild.Server:
        return diskbuild.Server(name, f"/w/disks/{name}", [], [],
                                host={"node": node, "ssh": list(SSH), "workdir": "/w"})

    built = diskbuild.Built(key={}, servers=[server("web", "node2"), server("web2", "node3"),
                                             server("web3", "node2")])
    assert webdisks.fileset_node_env(built) == {
        "node2": {"FILESET_NODE_ROOTS": '["/srv/disks/web", "/srv/disks/web3"]'},
        "node3": {"FILESET_NODE_ROOTS": '["/srv/disks/web2"]'}}
    assert webdisks.fileset_node_env(None) == {}
    here = diskbuild.Built(key={}, servers=[diskbuild.Server("web", "/s/web", [], [])])
    assert webdisks.fileset_node_env(here) == {}  # one host: every root (the default)


def test_real_devices_spread_over_several_nodes_are_refused() -> None:
    real = disks.System("mine", 1, None, None, False, paths=("/dev/sdb", "/dev/sdc", "/dev/sdd"))
    p = disks.plan(real, disks.layout(real, 3), ["web", "web2", "web3"], [1 << 20])
    where = cluster.ClusterPlacer(lab(web=["node2", "node3"]))
    with pytest.raises(disks.DiskError, match=r"disk system mine names real devices, which are "
                       r"one host's, but its 3 servers go on 2 nodes \(node2, node3\)"):
        disks.preflight_on([p], functools.partial(webdisks.hosts_for, where))


def test_the_disk_kind_plans_on_a_cluster_with_its_role() -> None:
    done = subprocess.run([sys.executable, "-m", "tierbench.cli", "plan", "dc-disk-basic",
                           "--cluster", str(ROOT / "cluster.example.yml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "  role disk: web1 (ens1f0 10.20.0.3)" in done.stdout
    assert ("md with a 4 KiB chunk (004 §3.2's stripe), or device-mapper striping at that "
            "chunk, or btrfs with its fixed 64 KiB stripe if web1's kernel has neither"
            ) in done.stdout
