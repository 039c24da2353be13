"""The World Cup 98 reader on a log this test writes in the archive's binary format."""

import gzip
import struct
from pathlib import Path

import pytest

from workloads import filesets, traces, worldcup
from workloads.worldcup import Record


def raw(ts: int, client: int, obj: int, size: int, method: int, status: int, ftype: int,
        server: int) -> bytes:
    """One record packed by hand (not with the module's encoder): 4 x uint32, 4 x uint8, BE."""
    return struct.pack(">IIIIBBBB", ts, client, obj, size, method, status, ftype, server)


# status byte: 2 high bits HTTP version (1 = HTTP/1.0), 6 low bits the code's index
# (2 = 200, 13 = 304, 19 = 404)
LOG = [
    raw(894000000, 7, 100, 5000, 0, (1 << 6) | 2, 0, 0x21),   # GET 200 obj 100
    raw(894000000, 8, 200, 900, 0, (2 << 6) | 2, 1, 0x02),    # GET 200 obj 200 (HTTP/1.1)
    raw(894000001, 7, 100, 0, 0, (1 << 6) | 13, 0, 0x21),     # GET 304: not replayed
    raw(894000001, 9, 300, 4321, 1, (1 << 6) | 2, 1, 0x21),   # HEAD: not replayed
    raw(894000002, 9, 400, 10, 0, (1 << 6) | 19, 7, 0x21),    # GET 404: not replayed
    raw(894000003, 7, 100, 5200, 0, (1 << 6) | 2, 0, 0x60),   # GET 200 obj 100, larger
    raw(894000004, 8, 200, 900, 0, (1 << 6) | 2, 1, 0x02),    # GET 200 obj 200
    raw(894000005, 8, 100, 5200, 0, (1 << 6) | 2, 0, 0x02),   # GET 200 obj 100
    raw(894000006, 8, 500, 0, 0, (1 << 6) | 2, 6, 0x02),      # GET 200 size 0: left out
]


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    path = tmp_path / "wc_day99_1.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"".join(LOG))
    return path


def test_records_decode_every_field(log: Path) -> None:
    recs = list(worldcup.records(log))
    assert len(recs) == len(LOG)
    assert recs[0] == Record(894000000, 7, 100, 5000, "GET", "HTTP/1.0", 200, "HTML", 0x21)
    assert recs[1].version == "HTTP/1.1" and recs[1].type == "IMAGE"
    assert recs[2].status == 304 and recs[3].method == "HEAD" and recs[4].status == 404
    assert all(worldcup.decode(worldcup.encode(r)) == r for r in recs)


def test_trace_and_fileset_follow_the_log(log: Path) -> None:
    spec = {"kind": "worldcup", "log": str(log)}
    name = worldcup.set_name(spec)
    assert traces.build({"name": "wc", **spec}, seed=1) == [
        f"/{name}/o100.bin", f"/{name}/o200.bin", f"/{name}/o100.bin", f"/{name}/o200.bin",
        f"/{name}/o100.bin"]
    # most requested first, each of its largest logged 200 size
    assert filesets.files(spec) == [(f"/{name}/o100.bin", 5200), (f"/{name}/o200.bin", 900)]
    window = {**spec, "skip": 1, "requests": 2}
    assert worldcup.trace(window) == [f"/{worldcup.set_name(window)}/o{o}.bin" for o in (200, 100)]


def test_raw_logs_and_bad_logs(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"".join(LOG))
    assert len(list(worldcup.records(plain))) == len(LOG)
    cut = tmp_path / "cut"
    cut.write_bytes(b"".join(LOG)[:-3])
    with pytest.raises(worldcup.WorldCupError, match="partial record"):
        list(worldcup.records(cut))
    with pytest.raises(worldcup.WorldCupError, match="cannot read"):
        worldcup.trace({"kind": "worldcup", "log": str(tmp_path / "missing.gz")})
