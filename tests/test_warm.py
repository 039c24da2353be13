"""The warm pass (issue 44, kinds/web/warm.py): its list of requests (each distinct file of the
trace once, round the targets or through each caching proxy), its sizes counted before anything
is written, the working set against the cache it warms, and a study's recommended scale turning
it on where nothing asks for misses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tierbench import runner, study
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.kinds.web import warm
from tierbench import space
from workloads import traces

SET = {"kind": "uniform-log", "files": 6, "min_size": 1000, "max_size": 4000, "seed": 1}


def experiment(tmp_path: Path, **load: object) -> registry.Experiment:
    """A small web experiment: a Zipf trace over six files through two proxies."""
    data = {"name": "warm-test", "kind": "web", "engine": "wrk", "seed": 3, "repetitions": 1,
            "load": {"users": 2, "warmup_s": 1, "measure_s": 4, **load},
            "modes": ["offloads-on"],
            "traces": [{"name": "z", "kind": "zipf", "alpha": 0.9, "requests": 200,
                        "fileset": SET}],
            "stack": {"proxies": 2}}
    path = tmp_path / "warm-test.yml"
    path.write_text(yaml.safe_dump(data))
    return registry.load_experiment(str(path))


def test_the_working_set_is_each_static_file_once_in_first_asked_order(tmp_path: Path) -> None:
    trace = tmp_path / "t.txt"
    traces.write(trace, ["/a/1", "/a/2", "/a/1", "/dyn/point/4096?k=1&w=1", "/a/3", "/a/2"],
                 "made for the test")
    assert warm.working_set(trace) == ["/a/1", "/a/2", "/a/3"]


def test_each_file_once_round_the_targets_or_through_every_caching_proxy() -> None:
    paths = ["/a/1", "/a/2", "/a/3"]
    assert warm.requests(paths, ["http://proxy/"], False) == [
        "http://proxy/a/1", "http://proxy/a/2", "http://proxy/a/3"]
    two = ["http://proxy", "http://proxy2"]
    assert warm.requests(paths, two, False) == [
        "http://proxy/a/1", "http://proxy2/a/2", "http://proxy/a/3"]
    assert warm.requests(paths, two, True) == [
        "http://proxy/a/1", "http://proxy/a/2", "http://proxy/a/3",
        "http://proxy2/a/1", "http://proxy2/a/2", "http://proxy2/a/3"]


def test_the_pass_leaves_the_popular_part_cached_in_either_kind_of_cache() -> None:
    """Caching proxies keep what they store first (their guard then stops storing): popular
    first; a page cache keeps what was read last: popular last. Checked on a Zipf trace over a
    cache of a third of its files: the part left cached serves most requests either way."""
    files = [(f"/f{i}", 1) for i in range(300)]
    trace = [p for p, _ in files]
    asked = [trace[i] for i in traces.zipf_sample(300, 0.99, 20000, 5)]
    seen = list(dict.fromkeys(asked))
    proxy = set(warm.pass_order(seen, True)[:100])  # stored first, kept
    page = set(warm.pass_order(seen, False)[-100:])  # read last, kept
    assert proxy == page
    share = sum(p in proxy for p in asked) / len(asked)
    wrong_end = set(seen[-100:])
    assert share > 0.7 > 0.3 > sum(p in wrong_end for p in asked) / len(asked)


def test_a_working_set_larger_than_its_cache_is_said() -> None:
    assert warm.fit_note(100 << 20, 512 << 20, "the web tier's memory cap") is None
    assert warm.fit_note(100 << 20, None, "") is None
    note = warm.fit_note(600 << 20, 512 << 20, "the web tier's memory cap")
    assert note == ("the working set (600.0 MiB) is larger than the web tier's memory cap "
                    "(512.0 MiB): the pass leaves the files the trace asks for first cached, "
                    "the popular ones by and large")
    assert warm.cache_of({"web_memory": "512m"}, True)[0] == 512 << 20
    assert warm.cache_of({}, False) == (None, "")


def test_the_lists_are_counted_before_anything_is_written(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trace's files through every proxy (the most a list holds), with the run's needs;
    a results folder without room for them refuses the run before it writes."""
    off = experiment(tmp_path)
    on = experiment(tmp_path, warm_pass=True)
    assert warm.needs(off) == []
    (need,) = warm.needs(on)
    path_bytes = sum(len(f"/log-6x1000-4000-s1/f{i:05d}.bin") + 1 for i in range(6))
    assert need.bytes == 2 * (path_bytes + 6 * warm.URL_BYTES)
    kind = registry.kind("web")
    assert any(n.what.startswith("the warm passes' request lists")
               for n in kind.needs(on, runner.points_of(on)))
    assert not any(n.what.startswith("the warm passes'")
                   for n in kind.needs(off, runner.points_of(off)))
    monkeypatch.setattr(space, "disk_room", lambda path: 10)
    with pytest.raises(ConfigError, match="the warm passes' request lists"):
        runner.check_space(on)


