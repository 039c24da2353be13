"""The report spec: validation messages name the bad key in one sentence, defaults, the generic
spec, and every family file in tierbench/kinds/families/ is valid and says where its numbers come
from."""

from __future__ import annotations

import copy
import json

import pytest

from analysis import spec
from tierbench.kinds import families, registry

MINIMAL = {"kind": "web", "family": "dc-single", "title": "TPS per trace",
           "primary": {"column": "tps"}, "columns": [], "costs": [], "benefit": []}


def with_(**changes: object) -> dict:
    out = copy.deepcopy(MINIMAL)
    out.update(changes)
    return out


@pytest.mark.parametrize("name", families.names())
def test_family_files_are_valid_specs(name: str) -> None:
    raw = families.load(name)
    checked = spec.validate(raw)
    assert checked["family"] == raw["family"] and checked["figures"]
    assert json.loads(json.dumps(checked)) == checked  # JSON-able
    # the opening comment names the family and the paper's figure its numbers come from
    text = (families.FOLDER / f"{name}.yml").read_text(encoding="utf-8")
    lines = text.splitlines()
    opening = " ".join(line[2:] for line in lines[:lines.index("")])
    assert all(line.startswith("# ") for line in lines[:lines.index("")])
    assert opening.startswith(f"Report family {raw['family']} of the {raw['kind']} kind")
    if "reference" in raw:  # a paper's numbers: its figure and hardware named (a new kind's may
        # cite none)
        assert raw["reference"]["figure"] in opening and "hardware" in opening


def test_every_family_is_covered_and_paper_numbers_are_labelled() -> None:
    """Every kind the registry finds has a family and every family's kind is one of them; a
    family file's name starts with its family (pfs-basic, pfs-concurrent, pfs-streams: pfs)."""
    kinds = {n: families.load(n)["kind"] for n in families.names()}
    assert set(kinds.values()) == set(registry.kinds())
    assert all(n.startswith(families.load(n)["family"]) for n in kinds)
    numbers = {"dc-single": 9754, "dc-zipf": 2212, "dc-clients": 14996,
               "pfs-concurrent": 731, "pfs-basic": 775, "net-conns": 11792,
               "dc-disk-basic": 147,
               "fs-filebench": 24555}
    for name, value in numbers.items():
        ref = families.load(name)["reference"]
        assert value in [r["with"] for r in ref["rows"]], name


def test_defaults_are_filled_in() -> None:
    out = spec.validate(MINIMAL)
    assert out["phases"] is None and out["factors"] == [] and out["order"] == {}
    assert out["primary"] == {"column": "tps", "label": "TPS", "unit": "requests/s"}
    assert out["columns"] == out["costs"] == out["benefit"] == []
    for key in ("primary", "columns", "costs", "benefit"):  # the kind's own: no default columns
        bare = {k: v for k, v in MINIMAL.items() if k != key}
        with pytest.raises(spec.SpecError, match=f"^report spec: {key} is required$"):
            spec.validate(bare)
    assert out["baseline"] is None and out["figures"] == [] and out["reference"] is None
    assert out["samples"] is True and out["sections"] == []
    pfs = spec.validate(with_(phases=["read", "write"], factors=["io_servers", "clients"]))
    assert pfs["sections"] == ["phase", "io_servers"] and pfs["samples"] is False
    panel = spec.validate(with_(figures=[{"type": "bars", "x": "trace", "y": "tps"}]))
    assert panel["figures"][0]["series"] == ["mode"] and panel["figures"][0]["scale"] == 1.0


