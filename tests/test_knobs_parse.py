"""Unit tests of tierbench.interfaces.ethtool parsers, queues and qdisc and the capability check of tierbench.modes.apply on captured ethtool output.

Data files in tests/data/ethtool/ besides the ``-k`` ones described in test_netif_parse.py:
- veth-l.txt, veth-c.txt, veth-g.txt, veth-x.txt: captured here (kernel 6.18, ethtool 6.1)
  from a tbm-* veth: ``ethtool -l`` output, and the errors ``-c``, ``-g`` and ``-x`` print.
- ixgbe-{c,g,l,x}.txt, mlx5_core-{c,g,l}.txt, bnxt_en-g.txt: ethtool 6.x netlink format of those
  drivers (Intel 82599, ConnectX-5, Broadcom NetXtreme-E), written after publicly posted outputs;
  not captured on hardware here (this VM has no physical NIC of those kinds).
"""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import pytest

from tierbench.interfaces import ethtool, netif, qdisc, queues
from tierbench.modes import apply as knobs
from tierbench.modes import endpoint
from tierbench.modes.model import Knobs, Mode
from tierbench.interfaces.netif import NicSettings

DATA = Path(__file__).parent / "data" / "ethtool"


def text(name: str) -> str:
    return (DATA / name).read_text()


def mode(nic: NicSettings | None = None, **kw: object) -> Mode:
    return Mode(name="m", description="", tiers=("web",), nic=nic or NicSettings(), source="m",
                knobs=Knobs(**kw))  # type: ignore[arg-type]


def snap(driver: str, label: str = "web:eth0") -> dict:
    """A snapshot as snapshot_mode() would record it, from the captured files of a driver."""
    files = {"veth": "veth-default.txt", "ixgbe": "ixgbe.txt", "mlx5_core": "mlx5_core.txt",
             "bnxt_en": "mlx5_core.txt"}
    s: dict = {"label": label, "tier": "web", "ifname": "eth0", "netns_pid": 4242,
               "driver": driver, "features": netif.parse_features(text(files[driver])),
               "mtu": 1500, "min_mtu": 68, "max_mtu": 9600 if driver != "veth" else 65535,
               "qdisc": "qdisc noqueue 0: root refcnt 2",
               "qdisc_root": {"kind": "noqueue", "handle": "0:"}}
    for key, opt, parse in (("channels", "l", ethtool.parse_channels),
                            ("rings", "g", ethtool.parse_rings)):
        path = DATA / f"{driver}-{opt}.txt"
        if path.exists():
            body = path.read_text()
            s[key] = {"error": body.strip()} if "error" in body else parse(body)
    path = DATA / f"{driver}-c.txt"
    if path.exists():
        body = path.read_text()
        s["coalesce"] = ({"error": body.strip()} if "error" in body
                         else {"current": ethtool.parse_coalesce(body)})
    path = DATA / f"{driver}-x.txt"
    if path.exists():
        body = path.read_text()
        s["rss"] = ({"error": body.strip()} if "Operation not supported" in body
                    else {"table": ethtool.parse_indirection(body)})
    return s


# ----------------------------------------------------------------------------- parsers


def test_parse_channels_veth_and_physical() -> None:
    assert ethtool.parse_channels(text("veth-l.txt")) == {
        "max": {"rx": 2, "tx": 2, "other": None, "combined": None},
        "current": {"rx": 1, "tx": 1, "other": None, "combined": None},
    }
    ix = ethtool.parse_channels(text("ixgbe-l.txt"))
    assert ix["max"] == {"rx": None, "tx": None, "other": 1, "combined": 63}
    assert ix["current"]["combined"] == 2
    assert ethtool.parse_channels(text("mlx5_core-l.txt"))["current"]["combined"] == 8


