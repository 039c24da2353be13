"""Experiment and mode files: validation names the file and key; expansion is deterministic."""

from pathlib import Path

import pytest

import yaml

from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.config.files import dotenv
from tierbench.kinds import registry
from tierbench.kinds.web.settings import stack_for, trace_dicts
from tierbench.modes.model import load_mode


class config:  # the names these tests use, on today's modules
    ConfigError = ConfigError
    load_experiment = staticmethod(registry.load_experiment)
    load_mode = staticmethod(load_mode)


ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def minimal(tmp_path: Path, **overrides: str) -> Path:
    body = {
        "modes": "modes: [offloads-on, offloads-off]",
        "traces": "traces: [{name: a, kind: single, size: 4096}]",
        "extra": "",
    }
    body.update(overrides)
    return write(tmp_path, "exp.yml", "name: t\nrepetitions: 2\n" + "\n".join(body.values()) + "\n")


def test_shipped_experiment_and_modes_load() -> None:
    exp = config.load_experiment("quick")
    assert [m.name for m in exp.modes] == ["offloads-on+tcp-cubic", "offloads-off+tcp-cubic"]
    off = exp.mode("offloads-off+tcp-cubic")
    assert off.nic.features == {f: False for f in ("tso", "gso", "gro", "sg", "rx", "tx")}
    assert off.knobs.sysctls == {"net.ipv4.tcp_congestion_control": "cubic"}
    assert {t["name"] for t in trace_dicts(exp.settings)} == {"single-4k", "single-1m"}
    assert exp.settings.engine == "wrk" and exp.repetitions == 6


def test_points_are_the_full_cross_product_in_a_seeded_order(tmp_path: Path) -> None:
    exp = config.load_experiment(str(minimal(tmp_path)))
    points = runner.points_of(exp)
    assert len(points) == 1 * 2 * 2
    assert {(p.mode, p.repetition) for p in points} == {
        (m, r) for m in ("offloads-on", "offloads-off") for r in (1, 2)}
    assert [p.id for p in points] == ["p001", "p002", "p003", "p004"]
    again = runner.points_of(config.load_experiment(str(minimal(tmp_path))))
    assert [(p.mode, p.repetition) for p in points] == [(p.mode, p.repetition) for p in again]


def test_quick_order_differs_from_declaration_order() -> None:
    exp = config.load_experiment("quick")
    run_order = [(p["trace"]["name"], p.mode, p.repetition) for p in runner.points_of(exp)]
    declared = [(t["name"], m.name, r) for t in trace_dicts(exp.settings) for m in exp.modes
                for r in range(1, exp.repetitions + 1)]
    assert sorted(run_order) == sorted(declared)
    assert run_order != declared


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"modes": "modes: [no-such-mode]"}, "modes: no mode named 'no-such-mode'"),
        ({"modes": "modes: offloads-on"}, "modes: must be a non-empty list"),
        ({"traces": "traces: [{name: a, kind: pareto}]"}, "traces[0].kind: must be single, hit-ratio, zipf, worldcup or mix"),
        ({"traces": "traces: [{name: a, kind: single, size: -1}]"}, "traces[0].size: must be"),
        ({"traces": "traces: [{name: a, kind: zipf, alpha: 0.9}]"}, "traces[0].fileset"),
        ({"extra": "colour: blue"}, "unknown key 'colour'"),
        ({"extra": "load: {users: 0}"}, "load.users[0]: must be a whole number >= 1"),
        ({"extra": "stack: {proxy: nginx}"}, "stack.proxy: must be one of apache, haproxy"),
        ({"extra": "engine: ab"}, "engine: must be one of locust, wrk"),
        ({"extra": "engine: wrk\nload: {rate: 100}"}, "think and rate need engine: locust"),
        ({"extra": "target: http://192.0.2.1/"}, "target:"),
        ({"extra": "stack: {docroot: nfs}"}, "stack.docroot[0]: must be one of disk, tmpfs"),
        ({"extra": "load: {users: [1, 0]}"}, "load.users[1]: must be a whole number >= 1"),
        ({"extra": "kind: quantum"}, "no workload kind named 'quantum'"),
    ],
)
def test_bad_experiments_are_refused_naming_file_and_key(
    tmp_path: Path, override: dict, message: str
) -> None:
    path = minimal(tmp_path, **override)
    with pytest.raises(config.ConfigError) as err:
        config.load_experiment(str(path))
    assert str(path) in str(err.value)
    assert message in str(err.value)


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yml", "name: [unclosed\n")
    with pytest.raises(config.ConfigError) as err:
        config.load_experiment(str(path))
    assert "not valid YAML" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nic: {features: {tso: maybe}}", "nic.features.tso: must be on or off"),
        ("nic: {features: {warp: on}}", "nic.features.warp: not a feature name"),
        ("nic: {mtu: 20}", "nic.mtu: must be a whole number >= 68"),
        ("tiers: [DB]", "tiers[0]: must look like proxy"),
        ("nic: {speed: 10}", "unknown key 'speed'"),
    ],
)
def test_bad_modes_are_refused_naming_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "m.yml", text + "\n")
    with pytest.raises(config.ConfigError) as err:
        config.load_mode("m", modes_dir=tmp_path)
    assert str(tmp_path / "m.yml") in str(err.value) and message in str(err.value)


