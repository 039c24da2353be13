"""Sender side and receiver side as separate knobs (issue 41 item 2): where the servers'
interfaces and the load generator's are separate (on one host every tier's veth), each knob but
the MTU is planned once per side over that side's interfaces, its mode covers that role's tiers
only, a side effect is attributed on its own side, and the merged configuration, the persistent
forms and the confirmation name which side (interface) each change is for. On captured veth
states (tests/data/ethtool) and whole advise runs of the simulated kind with a server tier and a
client tier."""

from __future__ import annotations

import configparser
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from analysis import advise as advice
from tierbench.advise import forms, knobs, merge, pilot
from tierbench.advise import run as advise_run
from tierbench.interfaces.netif import Endpoint
from tierbench.kinds.contract import Deployment, Experiment, Point, Tier
import test_advise as ta
import test_advise_rule as tr

advisor_env = ta.advisor_env  # the fixture: the stubbed interfaces and registry

SERVER = ["proxy:eth0", "host:veth1a", "web:eth0", "host:veth2b"]
CLIENT = ["generator:eth0", "host:veth3c"]


def sided(labels: list[str], side: str) -> list[dict[str, Any]]:
    return [{**ta.veth(lb), "side": side} for lb in labels]


def endpoints() -> list[dict[str, Any]]:
    return sided(SERVER, "server") + sided(CLIENT, "client")


def test_separate_sides_plan_each_knob_per_side_and_the_mtu_for_both() -> None:
    plans = ta.by_knob(knobs.plan(endpoints()))
    assert "tso" not in plans and "jumbo.server" not in plans
    tso_s, tso_c, jumbo = plans["tso.server"], plans["tso.client"], plans["jumbo"]
    assert (tso_s.side, tso_c.side, jumbo.side) == ("server", "client", "both")
    assert tso_s.endpoints == SERVER and tso_c.endpoints == CLIENT
    assert jumbo.endpoints == SERVER + CLIENT
    assert len(tso_s.commands["off"]) == 4 and len(tso_c.commands["off"]) == 2
    assert knobs.label("tso.client") == "TCP segmentation offload (TSO), client side"
    assert tso_s.as_dict()["side"] == "server" and tso_s.as_dict()["label"].endswith("server side")
    # every catalogue knob is there per side (or once, the MTU)
    assert sorted(plans) == sorted([*(f"{k}.{s}" for k in knobs.KNOBS if k != "jumbo"
                                      for s in knobs.SIDES), "jumbo"])


def test_one_side_or_an_interface_of_both_roles_keeps_one_knob() -> None:
    for snaps in (sided(SERVER, "server"),
                  sided(SERVER, "server") + sided(CLIENT[:1], "both"),
                  [ta.veth(lb) for lb in SERVER + CLIENT]):
        plans = knobs.plan(snaps)
        assert {p.side for p in plans} == {"both"} and "tso" in ta.by_knob(plans)


def test_a_sides_mode_covers_that_roles_tiers_only() -> None:
    plans = knobs.plan(endpoints())
    modes = {m.name: m for m in knobs.modes(plans)[0]}
    srv, cli = modes["tso.server-off"], modes["gro.client-on"]
    assert srv.roles == ("servers",) and cli.roles == ("clients",)
    assert srv.covers("web", "server") and not srv.covers("generator", "client")
    assert cli.covers("generator", "client") and not cli.covers("proxy", "server")
    assert modes["jumbo-on"].roles == () and modes["all-off"].roles == ()
    assert srv.nic.features == {"tcp-segmentation-offload": False}
    p = ta.by_knob(plans)
    across = knobs.pair_mode(p["tso.server"], p["gro.client"])  # one mode of two parts
    assert [q.roles for q in across.parts] == [("servers",), ("clients",)]
    assert across.name == "tso.server-off_gro.client-on"  # the 2 x 2's fourth corner
    both = knobs.pair_mode(p["tso.server"], p["gro.server"])
    assert both.roles == ("servers",) and not both.parts


ON = {"features": {"generic-receive-offload": True}}
OFF = {"features": {"tcp-segmentation-offload": False}}


