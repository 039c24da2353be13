"""The `pfs:` block of a parallel file system experiment: the test, the cluster (I/O servers,
strip size, storage: tmpfs, volumes or a disk system, timeouts, a fault) and each test's
factors; the experiment's own disk systems; declared models with one sentence per problem."""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from tierbench.config.models import (Model, choice, flag, number, one_or_many, problem, text,
                                     whole)
from tierbench.tiers import orangefs
from tierbench.tiers.orangefs import MAX_IO_SERVERS, STORAGE
from tierbench.tiers import disks

TESTS = ("concurrent", "streams", "basic")
FILESYSTEMS = {"tmpfs": "/scratch", "disk": "/disk", "orangefs": "/mnt/orangefs",
               "orangefs-native": "/mnt/orangefs"}
ACCESS = ("native", "fuse")
MIB = 1 << 20
SYSTEM_NAME = r"^[a-z][a-z0-9-]*$"


class Fault(Model):
    """Stop one server `after_s` seconds into the first timed phase of the run."""

    stop: Annotated[str, choice(*orangefs.server_services(MAX_IO_SERVERS))]
    after_s: Annotated[float, number(0)] = 1


class Pfs(Model):
    """The `pfs:` block of an experiment file."""

    test: Annotated[str, choice(*TESTS)]
    io_servers: Annotated[list[int], one_or_many(whole(1, MAX_IO_SERVERS), "whole number")] = [2]
    strip_size: Annotated[int, whole(4096)] = 65536
    # tmpfs, disk (Docker volumes) or a disk system's name: each I/O server (and the basic
    # test's local disk) on its own device(s) of it (004 §4.1: ext3 on an IDE disk)
    storage: Annotated[str, text(SYSTEM_NAME, "tmpfs, disk or ide")] = "tmpfs"
    measure_s: Annotated[float, number(0.5)] = 10
    job_timeout_s: Annotated[int, whole(2, 300)] = 15
    fault: Fault | None = None
    clients: Annotated[list[int], one_or_many(whole(1, 16), "whole number")] = [1, 2]
    streams: Annotated[list[int], one_or_many(whole(1, 256), "whole number")] = [1, 4]
    client_containers: Annotated[int, whole(1, 16)] = 4
    access: Annotated[str, choice(*ACCESS)] = "native"
    region_mb_per_server: Annotated[float, number(0.0625)] = 2
    regions_per_stream: Annotated[int, whole(1, 1024)] = 16
    filesystems: Annotated[list[str], one_or_many(choice(*FILESYSTEMS), "file system")] = ["tmpfs", "disk", "orangefs"]
    buffers: Annotated[list[int], one_or_many(whole(512, 64 * MIB), "whole number")] = [4096, 65536, MIB]
    file_mb: Annotated[float, number(1, 4096)] = 256
    drop_caches: Annotated[bool, flag()] = False
    # basic: each phase moves the file once instead of repeating it until measure_s has passed
    # (with drop_caches, the read is then one pass of a file not in the page cache: 004 Fig. 4b)
    single_pass: Annotated[bool, flag()] = False
    # basic: after the read, the file sent to a TCP sink in the client container with read/write
    # calls of `buffer` bytes (phase sendrw) and with sendfile(2) (phase sendfile): 004 Fig. 4-5;
    # not for orangefs-native (the client library gives no file descriptor to send from)
    send: Annotated[bool, flag()] = False

    @model_validator(mode="after")
    def _per_test(self) -> Pfs:
        per_test = {"concurrent": {"clients", "access", "region_mb_per_server",
                                   "regions_per_stream"},
                    "streams": {"streams", "client_containers", "access",
                                "region_mb_per_server", "regions_per_stream"},
                    "basic": {"filesystems", "buffers", "file_mb", "drop_caches",
                              "single_pass", "send"}}
        common = {"test", "io_servers", "strip_size", "storage", "measure_s", "job_timeout_s",
                  "fault"}
        allowed = common | per_test[self.test]
        extra = sorted(set(self.model_fields_set) - allowed)
        if extra:
            raise problem("unknown key {key} for test {test} (allowed: {allowed})",
                          key=repr(extra[0]), test=self.test, allowed=", ".join(sorted(allowed)))
        return self


class PfsSettings(Model):
    """The keys of a parallel file system experiment besides the common ones."""

    pfs: Pfs
    # disk systems of the experiment's own (real devices, other bandwidths) beside the built-in
    # ide, scsi and raid0 of 004 Table 3; pfs.storage may name one (tiers/disks.py)
    disk_systems: dict[Annotated[str, text(SYSTEM_NAME, "my-disk")],
                       disks.DiskSystemSpec] | None = None

    @model_validator(mode="after")
    def _storage_known(self) -> PfsSettings:
        for name in self.disk_systems or {}:
            if name in STORAGE:
                raise problem("disk_systems: {name} is a storage of its own (tmpfs, disk): name "
                              "the disk system otherwise, such as my-disk", name=repr(name))
        wrong = orangefs.storage_problem("pfs.storage", self.pfs.storage, self.systems())
        if wrong:
            raise problem("{msg}", msg=wrong)
        return self

    def systems(self) -> dict[str, disks.System]:
        """The disk systems pfs.storage may name: built-in and the experiment's own."""
        return disks.resolve(self.disk_systems)

    def storage_system(self) -> disks.System | None:
        """The disk system the I/O servers store on, or None (tmpfs, disk)."""
        return self.systems().get(self.pfs.storage)


def client_disk_bytes(p: Pfs) -> int:
    """Bytes the basic test writes on the client's local disk (0 when it does not use it)."""
    return int(p.file_mb * MIB) if p.test == "basic" and "disk" in p.filesystems else 0


def cluster_clients(p: Pfs) -> int:
    """Client containers the cluster needs."""
    if p.test == "concurrent":
        return max(p.clients)
    return p.client_containers if p.test == "streams" else 1