def test_a_recommended_scale_warms_where_nothing_asks_for_misses(tmp_path: Path) -> None:
    """dc-static at its recommended 0.01: warm pass on, said in its plan, recorded in the
    resolved experiment; at scale 1 or a plain --scale: off (stored plans unchanged); an
    experiment that asks for misses (dc-cache-hit: a cold page cache, hit-ratio traces) keeps
    them, and asking for both is refused."""
    warmed = study.experiment("dc-static", 0.01, keep_repetitions=True)
    assert warmed.settings.load.warm_pass is True
    assert warm.PLAN_LINE in runner.plan_lines(warmed)
    assert runner.resolved_of(warmed)["load"]["warm_pass"] is True
    for plain in (study.experiment("dc-static", 0.01),
                  study.experiment("dc-cache-hit", 1, keep_repetitions=True)):
        assert plain.settings.load.warm_pass is False
        assert "warm_pass" not in runner.resolved_of(plain)["load"]
        assert warm.PLAN_LINE not in runner.plan_lines(plain)
    hits = study.experiment("dc-cache-hit", 0.5, keep_repetitions=True)
    assert hits.settings.load.warm_pass is False
    assert "no warm pass: stack.page_cache: cold asks for misses" in hits.scaled
    data = yaml.safe_load(Path(hits.source).read_text())
    data["load"]["warm_pass"] = True
    data["stack"]["page_cache"] = "warm"  # the hit-ratio traces still ask for misses
    path = tmp_path / "both.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="load.warm_pass warms what hit-ratio trace .* asks "
                                          "to miss"):
        registry.load_experiment(str(path))


class Point(dict):
    """A point as warm.run reads it: its factors by name and its id."""

    id = "p001"


def test_a_pass_with_failed_requests_runs_again_before_the_next_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass empties the caches; one whose requests failed leaves them without the set, so
    the next point of the same trace must not take them for warm."""
    from types import SimpleNamespace

    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path))
    trace = tmp_path / "t.txt"
    traces.write(trace, ["/a/1", "/a/2", "/a/1"], "made for the test")
    answers = ['{"files": 2, "bytes": 10, "errors": 1}', '{"files": 2, "bytes": 10, "errors": 0}']
    sent: list[str] = []

    def exec_(container: object, argv: list[str], timeout: float) -> SimpleNamespace:
        sent.append(argv[-1])
        return SimpleNamespace(stdout=answers[len(sent) - 1] + "\n", stderr="")

    info = SimpleNamespace(warmed=None, stack=SimpleNamespace(proxy_cache=True, record={}))
    deployment = SimpleNamespace(info=info, containers={warm.GENERATOR: "loadgen"},
                                 placer=SimpleNamespace(push=lambda c, files: None, exec=exec_))
    spec = SimpleNamespace(targets=["http://proxy"], target="http://proxy")
    emptied: list[int] = []
    logged: list[str] = []

    def point_ctx() -> SimpleNamespace:
        return SimpleNamespace(deployment=deployment, dir=tmp_path, record={}, log=logged.append,
                               point=Point(trace={"name": "z", "kind": "zipf", "alpha": 0.9,
                                                  "requests": 3, "fileset": SET}))

    first = point_ctx()
    warm.run(first, spec, trace, lambda ctx: emptied.append(1))  # type: ignore[arg-type]
    assert first.record["warmed"]["errors"] == 1 and info.warmed is None
    assert any("1 requests failed" in line for line in logged)
    second = point_ctx()
    warm.run(second, spec, trace, lambda ctx: emptied.append(1))  # type: ignore[arg-type]
    assert len(sent) == 2 and len(emptied) == 2 and info.warmed == "z"  # passed again, whole
    third = point_ctx()
    warm.run(third, spec, trace, lambda ctx: emptied.append(1))  # type: ignore[arg-type]
    assert len(sent) == 2 and "warmed" not in third.record  # warm now: no third pass