def test_parse_coalesce() -> None:
    ix = ethtool.parse_coalesce(text("ixgbe-c.txt"))
    assert ix["adaptive-rx"] is None and ix["adaptive-tx"] is None  # n/a: not supported
    assert ix["rx-usecs"] == 1 and ix["tx-frames-irq"] == 256 and ix["rx-frames"] is None
    assert "rx-frames-low" in ix and "rx-frame-low" not in ix  # ethtool's spelling mapped
    mlx = ethtool.parse_coalesce(text("mlx5_core-c.txt"))
    assert mlx["adaptive-rx"] is True and mlx["adaptive-tx"] is True
    assert (mlx["rx-usecs"], mlx["rx-frames"], mlx["tx-usecs"], mlx["tx-frames"]) == (8, 128,
                                                                                      16, 32)
    assert mlx["cqe-mode-rx"] is False and ix["cqe-mode-rx"] is None
    assert ethtool.parse_coalesce(text("veth-c.txt")) == {}


def test_parse_rings() -> None:
    ix = ethtool.parse_rings(text("ixgbe-g.txt"))
    assert ix["max"] == {"rx": 4096, "rx-mini": None, "rx-jumbo": None, "tx": 4096}
    assert ix["current"]["rx"] == 512 and "tcp-data-split" not in ix["current"]
    mlx = ethtool.parse_rings(text("mlx5_core-g.txt"))
    assert mlx["current"]["tcp-data-split"] is None and mlx["current"]["tx-push"] is False
    bnxt = ethtool.parse_rings(text("bnxt_en-g.txt"))
    assert bnxt["current"]["tcp-data-split"] is False and bnxt["max"]["rx-jumbo"] == 8191


def test_parse_indirection() -> None:
    table = ethtool.parse_indirection(text("ixgbe-x.txt"))
    assert len(table) == 128 and set(table) == {0, 1} and table[:4] == [0, 1, 0, 1]
    assert ethtool.parse_indirection(text("veth-x.txt")) == []


def test_qdisc_commands() -> None:
    assert qdisc.qdisc_commands("eth0", {"kind": "tbf", "rate": "1gbit"}) == [[
        "tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "tbf", "rate", "1gbit",
        "burst", "131072b", "latency", "50ms"]]
    ten = qdisc.qdisc_commands("eth0", {"kind": "tbf", "rate": "10gbit", "latency": "5ms"})
    assert ten[0][-3:] == ["1250000b", "latency", "5ms"]  # 1 ms worth of the rate
    htb = qdisc.qdisc_commands("eth0", {"kind": "htb", "rate": "10gbit"})
    assert htb[0][-3:] == ["htb", "default", "1"]
    assert htb[1][-6:] == ["classid", "1:1", "htb", "rate", "10gbit", "ceil", "10gbit"][-6:]
    netem = qdisc.qdisc_commands("eth0", {"kind": "netem", "delay": "5ms", "jitter": "1ms",
                                          "loss": "0.1%"})
    assert netem[0][8:] == ["netem", "delay", "5ms", "1ms", "loss", "0.1%"]


def test_rate_bits() -> None:
    assert qdisc.rate_bits("1gbit") == 1e9 and qdisc.rate_bits("125mbps") == 1e9
    assert qdisc.rate_bits("200Mbit") == 2e8


# ----------------------------------------------------------------------------- check (pure)


def test_veth_refuses_coalescing_rings_and_rss_naming_setting_interface_driver() -> None:
    s = snap("veth")
    co = endpoint.problems(s, mode(coalesce={"adaptive-rx": True, "rx-usecs": 50}))
    assert co == [
        "interrupt coalescing (ethtool -C adaptive-rx on rx-usecs 50) is not supported by "
        "web:eth0 (driver veth): ethtool -c says netlink error: Operation not supported; drop "
        "it from mode m or use an interface whose driver supports it"]
    hs = endpoint.problems(s, mode(rings={"tcp-data-split": True}))
    assert len(hs) == 1 and hs[0].startswith(
        "header-data split and rings (ethtool -G tcp-data-split on) are not supported by "
        "web:eth0 (driver veth)")
    rss = endpoint.problems(s, mode(rss={"equal": 2}))
    assert len(rss) == 1 and "RSS indirection (ethtool -X equal 2)" in rss[0]
    assert "driver veth" in rss[0] and "Operation not supported" in rss[0]


