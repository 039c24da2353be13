"""The `fs:` block of a file-server experiment: the test, the server (GlusterFS or OrangeFS),
its load, and each test's factors and sizes; 001's nine Filebench workloads as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import model_validator

from tierbench.config.models import Model, choice, number, one_or_many, problem, text, whole
from tierbench.tiers.orangefs import MAX_IO_SERVERS, STORAGE

TESTS = ("dbench", "randread", "filebench", "iozone")
SERVERS = ("gluster", "orangefs")
LOADS = ("idle", "busy")
MIB = 1 << 20
MAX_CLIENTS = 18  # compose/fs.yml's client machines: fs-client, fs-client2 .. fs-client18 (001's 18)


@dataclass(frozen=True)
class Workload:
    """One of 001's nine Filebench workloads: its job file, what it reads or writes, and what
    measures it (the paper's figures are in the fs-filebench report family)."""

    name: str
    title: str
    threads: int
    fileset: str  # a, b, c (read sets the runner lays out) or w (new files the job writes)
    cache: str  # uncached, cached, or "" for writes
    direction: str  # read or write
    metric: str  # mb_per_s or iops


FILEBENCH = {w.name: w for w in (
    Workload("1-seqread-uncached", "1 thread streaming reads, uncached set", 1, "a",
             "uncached", "read", "mb_per_s"),
    Workload("2-seqread-cached", "1 thread streaming reads, same set cached", 1, "a",
             "cached", "read", "mb_per_s"),
    Workload("3-seqread20-uncached", "20 threads streaming reads, another uncached set",
             20, "b", "uncached", "read", "mb_per_s"),
    Workload("4-seqread10-cached", "10 threads streaming reads, same set cached", 10, "b",
             "cached", "read", "mb_per_s"),
    Workload("5-seqwrite", "1 thread streaming writes", 1, "w", "", "write", "mb_per_s"),
    Workload("6-seqwrite20", "20 threads streaming writes", 20, "w", "", "write", "mb_per_s"),
    Workload("7-randread20-uncached", "20 threads 8K random reads, another uncached set",
             20, "c", "uncached", "read", "iops"),
    Workload("8-randread128", "128 threads 8K random reads, same set, from storage", 128,
             "c", "uncached", "read", "iops"),
    Workload("9-syncwrite128", "128 threads 8K synchronous writes", 128, "c", "", "write", "iops"),
)}
# the job file that lays out each read set (fio --create_only)
LAYOUT = {"a": "1-seqread-uncached", "b": "3-seqread20-uncached",
          "c": "7-randread20-uncached"}
SET_B_FILES = 20


class Fs(Model):
    """The `fs:` block of a file-server experiment."""

    test: Annotated[str, choice(*TESTS)]
    server: Annotated[str, choice(*SERVERS)] = "gluster"
    # 002's server load: idle, or busy with an MPEG decoder running all the time
    load: Annotated[list[str], one_or_many(choice(*LOADS), "server load")] = ["idle"]
    # dbench and randread: client programs on the client machine
    programs: Annotated[list[int], one_or_many(whole(1, 64), "whole number")] = [1]
    # dbench: think time before every request, in ms
    think_ms: Annotated[list[float], one_or_many(number(0, 1000), "number")] = [0]
    # randread: each program's file; iozone: each session's file
    file_mb: Annotated[int, whole(1, 65536)] = 16
    # randread: the read size; iozone: the record size
    block: Annotated[int, whole(512, 64 * MIB)] = 1024
    # filebench
    workloads: Annotated[list[str], one_or_many(choice(*FILEBENCH), "workload")] = list(FILEBENCH)
    set_mb: Annotated[int, whole(16, 1 << 20)] = 2048
    write_mb: Annotated[int, whole(1, 1 << 20)] = 128
    # iozone
    sessions: Annotated[list[int], one_or_many(whole(1, 256), "whole number")] = [1, 2, 4]
    io_servers: Annotated[int, whole(1, MAX_IO_SERVERS)] = 4
    client_containers: Annotated[int, whole(1, 16)] = 4
    strip_size: Annotated[int, whole(4096)] = 65536
    storage: Annotated[str, choice(*STORAGE)] = "tmpfs"
    job_timeout_s: Annotated[int, whole(2, 300)] = 15
    # filebench: client machines (containers), each running the workload's threads on its own
    # sets (001: 18 clients, each with its own file system and sets)
    clients: Annotated[int, whole(1, MAX_CLIENTS)] = 1
    # the GlusterFS server's memory limit (Docker's, e.g. 768m or 1g): the page cache over its
    # brick is charged to it, so sets larger than it cannot stay cached (001: 360 GB of sets
    # against 128 GB of memory)
    server_memory: Annotated[str, text(r"^[1-9][0-9]*[mMgG]$", "768m")] | None = None
    # fio's time not counted, then counted (dbench: the time limit; it warms up a fifth more)
    warmup_s: Annotated[int, whole(0, 600)] = 2
    measure_s: Annotated[int, whole(2, 3600)] = 10

    @model_validator(mode="after")
    def _per_test(self) -> Fs:
        per_test = {"dbench": {"load", "programs", "think_ms"},
                    "randread": {"load", "programs", "file_mb", "block", "warmup_s"},
                    "filebench": {"load", "workloads", "set_mb", "write_mb", "warmup_s",
                                  "clients", "server_memory"},
                    "iozone": {"sessions", "file_mb", "block", "warmup_s", "io_servers",
                               "client_containers", "strip_size", "storage",
                               "job_timeout_s"}}
        allowed = {"test", "server", "measure_s"} | per_test[self.test]
        extra = sorted(set(self.model_fields_set) - allowed)
        if extra:
            raise problem("unknown key {key} for test {test} (allowed: {allowed})",
                          key=repr(extra[0]), test=self.test, allowed=", ".join(sorted(allowed)))
        if self.server == "orangefs" and self.test != "iozone":
            raise problem("test {test} runs against the GlusterFS server (server: gluster); "
                          "the OrangeFS tier runs test iozone", test=self.test)
        if self.test == "iozone" and self.server == "gluster":
            pvfs_only = sorted({"io_servers", "client_containers", "strip_size", "storage",
                                "job_timeout_s"} & self.model_fields_set)
            if pvfs_only:
                raise problem("{key} is a setting of the OrangeFS tier (server: orangefs)",
                              key=pvfs_only[0])
        return self


def memory_bytes(limit: str) -> int:
    """A Docker memory limit (768m, 1g) in bytes."""
    return int(limit[:-1]) * {"m": MIB, "g": 1 << 30}[limit[-1].lower()]


class FsSettings(Model):
    """The keys of a file-server experiment besides the common ones."""

    fs: Fs