def test_mode_long_feature_names_are_accepted(tmp_path: Path) -> None:
    write(tmp_path, "m.yml", "tiers: [web]\nnic: {features: {tx-tcp6-segmentation: off}, mtu: 9000}\n")
    mode = config.load_mode("m", modes_dir=tmp_path)
    assert mode.tiers == ("web",)
    assert mode.nic.features == {"tx-tcp6-segmentation": False} and mode.nic.mtu == 9000


def test_users_and_docroot_lists_are_factors(tmp_path: Path) -> None:
    path = minimal(tmp_path, extra="load: {users: [1, 4]}\nstack: {docroot: [disk, tmpfs]}")
    points = runner.points_of(config.load_experiment(str(path)))
    assert len(points) == 1 * 2 * 2 * 2 * 2
    assert {(p["users"], p["docroot"]) for p in points} == {(u, d) for u in (1, 4)
                                                            for d in ("disk", "tmpfs")}
    docroots = [p["docroot"] for p in points]
    assert sum(1 for a, b in zip(docroots, docroots[1:]) if a != b) == 1  # one restart


def test_points_needing_a_restart_are_grouped(tmp_path: Path) -> None:
    path = minimal(tmp_path, modes="modes: [offloads-on, sendfile-off, offloads-off]",
                   traces="traces: [{name: a, kind: single, size: 4096}, "
                          "{name: b, kind: single, size: 8192}]")
    exp = config.load_experiment(str(path))
    kinds = ["sendfile" if p.mode == "sendfile-off" else "nic" for p in runner.points_of(exp)]
    switches = sum(1 for a, b in zip(kinds, kinds[1:]) if a != b)
    assert switches == 1, kinds  # one block of sendfile-off points: a single restart
    assert stack_for(exp, "sendfile-off", "disk")["web_sendfile"] is False
    assert stack_for(exp, "offloads-on", "disk")["web_sendfile"] is True


def test_workers_load_and_reach_the_resolved_experiment(tmp_path: Path) -> None:
    path = minimal(tmp_path, extra="load: {workers: 2, remote_workers: 3, worker_wait_s: 30}")
    exp = config.load_experiment(str(path))
    ld = exp.settings.load
    assert (ld.workers, ld.remote_workers, ld.worker_wait_s) == (2, 3, 30)
    assert registry.kind("web").resolved(exp)["load"]["workers"] == 2
    assert config.load_experiment(str(minimal(tmp_path))).settings.load.workers == 0