def test_veth_channels_within_and_beyond_maximum() -> None:
    s = snap("veth")
    assert endpoint.problems(s, mode(channels={"rx": 2, "tx": 2})) == []
    over = endpoint.problems(s, mode(channels={"rx": 4}))
    assert over == ["channels rx 4 is more than web:eth0 (driver veth) allows (at most 2); "
                    "lower it in mode m"]
    combined = endpoint.problems(s, mode(channels={"combined": 2}))
    assert "channels combined" in combined[0] and "n/a" in combined[0]


def test_physical_drivers_coalescing() -> None:
    case5 = {"adaptive-rx": True, "rx-usecs": 50, "rx-frames": 64}
    assert endpoint.problems(snap("mlx5_core"), mode(coalesce=case5)) == []
    ix = endpoint.problems(snap("ixgbe"), mode(coalesce=case5))
    assert len(ix) == 2
    assert all("(driver ixgbe)" in p and "n/a" in p for p in ix)
    assert "adaptive-rx" in ix[0] and "rx-frames" in ix[1]
    assert endpoint.problems(snap("ixgbe"), mode(coalesce={"rx-usecs": 20})) == []


def test_physical_drivers_rings_and_header_split() -> None:
    split = mode(rings={"tcp-data-split": True})
    assert endpoint.problems(snap("bnxt_en"), split) == []
    mlx = endpoint.problems(snap("mlx5_core"), split)
    assert len(mlx) == 1 and "header-data split" in mlx[0] and "(driver mlx5_core)" in mlx[0]
    ix = endpoint.problems(snap("ixgbe"), split)
    assert "no such setting" in ix[0]  # ethtool prints no TCP data split line for ixgbe
    assert endpoint.problems(snap("ixgbe"), mode(rings={"rx": 4096, "tx": 1024})) == []
    big = endpoint.problems(snap("ixgbe"), mode(rings={"rx": 8192}))
    assert big == ["ring rx 8192 is not possible on web:eth0 (driver ixgbe) (ethtool -g: at "
                   "most 4096); change mode m"]


def test_physical_channels_and_rss() -> None:
    assert endpoint.problems(snap("ixgbe"), mode(channels={"combined": 8})) == []
    rx = endpoint.problems(snap("mlx5_core"), mode(channels={"rx": 2}))
    assert "channels rx" in rx[0] and "(driver mlx5_core)" in rx[0]
    assert endpoint.problems(snap("ixgbe"), mode(rss={"equal": 2})) == []


def test_fixed_features_are_refused_with_the_rest() -> None:
    s = snap("mlx5_core")
    fixed = [n for n, f in s["features"].items() if f["fixed"] and not f["on"]]
    assert fixed
    probs = endpoint.problems(s, mode(NicSettings(features={fixed[0]: True}),
                                            coalesce={"adaptive-rx": False}))
    assert probs == [f"web:eth0 (driver mlx5_core) cannot turn {fixed[0]} on: it is fixed off"]


def test_qdisc_on_configured_root_is_refused() -> None:
    s = snap("veth")
    tbf = mode(qdisc={"kind": "tbf", "rate": "1gbit"})
    assert endpoint.problems(s, tbf) == []
    s["qdisc_root"] = {"kind": "htb", "handle": "1:"}
    assert "already has a configured root qdisc htb 1:" in endpoint.problems(s, tbf)[0]