def test_side_mode_is_one_scope_or_one_part_per_side() -> None:
    assert knobs.side_mode("c", "d", {"server": ON, "client": {}}).roles == ("servers",)
    assert knobs.side_mode("c", "d", {"server": ON, "client": ON}).roles == ()
    assert knobs.side_mode("c", "d", {"both": ON}).roles == ()
    split = knobs.side_mode("c", "d", {"server": ON, "client": OFF})
    assert [(p.roles, p.nic.features) for p in split.parts] == [
        (("servers",), {"generic-receive-offload": True}),
        (("clients",), {"tcp-segmentation-offload": False})]
    assert split.name == "c" and not split.sets_nothing
    assert split.covers("web", "server") and split.covers("generator", "client")


def test_a_mode_of_parts_sets_each_interface_its_sides_settings_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner binds a mode of parts to the deployment, and each endpoint is changed,
    checked and read back with its own side's settings (tierbench.modes.endpoint)."""
    from tierbench import runner
    from tierbench.interfaces import netif
    from tierbench.modes import endpoint

    split = knobs.side_mode("confirmed", "d", {"server": ON, "client": OFF})
    dep = TwoSides().deploy(None, None, None, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="before it was bound"):
        split.at("web:eth0")  # never applied as the parts' union
    bound = runner.bound(split, dep)
    eps = runner.mode_endpoints(bound, dep)
    assert [e.label for e in eps] == ["web:eth0", "generator:eth0"]
    assert bound.at("web:eth0").nic.features == {"generic-receive-offload": True}
    assert bound.at("generator:eth0").nic.features == {"tcp-segmentation-offload": False}
    told: dict[str, dict[str, bool]] = {}

    def run_all(pid: int | None, argvs: list[list[str]], who: str, via: object = None
                ) -> list[tuple[str | None, str | None]]:
        for argv in argvs:
            if argv[:2] == ["ethtool", "-K"]:  # ethtool -K IFNAME name on|off ...
                told[who] = {n: v == "on" for n, v in zip(argv[3::2], argv[4::2])}
        return [("", None) for _ in argvs]

    monkeypatch.setattr(netif, "run_all", run_all)
    snaps = {e.label: ta.veth(e.label) for e in eps}
    for e in eps:
        assert endpoint.problems(snaps[e.label], bound) == []
        endpoint.change(e, snaps[e.label], bound)
    assert told == {"web:eth0": {"generic-receive-offload": True},
                    "generator:eth0": {"tcp-segmentation-offload": False}}
    # a part over every tier and a part over one side: layered where they meet
    start = knobs.make_mode("start", "d", {"features": {"generic-receive-offload": False,
                                                        "scatter-gather": False}})
    layered = runner.bound(knobs.over(start, knobs.side_mode("c", "d", {"server": ON})), dep)
    assert layered.at("web:eth0").nic.features == {"generic-receive-offload": True,
                                                    "scatter-gather": False}
    assert layered.at("generator:eth0").nic.features == {"generic-receive-offload": False,
                                                          "scatter-gather": False}
    # a mode file's short names and the advisor's long ones are one feature: the later wins
    from tierbench.modes.model import load_mode

    tso_on = knobs.make_mode("tso.server-on", "d", {"features": {
        "tcp-segmentation-offload": True}}, "server")
    over_file = runner.bound(knobs.over(load_mode("tso-off"), tso_on), dep)
    assert over_file.at("web:eth0").nic.features == {"tcp-segmentation-offload": True}
    assert over_file.at("generator:eth0").nic.features == {"tcp-segmentation-offload": False}


def record(changes: dict[str, str]) -> dict[str, Any]:
    """An advise record of one workload on separate sides, its merged configuration
    ``changes`` confirmed."""
    snaps = endpoints()
    plans = knobs.plan(snaps)
    knobs.modes(plans)
    entry = {"name": "small-static", "endpoints": [advise_run.endpoint_view(s) for s in snaps],
             "knobs": [p.as_dict() for p in plans]}
    return {"workloads": [entry], "confirmation": {"confirmed": changes, "is_confirmed": True}}


