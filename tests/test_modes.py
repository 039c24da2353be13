"""Mode files: schema, validation naming file and key, extends:, scopes, and the modes CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierbench import cli, runner
from tierbench.config.errors import ConfigError
from tierbench.interfaces.netif import Endpoint
from tierbench.kinds import registry
from tierbench.kinds.contract import Deployment, Tier
from tierbench.modes import apply, cpus
from tierbench.modes import model as modes
from tierbench.modes.model import load_mode

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.stem for p in (ROOT / "modes").glob("*.yml"))


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_mode_loads(name: str) -> None:
    mode = load_mode(name)
    assert mode.name == name and mode.description
    assert mode.as_dict()["name"] == name


def test_offloads_modes_unchanged() -> None:
    on, off = load_mode("offloads-on"), load_mode("offloads-off")
    feats = ("tso", "gso", "gro", "sg", "rx", "tx")
    assert on.nic.features == dict.fromkeys(feats, True)
    assert off.nic.features == dict.fromkeys(feats, False)
    for m in (on, off):
        assert m.tiers == () and m.roles == () and m.nic.mtu is None  # every tier
        assert m.knobs == modes.Knobs() and m.server == {} and m.host_interfaces == ()
        assert set(m.as_dict()) == {"name", "description", "tiers", "nic", "source"}
        assert all(m.covers(t, r) for t, r in (("proxy", "server"), ("loadgen", "client")))


def test_roles_choose_the_tiers_a_mode_covers(tmp_path: Path) -> None:
    write(tmp_path, "servers-only", "roles: [servers]\nnic: {features: {tso: off}}\n")
    m = load_mode("servers-only", tmp_path)
    assert m.roles == ("servers",) and m.as_dict()["roles"] == ["servers"]
    assert m.covers("web", "server") and m.covers("pfs-server", "server")
    assert not m.covers("loadgen", "client") and not m.covers("pfs-client", "client")
    write(tmp_path, "web-only", "tiers: [web]\n")
    w = load_mode("web-only", tmp_path)
    assert w.covers("web", "server") and not w.covers("proxy", "server")


def test_sockopt_cases_are_cumulative() -> None:
    cases = [load_mode(f"sockopt-{i}-{s}") for i, s in enumerate(
        ["default", "socket-buffers", "tso", "jumbo", "coalescing"], start=1)]
    c1, c2, c3, c4, c5 = cases
    assert c1.nic.features == {"tso": False} and c1.nic.mtu == 1500
    assert c1.knobs.sysctls["net.ipv4.tcp_rmem"] == "4096 131072 6291456"
    assert c2.knobs.sysctls["net.ipv4.tcp_rmem"] == "4096 131072 104857600"
    assert c2.nic.features == {"tso": False} and c2.nic.mtu == 1500
    assert c3.nic.features == {"tso": True, "sg": True, "tx": True}
    assert c3.knobs.sysctls == c2.knobs.sysctls and c3.nic.mtu == 1500
    assert c4.nic.mtu == 2048 and c4.nic.features == c3.nic.features
    assert c5.knobs.coalesce == {"adaptive-rx": True, "rx-usecs": 50, "rx-frames": 64}
    assert c5.nic.mtu == 2048 and c5.knobs.sysctls == c2.knobs.sysctls
    assert c5.extends == ("sockopt-1-default", "sockopt-2-socket-buffers", "sockopt-3-tso",
                          "sockopt-4-jumbo")
    for c in cases:
        assert c.knobs.coalesce == ({} if c is not c5 else c5.knobs.coalesce)


def test_server_accessor_and_restart_flag() -> None:
    assert load_mode("sendfile-off").server == {"web_sendfile": False}
    assert load_mode("mmap-off").server == {"web_mmap": False}
    assert load_mode("proxy-cache-on").server == {"proxy_cache": True}
    assert load_mode("proxy-cache-on").needs_restart
    assert not load_mode("offloads-on").needs_restart


def test_single_knob_modes_set_their_knob() -> None:
    assert load_mode("rate-1gbit").knobs.qdisc == {"kind": "tbf", "rate": "1gbit",
                                                   "latency": "50ms"}
    assert load_mode("rate-10gbit").knobs.qdisc == {"kind": "htb", "rate": "10gbit"}
    assert load_mode("netem-delay").knobs.qdisc["kind"] == "netem"
    rps = load_mode("rps-all-cpus")
    assert rps.knobs.rps_cpus == "all" and rps.knobs.xps_cpus == "all"
    assert rps.knobs.rps_flow_cnt == 4096
    assert rps.knobs.sysctls == {"net.core.rps_sock_flow_entries": "32768"}
    assert load_mode("header-split").knobs.rings == {"tcp-data-split": True}
    assert load_mode("channels-2").knobs.channels == {"rx": 2, "tx": 2}
    assert load_mode("rss-equal").knobs.rss == {"equal": 2}
    host = load_mode("host-socket-buffers")
    assert host.scope == "host" and host.host_interfaces == ("eth0",) and host.tiers == ()


def test_extends_merges_and_child_wins(tmp_path: Path) -> None:
    write(tmp_path, "base", "tiers: [web]\nnic: {features: {tso: off, gro: off}, mtu: 1500}\n"
          "qdisc: {kind: tbf, rate: 1gbit, burst: 1mb}\nsysctls: {net.core.somaxconn: 1024}\n")
    write(tmp_path, "child", "extends: base\nnic: {features: {tso: on}}\n"
          "qdisc: {kind: htb, rate: 10gbit}\nsysctls: {net.ipv4.tcp_rmem: [1, 2, 3]}\n")
    m = load_mode("child", tmp_path)
    assert m.tiers == ("web",) and m.nic.mtu == 1500
    assert m.nic.features == {"tso": True, "gro": False}
    assert m.knobs.qdisc == {"kind": "htb", "rate": "10gbit"}  # replaced whole
    assert m.knobs.sysctls == {"net.core.somaxconn": "1024", "net.ipv4.tcp_rmem": "1 2 3"}
    assert m.extends == ("base",)


def test_extends_cycle_is_refused_naming_the_chain(tmp_path: Path) -> None:
    write(tmp_path, "a", "extends: b\n")
    write(tmp_path, "b", "extends: [c]\n")
    write(tmp_path, "c", "extends: a\n")
    with pytest.raises(ConfigError) as err:
        load_mode("a", tmp_path)
    assert "cycle (a -> b -> c -> a)" in str(err.value)
    write(tmp_path, "self", "extends: self\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_mode("self", tmp_path)


def test_extends_of_unknown_mode_names_file(tmp_path: Path) -> None:
    path = write(tmp_path, "m", "extends: nowhere\n")
    with pytest.raises(ConfigError) as err:
        load_mode("m", tmp_path)
    assert str(path) in str(err.value) and "extends: no mode named 'nowhere'" in str(err.value)


def test_parent_errors_name_the_parent_file(tmp_path: Path) -> None:
    parent = write(tmp_path, "p", "nic: {coalesce: {rx-usecs: -1}}\n")
    write(tmp_path, "m", "extends: p\n")
    with pytest.raises(ConfigError) as err:
        load_mode("m", tmp_path)
    assert str(parent) in str(err.value) and "nic.coalesce.rx-usecs" in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nic: {channels: {rx: 0}}", "nic.channels.rx: must be a whole number >= 1"),
        ("nic: {channels: {queues: 2}}", "unknown key 'queues'"),
        ("nic: {coalesce: {adaptive-rx: 3}}", "nic.coalesce.adaptive-rx: must be on or off"),
        ("nic: {coalesce: {rx-usecs: fast}}", "nic.coalesce.rx-usecs: must be a whole number"),
        ("nic: {coalesce: {rx-speed: 1}}", "unknown key 'rx-speed'"),
        ("nic: {rings: {tcp-data-split: 1}}", "nic.rings.tcp-data-split: must be on or off"),
        ("nic: {rings: {rx: 0}}", "nic.rings.rx: must be a whole number >= 1"),
        ("nic: {rss: {equal: 2, default: on}}", "nic.rss: give one of"),
        ("nic: {rss: {weights: []}}", "nic.rss.weights: must be a non-empty list"),
        ("nic: {rps_cpus: everything}", "nic.rps_cpus: must look like all"),
        ("nic: {rps_flow_cnt: -1}", "nic.rps_flow_cnt: must be a whole number >= 0"),
        ("qdisc: {kind: cake}", "qdisc.kind: must be one of tbf, htb, netem"),
        ("qdisc: {kind: tbf}", "qdisc.rate: required for tbf"),
        ("qdisc: {kind: tbf, rate: fast}", "qdisc.rate: must look like 1gbit"),
        ("qdisc: {kind: tbf, rate: 1gbit, delay: 1ms}", "unknown key 'delay'"),
        ("qdisc: {kind: netem}", "netem needs at least one of"),
        ("qdisc: {kind: netem, jitter: 1ms}", "qdisc.jitter: needs delay too"),
        ("qdisc: {kind: netem, loss: 5}", "qdisc.loss: must look like 0.1%"),
        ("sysctls: {rmem_max: 1}", "sysctls.rmem_max: not a sysctl name"),
        ("sysctls: {net.core.rmem_max: {a: 1}}", "sysctls.net.core.rmem_max: must be a number"),
        ("server: {web_sendfile: maybe}", "server.web_sendfile: must be on or off"),
        ("server: {Nginx: on}", "server.Nginx: not a server option name"),
        ("host_interfaces: []", "host_interfaces: must be a non-empty list"),
        ("host_interfaces: [eth0]\ntiers: [web]", "a mode has one scope"),
        ("roles: [servers]\ntiers: [web]", "a mode has one scope"),
        ("roles: [routers]", "roles[0]: must be one of servers, clients"),
        ("extends: 3", "extends: must be a mode name"),
        ("colour: blue", "unknown key 'colour'"),
    ],
)
def test_bad_modes_are_refused_naming_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "m", text + "\n")
    with pytest.raises(ConfigError) as err:
        load_mode("m", tmp_path)
    assert str(path) in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_server_options_are_the_kinds_that_runs_the_servers(tmp_path: Path) -> None:
    """A mode's `server:` names are checked by the experiment's kind (the modes floor names
    none): the web kind allows its stack's options; a kind without servers refuses any."""
    write(tmp_path, "m", "server: {nginx: on}\n")
    exp = tmp_path / "e.yml"
    exp.write_text("kind: web\nmodes: [m]\ntraces: [{name: t, kind: single, size: 4096}]\n")
    with pytest.raises(ConfigError, match=r"modes: m: server: unknown key 'nginx' \(allowed: "
                                          r"proxy_cache, web_mmap, web_sendfile\)$"):
        registry.load_experiment(str(exp), tmp_path)
    write(tmp_path, "m", "server: {web_sendfile: off}\n")
    assert registry.load_experiment(str(exp), tmp_path).modes[0].server == {"web_sendfile": False}
    exp.write_text("kind: pfs\nmodes: [m]\npfs: {test: concurrent}\n")
    with pytest.raises(ConfigError, match="modes: m sets server options \\(web_sendfile\\), "
                                          "which the pfs kind's services do not have"):
        registry.load_experiment(str(exp), tmp_path)


