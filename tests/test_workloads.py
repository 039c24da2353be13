"""File sets and traces: deterministic, with the statistics they claim."""

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from workloads import filesets, traces

LOG_SET = {"kind": "uniform-log", "files": 400, "min_size": 1024, "max_size": 65536, "seed": 7}


def test_single_set_is_one_file_of_the_size() -> None:
    assert filesets.files({"kind": "single", "size": 4096}) == [("/single-4096/file.bin", 4096)]


def test_log_uniform_sizes_are_in_range_and_reproducible() -> None:
    files = filesets.files(LOG_SET)
    sizes = [s for _, s in files]
    assert len(files) == 400 and len({p for p, _ in files}) == 400
    assert 1024 <= min(sizes) and max(sizes) <= 65536
    assert files == filesets.files(dict(LOG_SET))
    assert files != filesets.files({**LOG_SET, "seed": 8})
    # log-uniform: the median sits near the geometric mean of the bounds (8 KiB)
    median = sorted(sizes)[len(sizes) // 2]
    assert 5000 < median < 13000


def test_write_creates_exact_files_and_keeps_good_ones(tmp_path: Path) -> None:
    specs = [{"kind": "single", "size": 5000}, {**LOG_SET, "files": 5}]
    assert filesets.write(specs, tmp_path) == (6, 0)
    for spec in specs:
        for rel, size in filesets.files(spec):
            assert (tmp_path / rel.lstrip("/")).stat().st_size == size
    assert filesets.write(specs, tmp_path) == (0, 6)
    victim = tmp_path / filesets.files(specs[0])[0][0].lstrip("/")
    victim.write_bytes(b"short")
    assert filesets.write(specs, tmp_path) == (1, 5)


def test_bad_fileset_spec_is_refused() -> None:
    with pytest.raises(filesets.FilesetError):
        filesets.files({"kind": "uniform-log", "files": 3, "min_size": 10, "max_size": 5})
    with pytest.raises(filesets.FilesetError):
        filesets.set_name({"kind": "pareto"})


def chi_square(observed: Counter, probs: list[float], total: int) -> float:
    return sum((observed.get(k, 0) - total * p) ** 2 / (total * p) for k, p in enumerate(probs))


def test_zipf_sampler_fits_its_alpha_and_rejects_a_wrong_one() -> None:
    n, count = 50, 200_000
    ranks = Counter(traces.zipf_sample(n, 0.9, count, seed=3))
    right = chi_square(ranks, traces.zipf_weights(n, 0.9), count)
    wrong = chi_square(ranks, traces.zipf_weights(n, 0.75), count)
    # 49 degrees of freedom: the 99.9th percentile of chi-square is about 85.4
    assert right < 85.4
    assert wrong > 85.4
    # the head: rank 1 is drawn about 1/H(n, 0.9) of the time
    assert math.isclose(ranks[0] / count, traces.zipf_weights(n, 0.9)[0], rel_tol=0.03)


def test_zipf_trace_maps_popularity_to_files_with_a_seeded_shuffle() -> None:
    spec = {"name": "z", "kind": "zipf", "alpha": 0.9, "requests": 5000, "fileset": LOG_SET}
    trace = traces.build(spec, seed=11)
    assert len(trace) == 5000 and trace == traces.build(spec, seed=11)
    paths = {p for p, _ in filesets.files(LOG_SET)}
    assert set(trace) <= paths
    tops = {Counter(traces.build(spec, seed=s)).most_common(1)[0][0] for s in range(1, 6)}
    assert len(tops) > 1  # the most popular file depends on the seed, not on file order


def test_trace_file_round_trip_skips_comments(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    traces.write(path, ["/a", "/b"], "made by a test\nseed: 1")
    assert path.read_text().startswith("# made by a test\n# seed: 1\n")
    assert traces.read(path) == ["/a", "/b"]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(traces.TraceError):
        traces.read(tmp_path / "empty.txt")


def test_cursors_walk_each_clients_sequence_reading_short_ones_once(tmp_path: Path) -> None:
    # sequences shorter than, equal to and longer than a block (traces.AHEAD), the longer ones
    # wrapping in the middle of a block, with and without subsets, clients starting anywhere
    for n, subset, clients in ((1, None, 3), (traces.AHEAD, None, 1), (150, None, 4),
                               (3 * 10, 10, 5), (2 * 100, 100, 3)):
        paths = [f"/p{i}" for i in range(n)]
        path = tmp_path / f"t{n}-{subset}.txt"
        traces.write(path, paths, "cursor test", subset=subset)
        for client in range(clients):
            cursor = traces.Cursor(path, client, clients)
            want = traces.client_sequence(paths, subset, client, clients)
            count = 3 * len(want) + 7
            assert [next(cursor) for _ in range(count)] == [want[i % len(want)]
                                                           for i in range(count)]
            # a sequence of at most a block was read once: its file is already closed
            assert cursor._fh.closed == (len(want) <= traces.AHEAD)
            cursor.close()


def test_the_trace_reader_does_not_import_numpy() -> None:
    # the Locust engine imports workloads.traces in every load run: numpy's import cost 0.04
    # CPU-s of each in the loadgen image (against a bare FastHttpUser, which has no such import)
    code = "import sys; from workloads import traces; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("number", sorted(filesets.CLASSES))
def test_class_working_set_and_size_range(number: int) -> None:
    top, target = filesets.CLASSES[number]
    files = filesets.files({"kind": "class", "class": number, "seed": 1})
    sizes = [s for _, s in files]
    assert abs(sum(sizes) - target) <= 0.01 * target
    assert filesets.total_bytes({"kind": "class", "class": number}) == sum(sizes)
    assert min(sizes) >= filesets.CLASS_MIN_SIZE and max(sizes) <= top
    # log-uniform over [1 KiB, top]: about half the files lie below the geometric mean
    below = sum(s < (filesets.CLASS_MIN_SIZE * top) ** 0.5 for s in sizes) / len(sizes)
    assert 0.4 < below < 0.6
    assert files == filesets.files({"kind": "class", "class": number, "seed": 1})
    assert files != filesets.files({"kind": "class", "class": number, "seed": 2})


def test_class_table_matches_004_table_2() -> None:
    mib = 1 << 20
    assert {n: (top // 1024, ws // mib) for n, (top, ws) in filesets.CLASSES.items()} == {
        0: (250, 25), 1: (1024, 100), 2: (4096, 450), 3: (16384, 2048), 4: (65536, 6144)}
    with pytest.raises(filesets.FilesetError):
        filesets.files({"kind": "class", "class": 5})


def test_zipf_mapping_can_follow_size() -> None:
    spec = {"name": "z", "kind": "zipf", "alpha": 1.2, "requests": 3000, "fileset": LOG_SET}
    sizes = dict(filesets.files(LOG_SET))
    small = Counter(traces.build({**spec, "mapping": "small-first"}, seed=1)).most_common(1)[0][0]
    large = Counter(traces.build({**spec, "mapping": "large-first"}, seed=1)).most_common(1)[0][0]
    assert sizes[small] == min(sizes.values()) and sizes[large] == max(sizes.values())
    with pytest.raises(traces.TraceError):
        traces.build({**spec, "mapping": "by-name"}, seed=1)


def test_per_client_subsets_are_separate_and_each_zipf(tmp_path: Path) -> None:
    spec = {"name": "z", "kind": "zipf", "alpha": 0.9, "per_client": 1000, "subsets": 4,
            "fileset": LOG_SET}
    trace = traces.build(spec, seed=5)
    assert len(trace) == 4000 and traces.subset_size(spec) == 1000
    blocks = [trace[k * 1000:(k + 1) * 1000] for k in range(4)]
    assert len({tuple(b) for b in blocks}) == 4
    path = tmp_path / "t.txt"
    traces.write(path, trace, "subsets", subset=1000)
    paths, subset = traces.read_with_subset(path)
    assert (paths, subset) == (trace, 1000)
    # client i replays subset i mod 4; without subsets, client i starts at i * L / N
    assert traces.client_sequence(paths, subset, 6, 8) == blocks[2]
    assert traces.client_sequence(["a", "b", "c", "d"], None, 1, 2) == ["c", "d", "a", "b"]
    with pytest.raises(traces.TraceError):
        traces.write(tmp_path / "bad.txt", trace[:1500], "x", subset=1000)


def test_validate_names_the_key() -> None:
    with pytest.raises(traces.TraceError, match=r"t\.mapping"):
        traces.validate("t", {"kind": "zipf", "mapping": "up"})
    with pytest.raises(traces.TraceError, match=r"t\.subsets: only with per_client"):
        traces.validate("t", {"kind": "zipf", "subsets": 3})
    with pytest.raises(traces.TraceError, match=r"t\.fileset\.class"):
        traces.validate("t", {"kind": "zipf", "fileset": {"kind": "class", "class": 9}})
    with pytest.raises(traces.TraceError, match=r"t\.log"):
        traces.validate("t", {"kind": "worldcup"})
    traces.validate("t", {"kind": "zipf", "per_client": 10000, "subsets": 8, "mapping": "random"})


def test_mix_trace_gives_each_client_its_own_subset_of_one_site_by_weight() -> None:
    part = {"kind": "zipf", "alpha": 0.9,
            "fileset": {"kind": "uniform-log", "files": 50, "min_size": 1024, "max_size": 4096,
                        "seed": 2}}
    bg = {**part, "fileset": {**part["fileset"], "seed": 1}}
    spec = {"name": "m", "kind": "mix", "per_client": 500, "subsets": 12,
            "parts": [{"site": "background", "weight": 2, **bg},
                      {"site": "foreground", "weight": 1, **part}]}
    paths = traces.build(spec, 7)
    sites = traces.sites(spec)
    assert sites == {"background": "/log-50x1024-4096-s1/", "foreground": "/log-50x1024-4096-s2/"}
    size = traces.subset_size(spec)
    assert size == 500 and len(paths) == 12 * size
    # of every 3 clients, 2 replay the background site and 1 the foreground, whatever the count
    seqs = [traces.client_sequence(paths, size, c, 12) for c in range(12)]
    site_of = [{p.split("/")[1] for p in seq} for seq in seqs]
    assert site_of == [{"log-50x1024-4096-s1"}, {"log-50x1024-4096-s1"},
                       {"log-50x1024-4096-s2"}] * 4
    assert len({tuple(seq) for seq in seqs}) == 12  # every client its own requests
    # each subset is a Zipf draw over that site's files: the most popular file of the site
    top = max(set(seqs[2]), key=seqs[2].count)
    assert seqs[2].count(top) > 500 * 0.1
    assert traces.filesets_of(spec) == [bg["fileset"], part["fileset"]]
    assert traces.build(spec, 7) == paths and traces.build(spec, 8) != paths


def test_hit_ratio_traces_mix_one_hot_file_with_files_asked_for_once() -> None:
    spec = {"name": "t", "kind": "hit-ratio", "size": 4096, "hit_ratio": 0.5, "requests": 1000}
    fs = traces.fileset_of(spec)
    assert fs == {"kind": "same-size", "size": 4096, "files": 1001}
    files = filesets.files(fs)
    assert len(files) == 1001 and {s for _, s in files} == {4096}
    paths = traces.build(spec, seed=1)
    hot = files[0][0]
    assert len(paths) == 1000 and paths.count(hot) == 500
    cold = [p for p in paths if p != hot]
    assert len(set(cold)) == len(cold) == 500  # every other file asked for once
    # evenly spread: every window of 10 requests has 5 hot ones
    assert all(paths[i:i + 10].count(hot) == 5 for i in range(0, 1000, 10))
    for ratio, hits in ((1.0, 1000), (0.0, 0), (0.25, 250)):
        built = traces.build({**spec, "hit_ratio": ratio}, seed=1)
        assert built.count(hot) == hits and len(set(built) - {hot}) == 1000 - hits


def test_dynamic_share_is_exact_sized_like_the_files_and_seeded() -> None:
    """A zipf trace with 30 % dynamic range reads: every dynamic request asks for the size of
    the file the static request it replaced asked for; the share holds over every prefix."""
    spec = {"name": "z", "kind": "zipf", "alpha": 0.9, "requests": 2000, "fileset": LOG_SET,
            "dynamic": {"share": 0.3, "query": "range", "work": 4, "range_rows": 7}}
    paths = traces.build(spec, 5)
    static = traces.build({k: v for k, v in spec.items() if k != "dynamic"}, 5)
    sizes = dict(filesets.files(LOG_SET))
    assert len(paths) == len(static) == 2000
    dynamic = [i for i, p in enumerate(paths) if p.startswith(traces.DYNAMIC_PREFIX)]
    assert len(dynamic) == 600
    for n in (10, 100, 1000):  # evenly spread: floor(n * 0.3) of the first n
        assert sum(1 for i in dynamic if i < n) == math.floor(n * 0.3)
    for i, p in enumerate(paths):
        if i in set(dynamic):
            head, _, query = p.partition("?")
            assert head == f"/dyn/range/{sizes[static[i]]}"
            assert query.startswith("k=") and query.endswith("&w=4&n=7")
        else:
            assert p == static[i]
    keys = [p.split("k=")[1].split("&")[0] for p in paths if p.startswith("/dyn/")]
    assert len(set(keys)) > 590  # every dynamic request its own row (31-bit keys)
    assert paths == traces.build(spec, 5) and paths != traces.build(spec, 6)


def test_a_dynamic_single_trace_is_stretched_and_writes_have_their_prefix() -> None:
    spec = {"name": "w", "kind": "single", "size": 8192,
            "dynamic": {"share": 1, "query": "write", "requests": 50}}
    paths = traces.build(spec, 1)
    assert len(paths) == 50 and all(p.startswith("/dyn/write/8192?k=") for p in paths)
    assert all(p.startswith(traces.WRITE_PREFIX) for p in paths)
    assert traces.content(spec) == "dynamic"
    assert traces.content({**spec, "dynamic": {"share": 0.5}}) == "mixed"
    assert traces.content({"name": "s", "kind": "single", "size": 1}) == "static"
    # per-client subsets keep their size: no stretching
    sub = {"name": "z", "kind": "zipf", "alpha": 0.5, "per_client": 10, "subsets": 3,
           "fileset": LOG_SET, "dynamic": {"share": 0.5, "requests": 1000}}
    assert len(traces.build(sub, 1)) == 30


def test_dynamic_requests_are_refused_where_they_cannot_be() -> None:
    with pytest.raises(traces.TraceError, match=r"t\.dynamic: only single and zipf"):
        traces.validate("t", {"kind": "mix", "dynamic": {}})
    big = {"name": "b", "kind": "single", "size": 32 << 20, "dynamic": {}}
    with pytest.raises(traces.TraceError, match="at most 16 MiB"):
        traces.build(big, 1)
    with pytest.raises(traces.TraceError, match="query one of point, range, write"):
        traces.build({**big, "size": 10, "dynamic": {"query": "join"}}, 1)