@pytest.mark.parametrize(("changes", "message"), [
    ({"famly": "x"}, "report spec: 'famly' is not a report spec key"),
    ({"kind": ""}, "report spec: kind must be non-empty text"),
    ({"title": 3}, "report spec: title must be non-empty text"),
    ({"phases": "read"}, "report spec: phases must be a list of column names"),
    ({"phases": ["Read"]}, "report spec: phases must be lower-case words"),
    ({"factors": "trace"}, "report spec: factors must be a list of column names"),
    ({"order": {"trace": "single-4k"}}, "report spec: order.trace must be a list of values"),
    ({"primary": "tps"}, "report spec: primary must be a mapping with column, label and unit"),
    ({"primary": {"column": "tps", "units": "x"}}, "report spec: primary has unknown key 'units'"),
    ({"costs": [{"label": "x"}]}, "report spec: costs[0].column is required"),
    ({"costs": [3]}, "report spec: costs[0] must be a column name or a mapping"),
    ({"benefit": [{"column": "c", "where": ["phase"]}]},
     "report spec: benefit[0].where must be a mapping {column: value or [values]}"),
    ({"baseline": ["off"]}, "report spec: baseline must be a mode name or null"),
    ({"figures": {"type": "bars"}}, "report spec: figures must be a list of panels"),
    ({"figures": [{"type": "pie"}]},
     "report spec: figures[0].type must be one of bars, lines, table, got 'pie'"),
    ({"figures": [{"type": "bars", "x": "trace"}]}, "report spec: figures[0].y is required"),
    ({"figures": [{"type": "bars", "x": "trace", "y": ""}]},
     "report spec: figures[0].y must name a column"),
    ({"figures": [3]}, "report spec: figures[0] must be a mapping with a 'type' key"),
    ({"figures": [{"x": "trace", "y": "tps"}]},
     "report spec: figures[0].type is required (one of bars, lines, table)"),
    ({"figures": [{"type": "lines", "x": "users", "y": "tps", "colour": "red"}]},
     "report spec: figures[0] has unknown key 'colour'"),
    ({"figures": [{"type": "lines", "x": "u", "y": "t", "logx": "yes"}]},
     "report spec: figures[0].logx must be true, false or \"auto\""),
    ({"figures": [{"type": "table", "rows": "connections", "columns": "write_size"}]},
     "report spec: figures[0].values is required"),
    ({"figures": [{"type": "table", "rows": "c", "columns": "w", "values": []}]},
     "report spec: figures[0].values must list the columns shown in each cell"),
    ({"figures": [{"type": "table", "rows": "c", "columns": "w", "values": ["tps"], "x": "c"}]},
     "report spec: figures[0] has unknown key 'x'"),
    ({"figures": [{"type": "bars", "x": "t", "y": "tps", "series": []}]},
     "report spec: figures[0].series must name at least one column"),
    ({"reference": {"labels": ["a", "b"]}}, "report spec: reference.figure is required"),
    ({"reference": {"figure": " "}}, "report spec: reference.figure must name the paper"),
    ({"reference": {"figure": "F", "labels": ["a"]}},
     "report spec: reference.labels must be two texts: [with, without]"),
    ({"reference": {"figure": "F", "rows": [{"x": "4K", "quantity": "TPS", "with": "9754"}]}},
     "report spec: reference.rows[0].with must be a number or null, got '9754'"),
    ({"reference": {"figure": "F", "rows": [{"x": "4K", "quantity": "TPS", "measure": "x"}]}},
     "report spec: reference.rows[0].measure must be one of change, benefit"),
    ({"reference": {"figure": "F", "rows": [{"x": "4K", "quantity": "TPS", "sides": {}}]}},
     "report spec: reference.rows[0].sides.column is required"),
    ({"reference": {"figure": "F", "rows": [{"x": "4K", "quantity": "TPS", "sides": "mode"}]}},
     "report spec: reference.rows[0].sides must be {column, with, without}"),
    ({"reference": {"figure": "F", "rows": [{"x": "4K", "quantity": "TPS",
                                             "match": {"phase": {"a": 1}}}]}},
     "report spec: reference.rows[0].match.phase must be a value or a list of values"),
    ({"samples": "yes"}, "report spec: samples must be true or false"),
])
def test_bad_specs_are_refused_naming_the_key(changes: dict, message: str) -> None:
    with pytest.raises(spec.SpecError) as err:
        spec.validate(with_(**changes))
    text = str(err.value)
    assert text.startswith(message), text
    assert text.count(". ") == 0 and "\n" not in text  # one sentence


def test_not_a_mapping() -> None:
    with pytest.raises(spec.SpecError, match="must be a mapping"):
        spec.validate(["kind", "web"])


def test_generic_spec_from_columns() -> None:
    web = spec.generic(["point", "trace", "mode", "repetition", "users", "tps", "mb_per_s"],
                       {"name": "mine"}, varying=["users", "trace", "point"])
    assert web["kind"] == "web" and web["family"] == "generic"
    assert web["factors"] == ["trace", "users"] and web["primary"]["column"] == "tps"
    assert web["figures"][0]["x"] == "users" and web["figures"][0]["facet"] == "trace"
    assert [c["column"] for c in web["columns"]] == ["mb_per_s"]
    assert web["costs"] == web["benefit"] == []
    # the tables, costs and benefit from the summary's own columns, not a kind's defaults
    cpu = spec.generic(["point", "mode", "repetition", "tps", "p99_ms", "host_cpu_us_per_kb",
                        "server_cpu_us_per_kb", "cpu_s_web"])
    assert [c["column"] for c in cpu["columns"]] == ["p99_ms", "server_cpu_us_per_kb",
                                                      "host_cpu_us_per_kb"]
    assert [c["column"] for c in cpu["costs"]] == ["host_cpu_us_per_kb", "server_cpu_us_per_kb"]
    assert [b["column"] for b in cpu["benefit"]] == ["server_cpu_us_per_kb"]
    pfs = spec.generic(["point", "mode", "io_servers", "clients", "read_mb_per_s",
                        "write_mb_per_s", "read_client_cpu_us_per_kb", "integrity"],
                       varying=["clients"])
    assert pfs["kind"] == "pfs" and pfs["phases"] == ["read", "write"]
    assert pfs["primary"]["column"] == "mb_per_s" and pfs["factors"] == ["clients"]
    assert pfs["checks"] == ["integrity"] and pfs["figures"][0]["facet"] == "phase"
    assert [b["column"] for b in pfs["benefit"]] == ["client_cpu_us_per_kb"]


def test_optional_columns() -> None:
    s = spec.validate(with_(optional=["my_*"]))
    for col in ("client_bound_advice", "target_rate", "tps_foreground", "records_requests",
                "count_mismatch", "my_extra"):
        assert spec.is_optional(col, s), col
    for col in ("tps", "p99_ms", "cpu_s_web", "host_unattributed_cpu_s"):
        assert not spec.is_optional(col, s), col