def test_diff_lists_only_differences() -> None:
    lines = modes.diff_modes(load_mode("sockopt-3-tso"), load_mode("sockopt-4-jumbo"))
    assert "nic.mtu: 1500 -> 2048" in lines
    assert not any(line.startswith("nic.features") for line in lines)
    assert modes.diff_modes(load_mode("tso-off"), load_mode("tso-off")) == []


def test_cli_list_show_diff(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["modes", "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in SHIPPED)
    assert "host: eth0" in out and "(server restart)" in out
    assert cli.main(["modes", "show", "sockopt-5-coalescing"]) == 0
    out = capsys.readouterr().out
    assert "adaptive-rx: true" in out and "mtu: 2048" in out and "§4.3" in out
    assert cli.main(["modes", "diff", "offloads-on", "offloads-off"]) == 0
    assert "nic.features.tso: true -> false" in capsys.readouterr().out


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["modes", "show", "no-such-mode"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tierbench: no mode named 'no-such-mode'") and err.count("\n") == 1


def fake_stack(where: object = None) -> Deployment:
    tiers = {t: Tier(t, "client" if t == "loadgen" else "server",
                     [Endpoint(t, "eth0", 100 + i), Endpoint("host", f"veth{100 + i}", None)])
             for i, t in enumerate(("loadgen", "proxy", "web"))}
    return Deployment(None, tiers, {}, {})


def test_cli_check_uses_endpoints_and_reports_problems(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The container-scope CLI path without a stack: the deployment and the check are stubbed."""
    seen: dict = {}

    def fake_check(mode: modes.Mode, eps: list[Endpoint]) -> list[str]:
        seen["mode"], seen["eps"] = mode.name, [e.label for e in eps]
        return ["coalescing is not supported by web:eth0 (driver veth)"]

    for kind in registry.kinds().values():  # whatever else the engine runs is not looked at
        monkeypatch.setattr(kind, "running", lambda where: None)
    monkeypatch.setattr(registry.kind("web"), "running", fake_stack)
    monkeypatch.setattr(apply, "check_mode", fake_check)
    assert cli.main(["modes", "check", "sockopt-5-coalescing"]) == 1
    out = capsys.readouterr().out
    assert seen["mode"] == "sockopt-5-coalescing" and len(seen["eps"]) == 6
    assert "sockopt-5-coalescing: coalescing is not supported by web:eth0" in out
    monkeypatch.setattr(apply, "check_mode", lambda mode, eps: [])
    assert cli.main(["modes", "check", "tso-off"]) == 0
    assert "nothing was changed" in capsys.readouterr().out


def test_host_scope_endpoints_need_no_stack() -> None:
    eps = modes.host_endpoints(load_mode("host-socket-buffers"))
    assert eps == [Endpoint("host", "eth0", None)]


def test_cli_check_without_stack_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for k in registry.kinds().values():
        monkeypatch.setattr(k, "running", lambda where: None)
    assert cli.main(["modes", "check", "tso-off"]) == 2
    err = capsys.readouterr().err
    assert err == ("tierbench: mode tso-off: nothing of tierbench is running; start the stack "
                   "(tierbench run) or check a mode with host_interfaces\n")


def test_container_scope_endpoints_come_from_the_deployment() -> None:
    eps = runner.mode_endpoints(load_mode("tso-off"), fake_stack())
    assert [e.label for e in eps] == ["loadgen:eth0", "host:veth100", "proxy:eth0",
                                      "host:veth101", "web:eth0", "host:veth102"]
    with pytest.raises(Exception, match="covers servers"):
        runner.mode_endpoints(modes.Mode("m", "", (), modes.NicSettings({"tso": False}), "m.yml",
                                         roles=("servers",)),
                              Deployment(None, {"loadgen": fake_stack().tiers["loadgen"]}, {}, {}))


def test_a_cpu_mode_on_one_host_goes_to_the_processes_behind_the_endpoints() -> None:
    """On one host a cpu: mode's targets are the processes whose namespaces the endpoints are
    in, each once, labelled by its tier (the host's own interfaces have none)."""
    import os

    pid = os.getpid()
    eps = [Endpoint("web", "eth0", pid), Endpoint("host", "veth1", None),
           Endpoint("web", "eth1", pid)]
    state = cpus.targets(eps, None)
    assert list(state) == [f"pid:{pid}"]
    assert state[f"pid:{pid}"]["label"] == "web" and state[f"pid:{pid}"]["pid"] == pid


def test_a_setting_refused_on_every_veth_is_said_once() -> None:
    """A refusal repeated for each interface is one clause naming the first and the count;
    different refusals stay apart."""
    said = ("header-data split (ethtool -G tcp-data-split on) is not supported by {} (driver "
            "veth); drop it from mode header-split")
    labels = ["net-client:eth0", "host:veth1a", "net-server-1:eth0", "host:veth1"]
    problems = [said.format(x) for x in labels] + ["qdisc netem is not available"]
    assert runner.once_per_setting(problems, labels) == [
        said.format("net-client:eth0") + " (and the same on 3 more interfaces)",
        "qdisc netem is not available"]
    assert runner.once_per_setting(problems[:2], labels) == [
        said.format("net-client:eth0") + " (and the same on 1 more interface)"]
    assert runner.once_per_setting(problems[:1], []) == problems[:1]


def test_a_plus_b_applies_one_mode_over_another_as_two_factors_in_one_list() -> None:
    """dc-dynamic's platform x offloads: `a+b` is mode b over mode a (b's keys win, the scopes
    merge, so the offloads apply to the servers only), named a+b in the plan and results."""
    both = modes.load_mode("servers-2cpus-half+servers-offloads-off")
    assert both.name == "servers-2cpus-half+servers-offloads-off"
    assert both.cpu == {"cpuset": "0-1", "limit": 1.0, "per": "platform"}
    assert both.roles == ("servers",)
    assert both.as_dict()["nic"]["features"]["tso"] is False
    with pytest.raises(ConfigError, match=r"no mode named 'no-such-mode'"):
        modes.load_mode("servers-1cpu+no-such-mode")
    exp = registry.load_experiment("dc-dynamic")
    assert len(exp.modes) == 6 and {m.name.split("+")[0] for m in exp.modes} == {
        "servers-1cpu", "servers-2cpus-half", "servers-2cpus"}