def test_the_merged_configuration_names_each_interfaces_side_and_changes() -> None:
    rec = record({"tso.server": "off", "gro.client": "on"})
    items = {i["label"]: i for i in merge.interfaces(rec, rec["confirmation"]["confirmed"])}
    assert sorted(items) == sorted(SERVER + CLIENT)
    for lb in SERVER:
        assert items[lb]["side"] == "server" and items[lb]["changes"] == ["tso.server off"]
        assert items[lb]["nic"] == {"features": {"tcp-segmentation-offload": False}}
    for lb in CLIENT:
        assert items[lb]["side"] == "client" and items[lb]["changes"] == ["gro.client on"]
        assert items[lb]["nic"] == {"features": {"generic-receive-offload": True}}
        assert items[lb]["revert"] == {"features": {"generic-receive-offload": False}}
    entry = rec["workloads"][0]
    assert merge.by_side(entry, {"tso.server": "off"}) == {
        "client": {}, "server": {"features": {"tcp-segmentation-offload": False}}}


def test_the_confirmed_forms_are_per_side_and_name_it(tmp_path: Path) -> None:
    rec = record({"tso.server": "off", "gro.client": "on"})
    paths = forms.persist_confirmed(tmp_path, rec)
    root = tmp_path / "persist"
    assert sorted(p.name for p in root.iterdir()) == ["confirmed-client-side",
                                                      "confirmed-server-side"]
    server = (root / "confirmed-server-side" / "apply.sh").read_text()
    client = (root / "confirmed-client-side" / "apply.sh").read_text()
    assert "# proxy:eth0 (the server side)\nethtool -K eth0 tcp-segmentation-offload off" in server
    assert "generic-receive-offload" not in server and "generator" not in server
    assert "# generator:eth0 (the client side)\nethtool -K eth0 generic-receive-offload on" \
        in client and "tcp-segmentation-offload" not in client
    link = root / "confirmed-client-side" / "10-tierbench-generator_eth0.link"
    assert link.read_text().startswith("# generator:eth0 (the client side)\n")
    ini = configparser.ConfigParser()
    ini.optionxform = str  # type: ignore[assignment,method-assign]
    ini.read_string(link.read_text())
    assert ini["Link"]["GenericReceiveOffload"] == "yes" and "TCPSegmentationOffload" not in \
        ini["Link"]
    assert "# host:veth3c (the client side)" in (root / "confirmed-client-side" /
                                                 "nmcli.sh").read_text()
    assert len([p for p in paths if p.suffix == ".link"]) == len(SERVER + CLIENT)


def test_a_workloads_recommended_forms_are_per_side(tmp_path: Path) -> None:
    rec = record({})
    entry = rec["workloads"][0]
    table = [{"workload": "small-static", "row": "knob", "knob": "tso.server",
              "recommended_state": "off", "commands": "x"},
             {"workload": "small-static", "row": "knob", "knob": "gro.client",
              "recommended_state": "on", "commands": "x"}]
    (tmp_path / "advise.json").write_text(json.dumps(rec))
    with (tmp_path / "advice.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["workload", "row", "knob", "recommended_state", "commands"])
        w.writeheader()
        w.writerows(table)
    forms.persist(tmp_path)
    root = tmp_path / "persist"
    assert sorted(p.name for p in root.iterdir()) == ["small-static-client-side",
                                                      "small-static-server-side"]
    assert "tcp-segmentation-offload on" in (root / "small-static-server-side" /
                                             "revert.sh").read_text()
    assert forms.recommended(entry, table, "client")[0] == {
        "features": {"generic-receive-offload": True}}


def test_a_side_effect_is_attributed_on_its_own_side(tmp_path: Path) -> None:
    # checksum off on the server side took TSO off there: compared with tso.server-off, not
    # ambiguous between the two sides' TSO knobs
    on = {f: "on" for f in tr.TSO + tr.CHECKSUM}
    during = {**on, **{f: "off" for f in tr.TSO + tr.CHECKSUM[1:]}}
    points = {"p1": {"mode": "checksum.server-off",
                     "interfaces_before": {"proxy:eth0": {"features": on}},
                     "interfaces_during": {"proxy:eth0": {"features": during}}}}
    (tmp_path / "manifest.json").write_text(json.dumps({"points": points}))
    plans = [{"knob": f"{k}.{s}", "side": s, "changeable": True, "mode": f"{k}.{s}-off",
              "target": "off", "state": "on", "features_asked": fam}
             for k, fam in (("tso", tr.TSO), ("checksum", tr.CHECKSUM)) for s in knobs.SIDES]
    entry = {"name": "sim", "primary": "throughput", "metrics": tr.METRICS, "knobs": plans}
    values = {m: {b: {"tps": 100.0 - b, "cpu": 10.0} for b in range(1, 9)}
              for m in ["baseline", *(p["mode"] for p in plans)]}
    found = advice.measure(entry, values, 8, tmp_path)
    m = found["checksum.server"]
    assert m.owners == ["tso.server"] and m.held is not None and m.held["mode"] == "tso.server-off"
    assert found["checksum.client"].held is None  # its points moved nothing


def test_what_moved_is_read_from_the_points_records_when_the_manifest_has_them_slim(
        tmp_path: Path) -> None:
    # a finished point's manifest entry lacks its snapshots (runner: apply.without_snapshots);
    # its point.json has them whole
    on = {f: "on" for f in tr.TSO + tr.CHECKSUM}
    during = {**on, **{f: "off" for f in tr.TSO + tr.CHECKSUM[1:]}}
    whole = {"mode": "checksum.server-off", "point": "p1",
             "interfaces_before": {"proxy:eth0": {"features": on}},
             "interfaces_during": {"proxy:eth0": {"features": during}}}
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"points": {"p1": {"mode": "checksum.server-off", "point": "p1"}}}))
    assert advice.moved(tmp_path, "checksum.server-off") == {}  # no point.json: nothing known
    (tmp_path / "points" / "p1").mkdir(parents=True)
    (tmp_path / "points" / "p1" / "point.json").write_text(json.dumps(whole))
    assert advice.moved(tmp_path, "checksum.server-off") == {
        f: "off" for f in tr.TSO + tr.CHECKSUM[1:]}