@pytest.mark.parametrize("load, fragment", [
    ("{workers: -1}", "load.workers: must be a whole number >= 0, got -1"),
    ("{workers: 1.5}", "load.workers: must be a whole number >= 0, got 1.5"),
    ("{workers: two}", "load.workers: must be a whole number >= 0, got 'two'"),
    ("{remote_workers: -2}", "load.remote_workers: must be a whole number >= 0"),
    ("{workers: 2, worker_wait_s: 0}", "load.worker_wait_s: must be a number >= 1"),
])
def test_bad_worker_settings_are_one_line_errors(tmp_path: Path, load: str, fragment: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load_experiment(str(minimal(tmp_path, extra=f"load: {load}")))
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_workers_need_the_locust_engine(tmp_path: Path) -> None:
    path = minimal(tmp_path, extra="engine: wrk\nload: {workers: 2}")
    with pytest.raises(config.ConfigError, match="load.workers: Locust workers need engine: locust"):
        config.load_experiment(str(path))


MIX = {"name": "m", "kind": "mix", "per_client": 100, "subsets": 4, "parts": [
    {"site": "background", "kind": "zipf", "alpha": 0.9,
     "fileset": {"kind": "class", "class": 0, "seed": 1}},
    {"site": "foreground", "kind": "zipf", "alpha": 0.9,
     "fileset": {"kind": "class", "class": 0, "seed": 2}}]}


@pytest.mark.parametrize("change, message", [
    ({"engine": "wrk"}, "a mix trace needs engine: locust"),
    ({"traces": [{**MIX, "parts": MIX["parts"][:1]}]}, "parts: list should have at least 2"),
    ({"traces": [{**MIX, "parts": [MIX["parts"][0], {**MIX["parts"][1], "site": "background"}]}]},
     "two parts share a site name"),
    ({"traces": [{**MIX, "parts": [MIX["parts"][0], {**MIX["parts"][1], "fileset":
                                                      MIX["parts"][0]["fileset"]}]}]},
     "two sites use the same file set"),
    ({"traces": [{**MIX, "subsets": 3}]}, "subsets: must be a multiple of the weights' sum"),
    ({"traces": [{**MIX, "parts": [MIX["parts"][0], {**MIX["parts"][1], "requests": 9}]}]},
     "unknown key"),
    ({"stack": {"docroot": "disk+hot-tmpfs"}}, "stack.hot_site: must name a site"),
    ({"stack": {"docroot": "disk+hot-tmpfs", "hot_site": "middle"}}, "stack.hot_site"),
    ({"stack": {"docroot": "disk+cold"}}, "stack.docroot[0]: must be one of"),
    ({"stack": {"docroot": "orangefs", "pvfs_io_servers": 9}}, "pvfs_io_servers: must be"),
])
def test_mix_traces_and_placements_are_checked(tmp_path: Path, change: dict, message: str) -> None:
    data = {"name": "x", "modes": ["offloads-on"], "traces": [MIX], **change}
    path = tmp_path / "x.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(config.ConfigError) as err:
        config.load_experiment(str(path))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_placements_are_a_factor_with_their_settings(tmp_path: Path) -> None:
    data = {"name": "x", "modes": ["offloads-on"], "traces": [MIX], "repetitions": 2,
            "stack": {"docroot": ["disk", "disk+hot-tmpfs", "orangefs"],
                      "hot_site": "foreground"}}
    path = tmp_path / "x.yml"
    path.write_text(yaml.safe_dump(data))
    exp = config.load_experiment(str(path))
    points = runner.points_of(exp)
    assert sorted({p["docroot"] for p in points}) == ["disk", "disk+hot-tmpfs", "orangefs"]
    assert len(points) == 6
    settings = stack_for(exp, "offloads-on", "disk+hot-tmpfs")
    assert settings["hot_site"] == "foreground" and settings["hot_below"] == 1048576
    assert settings["pvfs_io_servers"] == 3
    # points of one placement run together (one restart per placement)
    order = [p["docroot"] for p in points]
    assert order == sorted(order, key=order.index)


def test_a_list_of_rates_is_a_factor_and_plans_without_one_do_not_change(tmp_path: Path) -> None:
    """load.rate: several offered rates are a factor (a load curve), one point per rate like
    users; one rate, or none, plans exactly as before (no rate factor on a closed loop, no rate
    on the plan's lines)."""
    def plan(name: str, load: str) -> tuple[list[str], list]:
        path = minimal(tmp_path, extra=f"engine: locust\nload: {load}")
        exp = config.load_experiment(str(write(tmp_path, name, path.read_text())))
        lines = runner.plan_lines(exp)
        return [line.replace(name, "exp.yml") for line in lines], runner.points_of(exp)

    closed, closed_points = plan("closed.yml", "{users: 4}")
    one, one_points = plan("one.yml", "{users: 4, rate: 300}")
    curve, points = plan("curve.yml", "{users: 4, rate: [800, 100, 400]}")
    assert one == closed and all("rate" not in p.factors for p in closed_points)
    assert [p.factors["rate"] for p in one_points] == [300] * len(closed_points)
    assert [(p.mode, p.repetition) for p in one_points] == \
        [(p.mode, p.repetition) for p in closed_points]
    assert len(points) == 3 * len(closed_points) == 12
    assert sorted({p["rate"] for p in points}) == [100, 400, 800]
    assert len({(p.mode, p.repetition, p["rate"]) for p in points}) == 12
    assert sum("rate=400/s" in line for line in curve) == 4
    web = registry.kind("web")
    resolved = web.resolved(config.load_experiment(str(tmp_path / "curve.yml")))
    assert resolved["load"]["rate"] == [800, 100, 400]
    # its report's conditions are per rate, whatever the family (here dc-single's)
    assert web.report(resolved)["factors"] == ["trace", "target_rate"]
    resolved = web.resolved(config.load_experiment(str(tmp_path / "one.yml")))
    assert resolved["load"]["rate"] == 300 and web.report(resolved)["factors"] == ["trace"]
    with pytest.raises(config.ConfigError, match=r"load.rate: two rates are the same"):
        config.load_experiment(str(minimal(tmp_path, extra="engine: locust\n"
                                                            "load: {rate: [100, 100]}")))


def test_dotenv_drops_comments_after_values_and_keeps_quoted_ones(tmp_path: Path) -> None:
    """A comment after an unquoted value is not part of it (the hand parser kept it: PROXY_CPUS
    became "1 # the proxy's core"), a quoted value keeps its # and spaces, `export` and blank
    or comment lines are allowed, a key without a value is left out."""
    env = tmp_path / ".env"
    env.write_text("# the CPU layout\n\nPROXY_CPUS=1 # the proxy's core\n"
                   "TITLE=\"a # b\"\nexport WEB_CPUS=2\nSINGLE='x y'\nEMPTY=\nBARE\n")
    assert dotenv(env) == {"PROXY_CPUS": "1", "TITLE": "a # b", "WEB_CPUS": "2",
                           "SINGLE": "x y", "EMPTY": ""}
    assert dotenv(tmp_path / "absent") == {}


def test_an_unreadable_dotenv_is_one_sentence(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_bytes(b"A=\xff\xfe\n")
    with pytest.raises(ConfigError, match=r"\.env: cannot be read \(not UTF-8 text\)"):
        dotenv(env)
