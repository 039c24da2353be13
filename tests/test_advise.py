"""The offload advisor without Docker: which knobs it plans and which it reports as fixed, on
captured output of real drivers (tests/data/ethtool/README.md); the modes it makes; the commands
it writes; the recommendation rule; the budget's split; and whole advise runs of a simulated
kind whose knobs have known effects (the interfaces' changes stubbed), down to advice.csv and
advice.html."""

from __future__ import annotations

import csv
import json
import math
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from analysis import advise as advice
from analysis import load, report
from analysis import runs as runs_list
from tierbench import cli, runner
from tierbench.advise import knobs, pilot, plan
from tierbench.advise import run as advise_run
from tierbench.config.errors import ConfigError
from tierbench.interfaces import ethtool, netif
from tierbench.interfaces.netif import Endpoint
from tierbench.kinds import registry
from tierbench.kinds.contract import Column, Deployment, Experiment, Point, PointContext, \
    PointResult, Tier
from tierbench.modes import apply
from tierbench.stats import precision, quantiles
import sim_kind

DATA = Path(__file__).parent / "data" / "ethtool"


def captured(k: str, l_: str | None = None, c: str | None = None, g: str | None = None,
             link: str | None = None, label: str = "web:eth0", max_mtu: int = 9600,
             mtu: int = 1500) -> dict[str, Any]:
    """A snapshot as knobs.read_endpoint makes it, from captured output."""
    snap: dict[str, Any] = {"label": label, "tier": label.split(":")[0], "ifname": "eth0",
                            "netns_pid": None, "driver": k.split("-")[0].split(".")[0],
                            "features": netif.parse_features((DATA / k).read_text()),
                            "mtu": mtu, "min_mtu": 68, "max_mtu": max_mtu}
    for key, name, parse in (("channels", l_, ethtool.parse_channels),
                             ("rings", g, ethtool.parse_rings)):
        if name:
            text = (DATA / name).read_text()
            snap[key] = {"error": text.strip()} if "not supported" in text else parse(text)
    if c:
        text = (DATA / c).read_text()
        snap["coalesce"] = ({"error": text.strip()} if "not supported" in text
                            else {"current": ethtool.parse_coalesce(text)})
    if link:
        snap["sizes"] = knobs.parse_sizes((DATA / link).read_text())
    return snap


def queues(name: str) -> dict[str, dict[str, str]]:
    """A captured /sys/class/net/IF/queues as queues.read_queues reads it."""
    out: dict[str, dict[str, str]] = {}
    for line in (DATA / name).read_text().splitlines():
        q, f, v = line.split()
        out.setdefault(q, {})[f] = v
    return out


def veth(label: str = "web:eth0") -> dict[str, Any]:
    snap = captured("veth-default.txt", "veth-l.txt", "veth-c.txt", "veth-g.txt",
                    "veth-ip-link.json", label=label, max_mtu=65535)
    snap.update(queues=queues("veth-queues.txt"), cpu_mask="3")
    return snap


def by_knob(plans: list[knobs.Plan]) -> dict[str, knobs.Plan]:
    return {p.knob: p for p in plans}


# --------------------------------------------------------------------------- planning


def test_veth_plans_the_offloads_mtu_and_channels_and_reports_the_rest_as_fixed() -> None:
    plans = by_knob(knobs.plan([veth(), veth("host:veth9")]))
    planned = {k for k, p in plans.items() if p.changeable}
    assert planned == {"tso", "gso", "gro", "checksum", "sg", "jumbo", "channels", "rps", "xps"}
    assert plans["rps"].on == {"rps_cpus": "all"} and plans["xps"].off == {"xps_cpus": "0"}
    assert (plans["rps"].state, plans["xps"].state) == ("off", "off")  # veth-queues.txt
    assert plans["lro"].why == "every interface: large-receive-offload is fixed off"
    assert plans["hw-gro"].why == "every interface: rx-gro-hw is fixed off"
    assert plans["coalescing"].why == ("every interface: ethtool -c: netlink error: Operation "
                                       "not supported")
    assert plans["rings"].why.startswith("every interface: ethtool -g:")
    assert plans["header-split"].why.startswith("every interface: ethtool -g:")
    assert "possible up to 524280 bytes, but not measured" in plans["big-tcp"].why
    assert "the tiers' traffic is IPv4" in plans["big-tcp"].why  # this iproute2: no IPv4 sizes
    assert "gso_max_size 65536" in plans["big-tcp"].current["web:eth0"]
    # the states now and the ones the modes test: veth's GRO is off, the rest on
    assert {k: plans[k].state for k in planned} == {
        "tso": "on", "gso": "on", "gro": "off", "checksum": "on", "sg": "on", "jumbo": "off",
        "channels": "off", "rps": "off", "xps": "off"}
    assert plans["gro"].target == "on" and plans["tso"].target == "off"
    assert plans["jumbo"].on == {"mtu": 9000} and plans["jumbo"].off == {"mtu": 1500}
    assert plans["channels"].on == {"channels": {"rx": 2, "tx": 2}}
    assert plans["checksum"].off == {"features": {"rx-checksumming": False,
                                                  "tx-checksumming": False}}