def test_the_pilot_ranks_a_sides_dependents_with_that_sides_tso() -> None:
    plans = [p.as_dict() for p in knobs.plan(endpoints())]
    for p in plans:
        p["mode"] = p["mode"] or (f"{p['knob']}-x" if p["changeable"] else None)
    order = pilot.ranked(plans)
    assert order[:2] == ["tso.server", "tso.client"]
    assert order[-4:] == ["checksum.server", "checksum.client", "sg.server", "sg.client"]
    assert "checksum.client" not in pilot.ranked([p for p in plans if p["knob"] != "tso.client"])


class TwoSides(ta.KnobSim):
    """The knob simulation with a server tier and a client tier, each its own interface."""

    def deploy(self, exp: Experiment, key: Any, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        return Deployment(key, {"web": Tier("web", "server", [Endpoint("web", "eth0", 4242)]),
                                "generator": Tier("generator", "client",
                                                  [Endpoint("generator", "eth0", 4343)])}, {}, {})


def two_sides_run(advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                  effects: dict[str, tuple[float, float]]) -> Path:
    """An advise run of the first workload on TwoSides with these effects by mode name (no
    other knob has an effect on either side)."""
    from tierbench.kinds import registry

    found = dict(registry.kinds())
    found["knob-sim"] = TwoSides()
    monkeypatch.setattr(registry, "kinds", lambda: found)
    monkeypatch.setattr(advise_run, "discovery_deployment",
                        lambda exp, scratch: TwoSides().deploy(exp, None, None, None, None))
    monkeypatch.setattr(knobs, "read_endpoint", lambda ep, container=None: ta.veth(ep.label))
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.01)
    monkeypatch.setattr(ta, "EFFECTS", effects)
    return advise_run.Advisor(["first"], 5, 5.0, advisor_env["suite"]).run()


