"""Sharing a rack safely, without a stack (issue 39, items 4-7): names and paths with control
characters refused, devices in use refused from captured lsblk/blkid/holders/swaps outputs,
system folders and folders tierbench does not own refused before root uses them, and the
per-node run lock (held, stale, released)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from typing import Annotated, Any

import pytest

from tierbench.config.errors import ConfigError
from tierbench.config.models import Model, safe_name, text, validate
from tierbench.kinds import registry
from tierbench.modes.model import ModeFile
from tierbench.placement import diskuse, disks
from tierbench.placement.clusterfile import ClusterError, parse_cluster

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
    plan = disks.plan(system, disks.layout(system, None), ["web"], [1 << 20])
    with pytest.raises(disks.DiskError) as info:
        disks.preflight([plan])
    assert str(info.value) == ("disk system mine: /dev/sdb is in use (it is held by dm-0 "
                               "(/sys/class/block/sdb/holders)): name a device nothing uses")
    assert not [a for a in seen if a[0] in ("mkfs.ext3", "mount", "blockdev")]
