"""The advice from a stated configuration (`tierbench advise --from MODE`) and the
configuration kept when nothing is confirmed (persist/kept/), on whole advise runs of the
simulated kind (test_advise's KnobSim: effects known by mode name; the interfaces' changes
stubbed, the state they read during discovery following the mode applied).

The truth of the --from run: from tso-off, TSO on is worth +50 % TPS and -30 % CPU per KB,
nothing else matters; the configuration (tso on over tso-off) is the same +50 %."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tierbench import cli
from tierbench.advise import knobs
from tierbench.advise import run as advise_run
from tierbench.config.errors import ConfigError
from tierbench.interfaces import netif
from tierbench.modes import apply
import test_advise as ta

advisor_env = ta.advisor_env  # the fixture: the stubbed interfaces and registry

TSO = "tcp-segmentation-offload"


def tso_off(label: str) -> dict[str, Any]:
    """A veth as it reads with TSO off (the feature and its sub-features)."""
    snap = ta.veth(label)
    for name, f in snap["features"].items():
        if name == TSO or f.get("parent") == TSO:
            f["on"] = False
    return snap


def over_tso_off(mode: Any) -> bool:
    """Whether a mode is applied over the stated configuration tso-off."""
    return bool(mode.parts) and mode.parts[0].name == "tso-off"


@pytest.fixture()
def from_env(advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """advisor_env, with every applied mode kept and discovery reading the interfaces as the
    mode applied at that moment leaves them (TSO off while a mode over tso-off is applied)."""
    seen: list[Any] = []
    now: list[Any] = []
    stub = apply.mode_applied

    @contextmanager
    def applied(mode: Any, eps: Any, *args: Any, **kwargs: Any) -> Iterator[None]:
        seen.append(mode)
        now.append(mode)
        try:
            with stub(mode, eps, *args, **kwargs):
                if over_tso_off(mode) and mode.name != "tso-on":  # the kernel ran TSO off
                    args[2]["interfaces_during"] = {"sim:eth0": netif.settings_view(
                        tso_off("sim:eth0"))}
                yield
        finally:
            now.pop()

    def read(ep: Any, container: Any = None) -> dict[str, Any]:
        return tso_off(ep.label) if now and over_tso_off(now[-1]) else ta.veth(ep.label)

    monkeypatch.setattr(apply, "mode_applied", applied)
    monkeypatch.setattr(knobs, "read_endpoint", read)
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.01)
    # points of 0.01 s (the estimate above): these runs' statements do not hang on time
    advisor_env["suite"].write_text(ta.SUITE.replace("sleep_s: 0.05", "sleep_s: 0.01"))
    return {**advisor_env, "seen": seen}


def test_an_advise_run_from_a_stated_configuration_measures_and_confirms_changes_from_it(
        from_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # all-on holds tso on (the rest on as they are): the same truth
    monkeypatch.setattr(ta, "EFFECTS", {"tso-on": (0.5, -0.3), "confirmed": (0.5, -0.3),
                                        "all-on": (0.5, -0.3)})
    folder = advise_run.Advisor(["first"], 5, 5.0, from_env["suite"], start="tso-off").run()
    record = json.loads((folder / "advise.json").read_text())
    assert record["from"] == {"mode": "tso-off", "description": record["from"]["description"],
                              "nic": {"features": {TSO: False}}}
    (entry,) = record["workloads"]
    # discovery read the interfaces under tso-off, applied under the rollback guard (a
    # timeout given) and put back: TSO is off there, so its mode is tso-on
    assert entry["from_applied"]["point"] == "the discovery under tso-off"
    tso = next(k for k in entry["knobs"] if k["knob"] == "tso")
    assert (tso["state"], tso["mode"]) == ("off", "tso-on")
    # every mode applied, trials and the baseline included, is over tso-off
    assert all(m.parts and m.parts[0].name == "tso-off" for m in from_env["seen"])
    assert {"baseline", "tso-on", "confirmed"} <= {m.name for m in from_env["seen"]}
    table = list(csv.DictReader((folder / "advice.csv").open()))
    rows = {r["knob"]: r for r in table if r["row"] == "knob"}
    assert rows["tso"]["recommendation"] == "enable"
    assert float(rows["tso"]["throughput_effect_pct"]) == pytest.approx(50, abs=3)
    others = [r for k, r in rows.items() if k != "tso" and r["commands"]]
    assert others == []  # nothing else matters: no other change recommended
    # TSO off during every point over tso-off is the baseline's state too: no side effect
    # (the points' interfaces_before, the machine's own state, had it on)
    assert rows["gso"]["side_effects"] == "" and rows["gso"]["compared_with"] == "baseline"
    conf = record["confirmation"]
    assert conf["is_confirmed"] and conf["confirmed"] == {"tso": "on"}
    (outcome,) = conf["rounds"][0]["workloads"].values()
    e = outcome["effects"]["throughput"]
    assert e["low_pct"] < 50 < e["high_pct"]
    # the configuration is tso-off's settings with the change over them
    config = json.loads((folder / "config.json").read_text())
    assert config["from"]["mode"] == "tso-off" and config["confirmed"]
    assert config["interfaces"][0]["nic"] == {"features": {TSO: True}}
    notes = (folder / "persist" / "confirmed" / "NOTES.txt").read_text()
    assert notes.startswith("- measured from the stated configuration tso-off")
    assert f"ethtool -K eth0 {TSO} on" in (folder / "persist" / "confirmed" /
                                           "apply.sh").read_text()
    assert "Started from a stated configuration:</b> tso-off" in \
        (folder / "advice.html").read_text()


def test_nothing_confirmed_pins_the_measured_configuration_it_keeps(
        from_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ta, "EFFECTS", {})  # the truth: no knob matters
    folder = advise_run.Advisor(["first"], 5, 5.0, from_env["suite"]).run()
    config = json.loads((folder / "config.json").read_text())
    assert not config["confirmed"] and config["status"].startswith("nothing to confirm")
    (item,) = config["kept"]["interfaces"]
    # every knob the run measured, in its state now (veth: the offloads on, MTU 1500, one
    # channel; RPS/XPS masks 0)
    entry = json.loads((folder / "advise.json").read_text())["workloads"][0]
    measured = [k["knob"] for k in entry["knobs"] if k["changeable"] and not k.get("left_out")
                and k["state"] in ("on", "off")]
    assert [c.split()[0] for c in item["changes"]] == measured
    assert {"tso", "gro", "jumbo"} <= set(measured)
    assert item["nic"]["features"][TSO] is True and item["nic"]["mtu"] == 1500
    assert item["nic"]["features"]["generic-receive-offload"] is False  # veth's default: off
    kept = folder / "persist" / "kept"
    apply_sh = (kept / "apply.sh").read_text()
    assert f"{TSO} on" in apply_sh and "generic-receive-offload off" in apply_sh
    assert "TCPSegmentationOffload=yes" in (kept / "10-tierbench-sim_eth0.link").read_text()
    assert (kept / "NOTES.txt").read_text().startswith("- nothing was confirmed (nothing to "
                                                       "confirm")
    assert "ethtool" not in (kept / "revert.sh").read_text()
    assert not (folder / "persist" / "confirmed").exists()
    assert "persist/kept/ pins the configuration kept" in (folder / "advice.html").read_text()


def test_from_refuses_a_mode_that_is_not_interface_settings_in_one_sentence(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"^--from big-socket-buffers: mode big-socket-buffers: sysctls: "):
        advise_run.starting("big-socket-buffers")
    assert cli.main(["advise", "--from", "no-such-mode"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tierbench: ") and "no-such-mode" in err and "\n" not in err