def test_a_connectx4_lx_plans_coalescing_rings_header_split_and_lro() -> None:
    snap = captured("mlx5_core-cx4lx.txt", "mlx5_core-cx4lx-l.txt", "mlx5_core-cx4lx-c.txt",
                    "mlx5_core-cx4lx-g.txt")
    plans = by_knob(knobs.plan([snap]))
    assert {k for k, p in plans.items() if not p.changeable} == {"hw-gro", "big-tcp", "rps",
                                                                 "xps"}
    assert plans["rps"].why == "every interface: /sys/class/net/IF/queues: not read"
    assert plans["hw-gro"].why == "every interface: rx-gro-hw is fixed off"
    assert plans["lro"].state == "off" and plans["lro"].target == "on"
    assert plans["coalescing"].state == "on"  # adaptive rx and tx
    assert plans["coalescing"].off == {"coalesce": {"adaptive-rx": False, "adaptive-tx": False,
                                                    "rx-usecs": 0}}
    assert plans["rings"].on == {"rings": {"rx": 8192, "tx": 8192}}
    assert plans["rings"].off == {"rings": {"rx": 1024, "tx": 1024}}
    assert plans["header-split"].state == "off"
    assert plans["header-split"].on == {"rings": {"tcp-data-split": True}}
    # 12 of 12 combined channels: the mode tests one
    assert plans["channels"].state == "on" and plans["channels"].off == {
        "channels": {"combined": 1}}
    modes, ends = knobs.modes(list(plans.values()))
    assert [m.name for m in modes] == [
        "baseline", "tso-off", "gso-off", "gro-off", "lro-on", "checksum-off", "sg-off",
        "jumbo-on", "coalescing-off", "channels-off", "rings-on", "header-split-on", "all-on",
        "all-off"]
    all_on = next(m for m in modes if m.name == "all-on")
    assert all_on.nic.mtu == 9000 and all_on.knobs.rings == {"rx": 8192, "tx": 8192,
                                                             "tcp-data-split": True}
    assert all_on.knobs.coalesce == {"adaptive-rx": True, "adaptive-tx": True}
    assert ends == {"on": "all-on", "off": "all-off"}


def test_ixgbe_and_the_other_mlx5_report_no_header_split_and_bnxt_reports_one() -> None:
    ixgbe = by_knob(knobs.plan([captured("ixgbe.txt", "ixgbe-l.txt", "ixgbe-c.txt",
                                         "ixgbe-g.txt")]))
    assert ixgbe["header-split"].why == "every interface: ethtool -g shows no TCP data split"
    assert ixgbe["coalescing"].on == {"coalesce": {"rx-usecs": 1}}  # no adaptive: rx-usecs
    assert ixgbe["channels"].state == "other"  # 2 of 63: the mode tests 63
    assert ixgbe["channels"].target == "on" and ixgbe["channels"].on == {
        "channels": {"combined": 63}}
    mlx = by_knob(knobs.plan([captured("mlx5_core.txt", g="mlx5_core-g.txt")]))
    assert mlx["header-split"].why == "every interface: ethtool -g shows no TCP data split"
    bnxt = knobs.split_view({"rings": ethtool.parse_rings((DATA / "bnxt_en-g.txt").read_text())})
    assert bnxt.changeable and bnxt.state == "off"
    rings = knobs.rings_view({"rings": ethtool.parse_rings((DATA / "bnxt_en-g.txt").read_text())})
    assert rings.on == {"rings": {"rx": 2047, "tx": 2047}} and rings.state == "off"


