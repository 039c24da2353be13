"""The World Cup 98 reader on logs this test writes in the archive's binary format: fields,
results equal to a plain one-record-at-a-time reader (the oracle below), and a log of millions
of records prepared in bounded memory."""

import gzip
import json
import struct
import subprocess
import sys
from collections import Counter
from itertools import cycle, islice
from pathlib import Path

import numpy as np
import pytest

from workloads import filesets, traces, worldcup
from workloads.worldcup import Record

ROOT = Path(__file__).resolve().parent.parent


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
    recs = [worldcup.decode(r.tobytes()) for chunk in worldcup.chunks(log) for r in chunk]
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
    assert traces.build(window, 1) == [f"/{worldcup.set_name(window)}/o{o}.bin"
                                       for o in (200, 100)]


def test_raw_logs_and_bad_logs(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"".join(LOG))
    assert sum(len(c) for c in worldcup.chunks(plain)) == len(LOG)
    cut = tmp_path / "cut"
    cut.write_bytes(b"".join(LOG)[:-3])
    with pytest.raises(worldcup.WorldCupError, match="partial record"):
        list(worldcup.chunks(cut))
    with pytest.raises(worldcup.WorldCupError, match="cannot read"):
        traces.build({"kind": "worldcup", "log": str(tmp_path / "missing.gz")}, 1)
    damaged = tmp_path / "damaged.gz"
    damaged.write_bytes(gzip.compress(b"".join(LOG) * 100)[:200])
    with pytest.raises(worldcup.WorldCupError, match="cannot read"):
        list(worldcup.chunks(damaged))
    empty = tmp_path / "no-gets"
    empty.write_bytes(LOG[3] + LOG[4])
    with pytest.raises(worldcup.WorldCupError, match="no successful GET"):
        worldcup.files({"kind": "worldcup", "log": str(empty)})


# --------------------------------------------------------------------------- the oracle


def oracle(path: Path, skip: int, limit: int | None) -> tuple[list[str], list[tuple[str, int]]]:
    """The trace and file set as the first reader made them: one record at a time with struct,
    every replayed object ID kept in a list."""
    order, sizes, seen = [], {}, 0
    data = path.read_bytes()
    for i in range(0, len(data), 20):
        _, _, obj, size, method, status, _, _ = struct.unpack(">IIIIBBBB", data[i:i + 20])
        if method != 0 or status & 0x3F != 2:
            continue
        seen += 1
        if seen <= skip:
            continue
        order.append(obj)
        sizes[obj] = max(sizes.get(obj, 0), size)
        if limit is not None and len(order) >= limit:
            break
    order = [o for o in order if sizes[o] > 0]
    counts = Counter(order)
    name = worldcup.set_name({"log": path.name, "skip": skip, "requests": limit}
                             if limit is not None else {"log": path.name, "skip": skip})
    ranked = sorted((o for o in sizes if sizes[o] > 0), key=lambda o: (-counts[o], o))
    return ([f"/{name}/o{o}.bin" for o in order],
            [(f"/{name}/o{o}.bin", sizes[o]) for o in ranked])


def random_log(path: Path, n: int, seed: int) -> None:
    """n records: Zipf-popular objects (some only ever of size 0), GETs and HEADs, 200s, 304s
    and 404s, written with numpy."""
    rng = np.random.default_rng(seed)
    recs = np.zeros(n, worldcup.DTYPE)
    recs["timestamp"] = 894000000 + np.arange(n) // 100
    recs["client"] = rng.integers(0, 5000, n)
    recs["obj"] = rng.zipf(1.4, n) % 3000
    recs["size"] = np.where(recs["obj"] % 97 == 0, 0, recs["obj"] * 13 + rng.integers(0, 3, n))
    recs["method"] = rng.choice([0] * 9 + [1], n)
    recs["status"] = (1 << 6) | rng.choice([2] * 8 + [13, 19], n)
    path.write_bytes(recs.tobytes())


@pytest.mark.parametrize("skip, limit", [(0, None), (0, 1000), (777, 50_000), (12_345, None),
                                         (0, 299_999)])