def test_sides_that_need_different_settings_are_confirmed_as_one_mode_of_two_parts(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from tierbench.modes import apply

    seen: dict[str, Any] = {}
    stub = apply.mode_applied

    def applied(mode: Any, eps: Any, *args: Any, **kwargs: Any) -> Any:
        if mode.name == "confirmed":
            seen["confirmed"] = (mode, [e.label for e in eps])
        if "_" in mode.name:
            seen["pair"] = mode
        return stub(mode, eps, *args, **kwargs)

    monkeypatch.setattr(apply, "mode_applied", applied)
    # the truth: each change +20 % on its own, the configuration +44 % (both), on TPS
    folder = two_sides_run(advisor_env, monkeypatch, {
        "gro.client-on": (0.2, 0.0), "gso.server-off": (0.2, 0.0), "confirmed": (0.44, 0.0)})
    record_ = json.loads((folder / "advise.json").read_text())
    conf = record_["confirmation"]
    assert conf["merged"] == {"gso.server": "off", "gro.client": "on"}
    assert conf["is_confirmed"] and conf["confirmed"] == conf["merged"]
    assert conf["status"].startswith("confirmed on 1 workload(s)")
    (outcome,) = conf["rounds"][0]["workloads"].values()
    effect = outcome["effects"]["throughput"]
    assert effect["low_pct"] < 44 < effect["high_pct"] and outcome["better"]
    # one point's mode: each side's change on that side's interface only
    mode, labels = seen["confirmed"]
    assert labels == ["web:eth0", "generator:eth0"] and len(mode.parts) == 2
    assert mode.at("web:eth0").nic.features == {"generic-segmentation-offload": False}
    assert mode.at("generator:eth0").nic.features == {"generic-receive-offload": True}
    # the 2 x 2 of the two changes, across the sides, ran (its fourth corner: two parts)
    assert set(record_["workloads"][0]["pair"]["mode"].split("_")) == {"gso.server-off",
                                                                       "gro.client-on"}
    assert len(seen["pair"].parts) == 2
    config = json.loads((folder / "config.json").read_text())
    assert config["confirmed"] and [(i["label"], i["nic"]) for i in config["interfaces"]] == [
        ("web:eth0", {"features": {"generic-segmentation-offload": False}}),
        ("generator:eth0", {"features": {"generic-receive-offload": True}})]
    root = folder / "persist"
    assert {"confirmed-server-side", "confirmed-client-side"} <= {p.name for p in root.iterdir()}


def test_an_advise_run_measures_each_side_and_writes_side_forms(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # GRO on helps on the client side only
    folder = two_sides_run(advisor_env, monkeypatch, {"gro.client-on": (0.2, 0.0)})
    record_ = json.loads((folder / "advise.json").read_text())
    (entry,) = record_["workloads"]
    assert [(e["label"], e["side"]) for e in entry["endpoints"]] == [
        ("web:eth0", "server"), ("generator:eth0", "client")]
    planned = {k["knob"]: k for k in entry["knobs"] if k["changeable"]}
    assert {"gro.server", "gro.client", "jumbo"} <= set(planned)
    assert planned["gro.client"]["endpoints"] == ["generator:eth0"]
    table = list(csv.DictReader((folder / "advice.csv").open()))
    rows = {r["knob"]: r for r in table if r["workload"] == "first" and r["row"] == "knob"}
    assert rows["gro.server"]["side"] == "server" and rows["gro.server"]["interfaces"] == \
        "web:eth0"
    gro_c, gro_s = rows["gro.client"], rows["gro.server"]
    assert gro_c["recommendation"] == "enable" and gro_c["side"] == "client"
    assert float(gro_c["throughput_effect_pct"]) == pytest.approx(20, abs=2)
    assert gro_s["recommendation"] == advice.NO_EFFECT and not gro_s["commands"]
    assert rows["jumbo"]["side"] == "both" and rows["jumbo"]["interfaces"] == \
        "web:eth0 generator:eth0"
    # the configuration: GRO on for the client's interface only, confirmed by a mode over the
    # clients' tiers
    config = json.loads((folder / "config.json").read_text())
    assert config["confirmed"] and config["changes"] == {"gro.client": "on"}
    assert [(i["label"], i["side"], i["changes"]) for i in config["interfaces"]] == [
        ("generator:eth0", "client", ["gro.client on"])]
    apply_sh = (folder / "persist" / "confirmed" / "apply.sh").read_text()
    assert "# generator:eth0 (the client side)\nethtool -K eth0 generic-receive-offload on" \
        in apply_sh and "web:eth0" not in apply_sh
    assert "gro.client-on" in advisor_env["applied"] and "gro.server-on" in advisor_env["applied"]
    # each side's knob tried on its own interfaces (a trial per side, not one for both)
    tried = {t["mode"] for t in record_["trials"]}
    assert {"tso.server-off", "tso.client-off", "jumbo-on"} <= tried