def test_endpoints_that_differ_plan_what_they_all_take() -> None:
    a, b = veth("web:eth0"), veth("proxy:eth0")
    b["features"]["generic-receive-offload"]["on"] = True
    b["channels"]["max"] = {"rx": 4, "tx": 4, "other": None, "combined": None}
    plans = by_knob(knobs.plan([a, b]))
    assert plans["gro"].state == "mixed" and plans["gro"].target == "on"
    assert plans["channels"].on == {"channels": {"rx": 2, "tx": 2}}  # the smaller maximum
    b["features"]["large-receive-offload"]["fixed"] = False
    assert not by_knob(knobs.plan([a, b]))["lro"].changeable  # still fixed on web:eth0


def test_all_on_is_the_baseline_when_every_knob_is_on_already() -> None:
    snap = veth()
    snap["features"]["generic-receive-offload"]["on"] = True
    snap["mtu"] = 9000
    snap["channels"]["current"] = {"rx": 2, "tx": 2, "other": None, "combined": None}
    snap["queues"] = {"rx-0": {"rps_cpus": "3"}, "tx-0": {"xps_cpus": "00000000,00000003"}}
    modes, ends = knobs.modes(knobs.plan([snap]))
    assert ends["on"] == "baseline" and ends["off"] == "all-off"
    assert "all-on" not in [m.name for m in modes]


def test_commands_set_each_state_where_the_user_can_run_them() -> None:
    nic = {"features": {"tcp-segmentation-offload": False}, "mtu": 9000,
           "channels": {"rx": 2, "tx": 2}}
    host = {"ifname": "veth12ab", "netns_pid": None}
    assert knobs.command(host, nic) == ("ethtool -K veth12ab tcp-segmentation-offload off && "
                                        "ip link set dev veth12ab mtu 9000 && "
                                        "ethtool -L veth12ab rx 2 tx 2")
    box = {"ifname": "eth0", "netns_pid": 42, "container": "tierbench-web-1", "tier": "web"}
    assert knobs.command(box, {"mtu": 9000}) == (
        "nsenter -t \"$(docker inspect -f '{{.State.Pid}}' tierbench-web-1)\" -n "
        "sh -c 'ip link set dev eth0 mtu 9000'")
    node = {"ifname": "eth0", "node": "node2",
            "ssh": ["ssh", "-o", "BatchMode=yes", "root@198.18.9.12"]}
    assert knobs.command(node, {"rings": {"tcp-data-split": True}}) == \
        "ssh root@198.18.9.12 'ethtool -G eth0 tcp-data-split on'"
    node["ssh"] = ["ssh", "-o", "BatchMode=yes", "-p", "2222", "-l", "admin", "-T", "--",
                   "198.18.9.12"]  # as nodes.ssh_prefix writes it
    assert knobs.command(node, {"mtu": 1500}) == \
        "ssh -p 2222 admin@198.18.9.12 'ip link set dev eth0 mtu 1500'"


# --------------------------------------------------------------------------- the rule


def paired(effect_pct: float, half_pct: float, n: int = 5) -> precision.Change:
    """A paired change with this effect and (about) this half-width."""
    t = quantiles.t_quantile(0.975, n - 1)
    return precision.Change(precision.PAIRED, n, math.log1p(effect_pct / 100),
                            math.log1p(half_pct / 100) / t, n - 1)


METRICS = {"throughput": {"column": "tps", "label": "TPS", "better": "higher"},
           "latency": {"column": "p50_us", "label": "median latency", "better": "lower"},
           "cpu": {"column": "host_cpu_us_per_kb", "label": "CPU per KB", "better": "lower"}}


def test_the_rule_recommends_the_tested_state_when_the_primary_interval_is_better() -> None:
    better = {"throughput": paired(20, 5), "cpu": paired(10, 3)}
    assert advice.decide(better, METRICS, "throughput", "on", "off")[:2] == ("enable", "on")
    worse = {"throughput": paired(-30, 5), "cpu": paired(-40, 3)}
    rec, state, why = advice.decide(worse, METRICS, "throughput", "off", "on")
    assert (rec, state) == ("enable", "on")  # tso off is worse: keep it on
    assert why.startswith("TPS -30.0 % [") and why.endswith("with it off: worse")