def test_chunked_reader_equals_the_record_by_record_oracle(tmp_path: Path, skip: int,
                                                           limit: int | None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "wc_day98_1"
    random_log(log, 300_000, seed=skip)
    # small chunks, so that windows and objects cross chunk boundaries
    monkeypatch.setattr(worldcup, "CHUNK_RECORDS", 4096)
    monkeypatch.setattr(traces, "INDEX_STEP", 1000)
    spec = {"name": "wc", "kind": "worldcup", "log": str(log), "skip": skip}
    if limit is not None:
        spec["requests"] = limit
    want_trace, want_files = oracle(log, skip, limit)
    assert filesets.files(spec) == want_files
    out = tmp_path / "wc.txt"
    assert traces.write_chunks(out, traces.chunks(spec, 1), "wc") == len(want_trace)
    assert traces.read(out) == want_trace
    assert worldcup.trace_bytes(spec) == sum(len(p) + 1 for p in want_trace)
    # every client's cursor walks what the format's rule says, starting anywhere
    for client, clients in ((0, 1), (3, 7), (6, 7)):
        cursor = traces.Cursor(out, client, clients)
        want = traces.client_sequence(want_trace, None, client, clients)
        assert [next(cursor) for _ in range(2500)] == list(islice(cycle(want), 2500))


# --------------------------------------------------------------------------- bounded memory

PREPARE = """
import json, sys, time
def peak_mb():  # this process's own high-water mark (ru_maxrss would count its parent's)
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM")) / 1024
from pathlib import Path
from workloads import filesets, traces
spec = {"name": "wc", "kind": "worldcup", "log": sys.argv[1]}
t = time.monotonic()
files = filesets.files(spec)
n = traces.write_chunks(Path(sys.argv[2]), traces.chunks(spec, 1), "wc")
print(json.dumps({"requests": n, "files": len(files), "s": time.monotonic() - t,
                  "peak_mb": peak_mb()}))
"""


def prepare(log: Path, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PREPARE, str(log), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_log_of_millions_of_records_is_prepared_in_flat_memory(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    random_log(small, 500_000, seed=1)
    with large.open("wb") as fh:  # 6 million records (120 MB), written a million at a time
        for k in range(6):
            part = tmp_path / "part"
            random_log(part, 1_000_000, seed=10 + k)
            fh.write(part.read_bytes())
        part.unlink()
    a = prepare(small, tmp_path / "small.txt")
    b = prepare(large, tmp_path / "large.txt")
    assert b["requests"] > 10 * a["requests"] > 3_500_000
    assert b["requests"] == sum(1 for _ in (tmp_path / "large.txt").open()) - 1  # header line
    # Flat: the replayed requests alone, kept in a list, would add 8 bytes each (references
    # to shared paths) to 36 (ints): 32 to 150 MB more for the larger log.
    assert b["peak_mb"] - a["peak_mb"] < 20, (a, b)


# --------------------------------------------------------------------------- the results' size


def worldcup_experiment(tmp_path: Path, log: Path, engine: str = "wrk") -> Path:
    """An experiment replaying LOG, named as it must be: relative to the data folder (the
    caller points the stack's data folder at LOG's)."""
    path = tmp_path / "wc.yml"
    path.write_text(f"name: wc\nkind: web\nengine: {engine}\nrepetitions: 2\n"
                    "load: {users: 8, warmup_s: 1, measure_s: 4}\nmodes: [offloads-on]\n"
                    f"traces: [{{name: wc, kind: worldcup, log: {log.name}}}]\n")
    return path


def test_the_plan_counts_the_trace_and_records_and_refuses_what_does_not_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tierbench import runner
    from tierbench.config.errors import ConfigError
    from tierbench.kinds import registry
    from tierbench.kinds.web import settings, sizes
    from tierbench import space

    log = tmp_path / "wc_day97_1"
    random_log(log, 200_000, seed=5)
    spec = {"kind": "worldcup", "log": str(log)}
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(worldcup, "DATA_DIR", tmp_path)
    monkeypatch.setattr(settings, "STACK_DATA", tmp_path)
    wrk = registry.load_experiment(str(worldcup_experiment(tmp_path, log)))
    need = next(n for n in registry.kind("web").needs(wrk, runner.points_of(wrk))
                if n.what.startswith("the results of"))
    written = tmp_path / "wc.txt"
    traces.write_chunks(written, traces.chunks(spec, 1), "")
    lines = written.stat().st_size  # no header: request lines only
    seconds = 1 + 4 + sizes.POINT_OVERHEAD_S
    assert need.bytes == lines + 2 * seconds * sizes.SAMPLE_BYTES  # the trace, 2 points' samples
    # Locust adds its records: Parquet for every point, the CSV of one
    locust = registry.load_experiment(str(worldcup_experiment(tmp_path, log, "locust")))
    more = next(n for n in registry.kind("web").needs(locust, runner.points_of(locust))
                if n.what.startswith("the results of")).bytes - need.bytes
    records = sizes.LOCUST_RPS_PER_PROCESS * seconds
    assert more == records * (2 * sizes.RECORD_BYTES + sizes.CSV_RECORD_BYTES + 60)
    room = space.disk_room
    monkeypatch.setattr(space, "disk_room", lambda path: need.bytes // 2
                        if path == tmp_path / "results" else room(path))
    # (on one file system with Docker's data folder, the file sets add to the results)
    with pytest.raises(ConfigError, match="the results of .* need .*the results folder .*"
                                          "which has"):
        runner.space_lines(wrk)