def test_rps_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queues, "online_cpu_mask", lambda node=None: "3")
    s = snap("veth")
    s["queues"] = {"rx-0": {"rps_cpus": "0"}, "tx-0": {"xps_cpus": "0"}}
    assert endpoint.problems(s, mode(rps_cpus="all", xps_cpus="2")) == []
    bad = endpoint.problems(s, mode(rps_cpus="f0"))
    assert bad == ["rps_cpus f0 names CPUs that are not online (online mask 3); change mode m"]
    s["queues"] = {"tx-0": {"xps_cpus": "0"}}
    assert "no rx queue has rps_cpus" in endpoint.problems(s, mode(rps_cpus="1"))[0]
    assert queues.mask_writes({"rx-0": {"rps_cpus": "0"}, "rx-1": {"rps_cpus": "0"},
                               "tx-0": {"xps_cpus": "00000000"}}, "all", None) == {
        "rx-0/rps_cpus": "3", "rx-1/rps_cpus": "3"}
    assert queues.mask_int("00000000,00000003") == 3


def test_check_mode_reports_unreadable_endpoint_without_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(ep: netif.Endpoint, mode: Mode) -> dict:
        raise netif.NetifError(f"{ep.label}: `ip -d -j link show dev eth9` failed (exit 1): "
                               "Device \"eth9\" does not exist.")

    monkeypatch.setattr(endpoint, "snapshot", boom)
    probs = knobs.check_mode(mode(), [netif.Endpoint("host", "eth9", None)])
    assert len(probs) == 1 and probs[0].startswith("host:eth9 cannot be read")
    assert "does not exist" in probs[0]


def test_restore_state_accepts_the_old_form(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(netif, "restore", lambda snaps: seen.setdefault("old", snaps) and [])
    old = {"web:eth0": snap("veth")}
    assert knobs.restore_state(copy.deepcopy(old)) == []
    assert seen["old"] == old
    view = knobs.state_view(old)
    assert view == {"web:eth0": netif.settings_view(old["web:eth0"])}


def test_state_view_is_compact() -> None:
    s = snap("mlx5_core")
    state = {"version": 2, "kind": knobs.STATE_KIND, "mode": "m", "endpoints": {"web:eth0": s},
             "sysctls": {"netns:4242": {"pid": 4242, "netns_ino": 1,
                                        "values": {"net.ipv4.tcp_rmem": "4096 131072 6291456"}}}}
    view = knobs.state_view(state)
    ep = view["endpoints"]["web:eth0"]
    assert ep["mtu"] == 1500 and ep["channels"]["combined"] == 8
    assert ep["coalesce"]["rx-usecs"] == 8 and "rx-usecs-irq" not in ep["coalesce"]
    assert ep["rings"]["rx"] == 1024
    assert view["sysctls"] == {"netns:4242": {"net.ipv4.tcp_rmem": "4096 131072 6291456"}}


def ethtool_module_strays(path: Path) -> list[str]:
    """What in a module is not ethtool's: a command run (run_ns, run_in, run_argv, a
    transport's run), a sysfs or procfs path, a tc or sysctl command."""
    tree = ast.parse(path.read_text())
    out = [f"calls {n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
           and n.attr in ("run_ns", "run_in", "run_argv", "run", "try_run")]
    return out + [f"names {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and re.match(r"^(/sys|/proc|tc$|sysctl$|unshare$)", n.value)]


def test_the_ethtool_module_holds_only_ethtool(tmp_path: Path) -> None:
    """interfaces/ethtool.py is ethtool's output parsed and its arguments made; queue masks
    (interfaces/queues.py), the qdisc (interfaces/qdisc.py), sysctls (modes/sysctls.py) and
    running commands (netif) live elsewhere."""
    assert ethtool_module_strays(Path(ethtool.__file__)) == []
    module = tmp_path / "m.py"
    module.write_text('def f(ep):\n    return netif.run_ns(None, ["tc", "qdisc"], "x")\n')
    assert ethtool_module_strays(module) == ["calls run_ns", "names 'tc'"]