def test_the_rule_lets_cpu_decide_only_when_the_primary_is_non_inferior() -> None:
    rec, state, why = advice.decide({"throughput": paired(1, 2.5), "cpu": paired(-25, 5)},
                                    METRICS, "throughput", "off", "on")
    assert (rec, state) == ("disable", "off")
    assert "decides nothing and rules out a loss beyond 2 %" in why
    assert "CPU per KB -25.0 %" in why
    # the jumbo case of the issue: CPU better, but throughput may lose up to 4 %
    rec, state, why = advice.decide({"throughput": paired(1, 5), "cpu": paired(-25, 5)},
                                    METRICS, "throughput", "off", "on")
    assert (rec, state) == (advice.NO_EFFECT, "on")
    assert "does not rule out a loss beyond 2 %" in why
    rec, _, why = advice.decide({"throughput": paired(1, 4), "cpu": paired(2, 5)}, METRICS,
                                "throughput", "on", "off")
    assert rec == advice.NO_EFFECT and "±4 %" in why


def test_the_rule_needs_the_near_end_beyond_the_threshold() -> None:
    # +5 % [+1, +9]: significant, the estimate above 2 %, but the near end is not
    assert advice.decide({"throughput": paired(5, 4)}, METRICS, "throughput", "on",
                         "off")[0] == advice.NO_EFFECT
    assert advice.decide({"throughput": paired(8, 4)}, METRICS, "throughput", "on",
                         "off")[0] == "enable"
    # a wider level (Holm's first step over 10 comparisons) no longer clears it
    assert advice.decide({"throughput": paired(8, 4)}, METRICS, "throughput", "on", "off",
                         level=1 - 0.05 / 10)[0] == advice.NO_EFFECT


def test_the_rule_reads_latency_the_right_way_and_keeps_what_is_not_on_or_off() -> None:
    lower = {"latency": paired(-15, 5)}
    assert advice.decide(lower, METRICS, "latency", "on", "off")[:2] == ("enable", "on")
    rec, state, _ = advice.decide({"throughput": paired(-10, 3)}, METRICS, "throughput", "on",
                                  "other")
    assert (rec, state) == ("keep as is", "other")  # more channels were worse than 2 of 63
    tiny = {"throughput": paired(1.5, 0.5), "cpu": paired(-1.0, 0.5)}  # precise, too small
    assert advice.decide(tiny, METRICS, "throughput", "on", "off")[0] == advice.NO_EFFECT
    one_block = precision.Change(precision.PAIRED, 1, math.log(2.0))
    assert advice.decide({"throughput": one_block}, METRICS, "throughput", "on",
                         "off")[0] == advice.NO_EFFECT


# --------------------------------------------------------------------------- the budget


def test_the_budget_goes_in_proportion_and_never_below_the_least_worth_running() -> None:
    small, big = plan.cost(5.0, 10), plan.cost(10.0, 10)
    assert plan.MIN_BLOCKS == 8
    # its knob run's 10 modes and its confirmation's 2, 8 blocks each
    assert small.least == 5.0 * 8 * 12 and small.pair == 5.0 * 8 * 4
    assert small.confirm == 5.0 * 8 * 2 and small.minimum == 5.0 * 8 * 16
    # plenty: in proportion to the minimum costs (1 : 2)
    assert plan.share(8000, [small, big]) == pytest.approx(8000 / 3)
    # scarce: raised to the least worth running (552 s), while it fits; else not run
    assert plan.share(1000, [small, big]) == pytest.approx(480 * plan.MARGIN)
    assert plan.share(1000, [big, small]) is None  # big needs 1104 s
    assert plan.share(400, [small, big]) is None
    # the confirmation's least is kept back first, the 2 x 2's only when the knob run still
    # gets its least
    conf = 80 * plan.MARGIN
    assert plan.split(1000, small) == pytest.approx((1000 - conf - 160 * plan.MARGIN,
                                                     160 * plan.MARGIN, conf))
    assert plan.split(560, small) == pytest.approx((560 - conf, 0.0, conf))


