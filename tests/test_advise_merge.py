"""One configuration from the workloads' verdicts, confirmed (tierbench.advise.merge and
confirm) against simulations with known truths, at the documented budget: plan.MIN_BLOCKS
blocks of each workload's knob run and of each confirmation round, a true sd of 0.04 of a
block's log ratio (test_advise_rule's simulation). Each share over 500 seeds: a binomial sd
of at most 1.0 point at 95 % and 1.8 points at 80 %."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from analysis import advise as advice
from tierbench.advise import confirm, merge
from tierbench.config.errors import ConfigError
from test_advise_rule import BLOCKS, KNOBS, SD, entry, values

SEEDS = 500
WORKLOADS = ("a", "b")


def knob_votes(seed: int, truth: dict[str, dict[str, float]],
               unmeasured: tuple[str, str] | None = None) -> list[merge.Vote]:
    """Every workload's knob run simulated (every knob's mode, TPS effects of ``truth``) and
    decided by the advice's rule; its votes as merge reads them from advice.csv's rows
    (``unmeasured``: a workload and a knob its run did not measure)."""
    out = []
    for n, w in enumerate(WORKLOADS):
        e = entry()
        effects = {f"{k}-{KNOBS[k]}": (eff, 0.0) for k, eff in truth[w].items()}
        found, decided = advice.decisions(e, values(seed * 10 + n, effects), BLOCKS, None)
        for name, m in found.items():
            rec, state, _ = decided[name][1]
            row = {"recommendation": rec, "recommended_state": state,
                   "effect_pct": m.changes["throughput"].effect_pct}
            v = merge.vote_of(w, m.knob, row, "higher")
            assert v is not None
            if (w, name) != unmeasured:
                out.append(v)
    return out


def confirmation(seed: int, truth: dict[str, dict[str, float]]) -> Any:
    """A round's measurement: per workload the baseline and the configuration once per
    block, the configuration's true effect the product of its changes' effects."""
    def measure(changes: dict[str, str], n: int) -> confirm.Outcomes:
        out = {}
        for i, w in enumerate(WORKLOADS):
            rng = random.Random(seed * 1000 + n * 10 + i)
            effect = math.prod(1 + truth[w].get(k, 0.0) for k in changes)
            v: advice.Values = {"baseline": {}, confirm.MODE: {}}
            for block in range(1, BLOCKS + 1):
                level = rng.gauss(0, 0.1)
                for mode, t in (("baseline", 1.0), (confirm.MODE, effect)):
                    v[mode][block] = {"tps": 1000 * t * math.exp(
                        level + rng.gauss(0, SD / math.sqrt(2))), "cpu": 10.0}
            out[w] = confirm.judge(entry(), v, BLOCKS)
        return out
    return measure


def confirmed(seed: int, truth: dict[str, dict[str, float]], weights: dict[str, float],
              unmeasured: tuple[str, str] | None = None) -> dict[str, Any]:
    """The whole path: knob runs, votes, merge, confirmation."""
    votes = knob_votes(seed, truth, unmeasured)
    merged = merge.merge(votes, weights)
    return {"merged": merged.changes, **confirm.settle(merged.changes, votes,
                                                       confirmation(seed, truth))}


# gro: +10 % on a, -20 % on b (beyond the threshold); jumbo: +10 % on both
MIXED = {"a": {"gro": 0.10, "jumbo": 0.10}, "b": {"gro": -0.20, "jumbo": 0.10}}


@pytest.mark.parametrize("weights", [{"a": 1.0, "b": 1.0}, {"a": 3.0, "b": 1.0}],
                         ids=["equal", "a-weighs-3"])
def test_a_change_worse_beyond_the_threshold_on_one_workload_is_not_confirmed(
        weights: dict[str, float]) -> None:
    runs = [confirmed(seed, MIXED, weights) for seed in range(SEEDS)]
    assert sum("gro" in r["confirmed"] for r in runs) / SEEDS <= 0.05
    # the change good everywhere is kept
    assert sum(r["confirmed"].get("jumbo") == "on" for r in runs) / SEEDS >= 0.80


def test_a_loss_no_knob_run_measured_is_found_by_the_confirmation_and_dropped() -> None:
    # b's knob run did not measure gro (cut short): the merge takes gro from a's verdict, the
    # confirmation on b finds the configuration worse, drops gro, and says so; jumbo is kept
    runs = [confirmed(seed, MIXED, {"a": 1.0, "b": 1.0}, ("b", "gro"))
            for seed in range(SEEDS)]
    merged = [r for r in runs if "gro" in r["merged"]]
    assert len(merged) / SEEDS >= 0.80
    assert sum("gro" in r["confirmed"] for r in runs) / SEEDS <= 0.05
    said = [d for r in merged for d in r["dropped"] if d["change"] == "gro on"]
    assert len(said) / len(merged) >= 0.95
    assert all(d["because"].startswith("b: TPS -") and "worse beyond the threshold"
               in d["because"] for d in said)
    assert sum(r["confirmed"].get("jumbo") == "on" for r in runs) / SEEDS >= 0.80


def test_a_change_good_everywhere_is_confirmed_in_at_least_80_percent_of_runs() -> None:
    truth = {"a": {"jumbo": 0.10}, "b": {"jumbo": 0.10}}
    runs = [confirmed(seed, truth, {"a": 1.0, "b": 1.0}) for seed in range(SEEDS)]
    hits = [r for r in runs if r["confirmed"] == {"jumbo": "on"}]
    assert len(hits) / SEEDS >= 0.80
    assert all(r["is_confirmed"] and r["status"].startswith("confirmed on 2 workload(s)")
               for r in hits)


def test_when_no_knob_matters_at_most_5_percent_of_runs_confirm_a_change() -> None:
    runs = [confirmed(seed, {"a": {}, "b": {}}, {"a": 1.0, "b": 1.0}) for seed in range(SEEDS)]
    assert sum(bool(r["confirmed"]) for r in runs) / SEEDS <= 0.05


def test_the_merge_weighs_effects_and_never_takes_a_change_one_workload_finds_worse() -> None:
    votes = [merge.Vote("a", "gro", "on", 1, 10.0), merge.Vote("b", "gro", "on", -1, -20.0),
             merge.Vote("a", "jumbo", "on", 1, 6.0), merge.Vote("b", "jumbo", "on", 0, -1.5),
             merge.Vote("a", "lro", "on", 0, 1.0), merge.Vote("b", "lro", "on", 0, 1.0)]
    merged = merge.merge(votes, {"a": 1, "b": 1})
    assert merged.changes == {"jumbo": "on"}
    assert merged.why[("gro", "on")] == "worse beyond the threshold on b: left out"
    assert merged.why[("lro", "on")].startswith("no workload measured it better")
    assert merge.merge(votes, {"a": 9, "b": 1}).changes == {"jumbo": "on"}  # still left out
    assert merge.merge(votes, {"a": 1, "b": 0}).changes == {"gro": "on", "jumbo": "on"}
    # b weighs 5: jumbo's weighted mean (6 - 5 x 1.5) / 6 is below 0
    assert merge.merge(votes, {"a": 1, "b": 5}).changes == {}
    # the one that looked worst on the workload made worse goes first
    assert merge.drop({"gro": "on", "jumbo": "on"}, ["b"], votes) == "gro"


def test_a_round_the_budget_cannot_hold_confirms_nothing_and_says_what_is_kept() -> None:
    out = confirm.settle({"gro": "on"}, [], lambda changes, n: "0.1 min of the budget were left")
    assert out["confirmed"] == {} and not out["is_confirmed"]
    assert out["status"] == ("not confirmed: 0.1 min of the budget were left; kept: the current "
                             "configuration")


@pytest.mark.parametrize("text, message", [
    ("c=1", "--weights: 'c' is not a workload of this run (workloads: a, b)"),
    ("a=x", "--weights: a='x' is not a weight (a number at least 0)"),
    ("a=-1", "--weights: a='-1' is not a weight (a number at least 0)"),
    ("a=0,b=0", "--weights: every weight is 0: at least one workload must count")])
def test_weights_that_are_not_weights_are_one_sentence(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as got:
        merge.parse_weights(text, list(WORKLOADS))
    assert str(got.value) == message
    assert merge.parse_weights("b=2.5", list(WORKLOADS)) == {"a": 1.0, "b": 2.5}


def test_the_advice_says_what_was_dropped_and_what_is_kept() -> None:
    from analysis import advise_confirm

    truth = {"a": {"gro": 0.10, "jumbo": 0.10}, "b": {"gro": -0.20, "jumbo": 0.10}}
    seed = next(s for s in range(50) if "gro" in confirmed(s, truth, {"a": 1.0, "b": 1.0},
                                                          ("b", "gro"))["merged"])
    votes = knob_votes(seed, truth, ("b", "gro"))
    merged = merge.merge(votes, {"a": 1.0, "b": 1.0})
    conf = {"weights": {"a": 1.0, "b": 1.0}, "merged": merged.changes,
            "votes": [vars(v) for v in votes],
            "scores": [{"knob": k, "state": s, "score": v, "why": merged.why[(k, s)]}
                       for (k, s), v in merged.scores.items()],
            **confirm.settle(merged.changes, votes, confirmation(seed, truth))}
    rows = advise_confirm.rows({"confirmation": conf})
    final = [(r["knob"], r["recommendation"]) for r in rows if r["row"] == "configuration"]
    assert final == [("jumbo", "confirmed"), ("gro", "dropped")]
    dropped = next(r for r in rows if r["recommendation"] == "dropped")
    assert dropped["reason"].startswith("round 1: b: TPS -")
    rounds = [r for r in rows if r["row"] == "confirmation"]
    assert [(r["workload"], r["knob"]) for r in rounds] == [
        ("a", "configuration (round 1)"), ("b", "configuration (round 1)"),
        ("a", "configuration (round 2)"), ("b", "configuration (round 2)")]
    assert rounds[1]["recommendation"] == "worse beyond the threshold"
    assert float(rounds[1]["throughput_high_pct"]) < -2
    gro = next(r for r in rows if r["row"] == "merged" and r["knob"] == "gro")
    assert gro["recommendation"] == "merged" and "a +1 (x1)" in gro["reason"]
    # nothing confirmed: the current configuration is kept, and said so
    kept = advise_confirm.rows({"confirmation": {
        "merged": {"gro": "on"}, **confirm.settle({"gro": "on"}, [], lambda c, n: "no time")}})
    assert [(r["knob"], r["recommendation"], r["reason"]) for r in kept
            if r["row"] == "configuration"] == [
        ("(none)", "current configuration kept",
         "not confirmed: no time; kept: the current configuration")]