def test_windows_are_10_s_unless_asked_and_never_below_2_s() -> None:
    suite = plan.load()
    for w in suite.workloads:
        exp = plan.experiment(suite, w, [knobs.baseline()], 0.2)
        settings = exp.settings.load if exp.kind == "web" else exp.settings.net  # type: ignore
        assert settings.measure_s == 10 and settings.warmup_s == 2, w.name
    short = plan.with_window(suite, 3)
    assert {(w.experiment.get("load") or w.experiment.get("net"))["measure_s"]
            for w in short.workloads} == {3}
    assert suite.workloads[0].experiment["load"]["measure_s"] == 10  # a copy
    with pytest.raises(ConfigError, match=r"^--window-s must be at least 2 seconds, got 1$"):
        plan.with_window(suite, 1)


def test_the_plan_says_when_the_budget_cannot_hold_every_workload() -> None:
    suite = plan.load()
    lines = plan.plan_lines(suite.workloads, 10, {w.name: 5.0 for w in suite.workloads}, 10)
    assert lines[0].startswith("budget 10 min of measuring over 8 workload(s)")
    assert "8 blocks 8.0 min with its confirmation" in lines[1]
    assert lines[-1].startswith("the budget holds less than 8 blocks of every workload")
    assert not plan.plan_lines(suite.workloads[:1], 10, {"small-static": 2.0}, 10)[-1] \
        .startswith("the budget holds less")


def test_the_suite_loads_and_builds_every_workload_with_generated_modes() -> None:
    suite = plan.load()
    assert [w.name for w in suite.workloads] == [
        "small-static", "static-at-half-load", "static-at-high-load", "large-static", "dynamic",
        "bulk-stream", "request-response", "many-connections"]
    at_load = [w for w in suite.workloads if w.name.endswith("-load")]
    assert [w.primary for w in at_load] == ["tail", "tail"]
    assert all(w.metrics["tail"].better == "lower" for w in at_load)
    modes, _ = knobs.modes(knobs.plan([veth()]))
    assert [w.rate_of_baseline_max for w in at_load] == [0.5, 0.8]
    for w in suite.workloads:
        exp = plan.experiment(suite, w, modes, suite.settle_s, rate=1234.5 if w in at_load
                              else None)
        assert [m.name for m in exp.modes] == [m.name for m in modes]
        target = plan.with_target(exp, w, 5.0, 120)
        assert target.precision is not None and target.precision.budget_min == 2
        assert target.precision.metric == w.metrics[w.primary].column
        if w in at_load:  # an open loop at the rate given, p99 counted from the send time
            assert exp.settings.engine == "locust" and exp.settings.load.rate == [1234.5]
            assert exp.settings.load.arrival == "poisson"
            assert target.precision.metric == "p99_ms"
            closed = plan.experiment(suite, w, modes, suite.settle_s)  # measures the maximum
            assert closed.settings.load.rate is None and not closed.settings.load.open_loop
    assert plan.chosen(suite, ["bulk-stream", "small-static"])[0].name == "small-static"
    with pytest.raises(ConfigError, match="no workload 'nope' in the suite"):
        plan.chosen(suite, ["nope"])


def test_a_suite_metric_that_is_no_summary_column_is_one_sentence(tmp_path: Path) -> None:
    text = plan.SUITE.read_text().replace("column: mbit_per_s", "column: mbits", 1)
    bad = tmp_path / "suite.yml"
    bad.write_text(text)
    suite = plan.load(bad)
    w = next(w for w in suite.workloads if w.name == "bulk-stream")
    with pytest.raises(ConfigError, match="'mbits' is not a summary column of a net experiment"):
        plan.experiment(suite, w, [knobs.baseline()], 0.2, str(bad))


# --------------------------------------------------------------------------- whole runs

# the true effects of each knob's mode on TPS and on CPU per KB (fractions)
# (checksum off turns TSO off on veth, tests/data/ethtool/veth-tx-off.txt: its effect is TSO's)
EFFECTS = {"tso-off": (-0.5, 0.8), "checksum-off": (-0.5, 0.8), "gro-on": (0.3, -0.1),
           "sg-off": (0.0, 0.3),
           "jumbo-on": (0.0, -0.3), "all-on": (0.2, -0.2), "all-off": (-0.6, 1.0)}


class KnobSim(sim_kind.SimKind):
    """Points of known effect per knob mode (two knobs together: the product of theirs)."""

    name = "knob-sim"

    def deploy(self, exp: Experiment, key: Any, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """One interface in a tier's namespace."""
        ep = Endpoint("sim", "eth0", 4242)
        return Deployment(key, {"sim": Tier("sim", "server", [ep])}, {}, {})

    def run_point(self, ctx: PointContext) -> PointResult:
        """TPS, latency and CPU per KB from the mode's effects."""
        s = ctx.exp.settings.sim  # type: ignore[attr-defined]
        time.sleep(s.sleep_s)  # a point's wall time: what the budget counts
        rng = random.Random(ctx.exp.seed * 7919 + ctx.point.index)
        tps, cpu = 1000.0, 10.0
        for part in ctx.point.mode.split("_"):
            e_tps, e_cpu = EFFECTS.get(part, (0.0, 0.0))
            tps, cpu = tps * (1 + e_tps), cpu * (1 + e_cpu)
        tps *= math.exp(rng.gauss(0, s.noise))
        cpu *= math.exp(rng.gauss(0, s.noise))
        return PointResult({"tps": tps, "p50_ms": 16 / tps * 1000, "p99_ms": 40 / tps * 1000,
                            "host_cpu_us_per_kb": cpu})

    def columns(self, exp: Experiment) -> list[Column]:
        """The identity and the figures."""
        return [Column(c) for c in ("point", "condition", "mode", "repetition", "tps",
                                    "p50_ms", "p99_ms", "host_cpu_us_per_kb")]


SUITE = """seed: 3
settle_s: 0
workloads:
  - name: first
    description: a simulated workload
    primary: throughput
    metrics:
      throughput: {column: tps, label: TPS, unit: requests/s, better: higher}
      latency: {column: p50_ms, label: median response time, unit: ms, better: lower}
      tail: {column: p99_ms, label: p99 response time, unit: ms, better: lower}
      cpu: {column: host_cpu_us_per_kb, label: host CPU per KB, unit: us/KB, better: lower}
    experiment: {kind: knob-sim, sim: {conditions: [{name: only}], noise: 0.005, drift: 0,
                                       sleep_s: 0.05}}
  - name: second
    description: another
    primary: throughput
    metrics:
      throughput: {column: tps, label: TPS, unit: requests/s, better: higher}
      cpu: {column: host_cpu_us_per_kb, label: host CPU per KB, unit: us/KB, better: lower}
    experiment: {kind: knob-sim, sim: {conditions: [{name: only}], noise: 0.005, drift: 0,
                                       sleep_s: 0.05}}
"""


@pytest.fixture()
def advisor_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The knob-sim kind, a two-workload suite, captured veth interfaces, and the interface
    changes stubbed (each mode applied is counted)."""
    found = dict(registry.kinds())
    found["knob-sim"] = KnobSim()
    monkeypatch.setattr(registry, "kinds", lambda: found)
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    suite = tmp_path / "suite.yml"
    suite.write_text(SUITE)
    applied: list[str] = []

    default = netif.settings_view(veth())
    tx_off = netif.settings_view(captured("veth-tx-off.txt"))

    @contextmanager
    def stub(mode: Any, eps: Any, watched: Any, state: Any, record: dict, settle: float,
             save: Any, containers: Any = None, rollback_s: Any = None) -> Iterator[None]:
        applied.append(mode.name)
        record["interfaces_before"] = {"sim:eth0": default}
        # the state the kernel shows during the point: checksum off as veth shows it
        record["interfaces_during"] = {"sim:eth0": tx_off if mode.name == "checksum-off"
                                       else default}
        record["restored"] = True
        yield

    monkeypatch.setattr(apply, "mode_applied", stub)
    monkeypatch.setattr(apply, "check_mode", lambda *a, **k: [])
    monkeypatch.setattr(advise_run, "discovery_deployment",
                        lambda exp, scratch: KnobSim().deploy(exp, None, None, None, None))
    monkeypatch.setattr(knobs, "read_endpoint", lambda ep, container=None: veth("sim:eth0"))
    monkeypatch.setattr(runner, "write_report", lambda run_dir: None)
    return {"suite": suite, "applied": applied}


def test_an_advise_run_measures_every_knob_and_writes_the_advice(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.01)
    folder = advise_run.Advisor(None, 5, 5.0, advisor_env["suite"]).run()
    record = json.loads((folder / "advise.json").read_text())
    assert record["status"] == "complete"
    first, second = record["workloads"]
    assert first["status"] == second["status"] == "complete"
    # each knob tried once (the drivers and settings are the same for both workloads)
    trials = [m for m in advisor_env["applied"][:11]]
    assert trials == ["tso-off", "gso-off", "gro-on", "checksum-off", "sg-off", "jumbo-on",
                      "channels-on", "rps-on", "xps-on", "all-on", "all-off"]
    # the 2 x 2 pairs the two changes recommended (not tso and checksum, the largest effects)
    assert (first["pair"]["a"], first["pair"]["b"]) == ("gro", "jumbo")
    table = list(csv.DictReader((folder / "advice.csv").open()))
    assert [r["knob"] for r in table if r["workload"] == "first"] == [
        *knobs.KNOBS, "all", "gro x jumbo", "configuration (round 1)"]
    rows = {(r["workload"], r["knob"]): r for r in table}
    knob_rows = [r for r in table if r["row"] == "knob"]
    measured = [r for r in knob_rows if r["recommendation"] != "cannot change"]
    assert len(measured) == 18 and all(r["throughput_low_pct"] and r["throughput_high_pct"]
                                       for r in measured)
    tso, gro, sg = rows[("first", "tso")], rows[("first", "gro")], rows[("first", "sg")]
    assert tso["recommendation"] == "enable" and not tso["commands"]  # on now, off is worse
    assert float(tso["throughput_effect_pct"]) == pytest.approx(-50, abs=3)
    assert gro["recommendation"] == "enable" and "generic-receive-offload on" in gro["commands"]
    assert sg["recommendation"] == "enable" and not sg["commands"]  # the same TPS for less CPU
    assert "decides nothing" in sg["reason"]
    assert re.search(r"host CPU per KB \+(29\.[5-9]|30\.[0-4]) %", sg["reason"])  # truth +30
    jumbo = rows[("first", "jumbo")]
    assert jumbo["recommendation"] == "enable" and "mtu 9000" in jumbo["commands"]
    # checksum off took TSO off: named with it, its own effect measured against tso-off
    checksum = rows[("first", "checksum")]
    assert checksum["compared_with"] == "tso-off"
    assert checksum["group"] == "checksum off (also turns tso, tx-udp-segmentation off)"
    assert "tx-tcp-segmentation off" in checksum["side_effects"]
    assert abs(float(checksum["throughput_effect_pct"])) < 2
    assert float(checksum["group_effect_pct"]) == pytest.approx(-50, abs=3)
    assert checksum["recommendation"] == advice.NO_EFFECT and not checksum["commands"]
    assert "with tso off on both sides" in checksum["reason"]
    assert rows[("first", "coalescing")]["recommendation"] == "cannot change"
    assert rows[("first", "all")]["recommendation"] == "all on"
    assert rows[("first", "gro x jumbo")]["recommendation"] == \
        "no interaction measurable at this precision"
    # the intervals stated are at Holm's levels: wider than 95 %
    assert all(0.95 < float(r["confidence"]) < 1 for r in measured)
    assert rows[("second", "tso")]["latency_metric"] == ""  # the workload weighs no latency
    # the effects are the run's own comparisons (analysis.report's comparisons.csv)
    run_dir = Path(first["runs"]["knobs"])
    report.write_comparisons(run_dir, load.read_summary_rows(run_dir / "summary.csv"),
                             json.loads((run_dir / "manifest.json").read_text()))
    theirs = {r["mode"]: r for r in csv.DictReader((run_dir / "comparisons.csv").open())
              if r["metric"] == "tps"}
    for knob in ("tso", "gro", "sg"):
        mine = rows[("first", knob)]
        other = theirs[f"{knob}-{mine['tested']}"]
        # (comparisons.csv takes the deployments' means as the unit when they differ, the
        # advice every block: the same effect but for that weighting)
        assert float(mine["throughput_effect_pct"]) == pytest.approx(float(other["effect_pct"]),
                                                                     abs=0.05)
        # its intervals: Stein's (the first blocks' spread, for a family of every comparison),
        # at the Holm level, so never narrower than 95 %
        assert mine["method"] == precision.STEIN and float(mine["confidence"]) > precision.LEVEL
    # the persistent forms of the recommended changes (gro on, jumbo), and their revert
    persist = folder / "persist" / "first"
    assert "ethtool -K eth0 generic-receive-offload on\nip link set dev eth0 mtu 9000" in \
        (persist / "apply.sh").read_text()
    assert "generic-receive-offload off" in (persist / "revert.sh").read_text()
    assert "GenericReceiveOffload=yes\nMTUBytes=9000" in \
        (persist / "10-tierbench-sim_eth0.link").read_text()
    # one configuration: both workloads recommend gro on and jumbo (their verdicts merged),
    # confirmed against the current one on both (the simulation gives it no loss)
    config = json.loads((folder / "config.json").read_text())
    assert config["merged"] == config["changes"] == {"gro": "on", "jumbo": "on"}
    assert config["confirmed"] and config["nic"] == {
        "features": {"generic-receive-offload": True}, "mtu": 9000}
    assert [i["label"] for i in config["interfaces"]] == ["sim:eth0"]
    confirmation = [r for r in table if r["row"] == "confirmation"]
    assert [r["workload"] for r in confirmation] == ["first", "second"]
    assert all(r["tested"] == "gro on, jumbo on" and float(r["throughput_low_pct"]) < 0 <
               float(r["throughput_high_pct"]) for r in confirmation)
    assert [(r["knob"], r["recommendation"]) for r in table if r["row"] == "configuration"] == \
        [("gro", "confirmed"), ("jumbo", "confirmed")]
    assert "generic-receive-offload on" in (folder / "persist" / "confirmed" / "apply.sh").read_text()
    html = (folder / "advice.html").read_text()
    assert "One configuration, confirmed" in html and "confirmed on 2 workload(s)" in html
    assert html.count("<h2>") == 3 and "What these interfaces cannot change" in html
    assert "nsenter" not in html and "ethtool -K eth0 generic-receive-offload on" in html
    assert record["spent_s"] <= 5 * 60


def test_a_budget_too_small_for_the_second_workload_says_so(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.1)
    least = plan.cost(0.1, 12).least * plan.MARGIN
    folder = advise_run.Advisor(None, (least + 0.3) / 60, 5.0, advisor_env["suite"]).run()
    record = json.loads((folder / "advise.json").read_text())
    first, second = record["workloads"]
    assert first["status"] == "complete" and first["budget"]["share_s"] == pytest.approx(least)
    # the least it could have run with: its pilot and one knob at 2-s windows (not the
    # defaults' 8 blocks of its 12 modes, which a pilot's design would have cut)
    pilot_least = pilot.pilot_cost_s(lambda window_s: 0.1) + pilot.least_s(0.1, 2, 0)
    assert re.fullmatch(r"not run: \d+\.\d min of the budget were left; its pilot and one "
                        r"knob at 2-s windows need about " + re.escape(f"{pilot_least / 60:.1f}")
                        + " min with its confirmation", second["status"])
    table = list(csv.DictReader((folder / "advice.csv").open()))
    second_rows = [r for r in table if r["workload"] == "second"]
    assert [r["knob"] for r in second_rows] == list(knobs.KNOBS)  # a row per knob still
    assert {r["recommendation"] for r in second_rows} == {"not measured"}
    assert second_rows[0]["reason"] == second["status"]
    # `tierbench runs` lists the session: one of its two workloads measured
    listed = [r for r in runs_list.runs(folder.parent.parent) if r["folder"] == str(folder)]
    assert len(listed) == 1 and listed[0]["points"] == "1/2 workloads"
    assert listed[0]["experiment"].startswith("advise (") and listed[0]["status"] == "complete"


def test_the_advise_command_refuses_an_unknown_workload_in_one_sentence(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["advise", "--workloads", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tierbench: --workloads: no workload 'nope' in the suite")
    assert "\n" not in err
