"""The report section of a web experiment: its family file (by name) with the factors in the
experiment file's order, and the application and database tiers' columns where a family of
static requests runs dynamic ones."""

from __future__ import annotations

from typing import Any

from tierbench.kinds import families
from tierbench.tiers import disks


def report_spec(resolved: dict[str, Any]) -> dict[str, Any]:
    """The report section of a web experiment: its family's figures, tables and the paper's
    numbers, with the factors in the experiment file's order."""
    spec = families.load(families.by_name("web", str(resolved.get("name", "")), "dc-single"))
    def listed(value: Any) -> list[Any]:  # older resolved experiments hold single values
        return list(value) if isinstance(value, list) else [value]

    if any(isinstance(t, dict) and t.get("dynamic") for t in resolved.get("traces") or []):
        # dynamic requests in a family of static ones: the application and database tiers'
        # columns may be empty where they do not apply, and the write check is a check
        spec["optional"] = list(dict.fromkeys([*spec.get("optional", []), *APP_DB_OPTIONAL]))
        spec["checks"] = list(dict.fromkeys([*spec.get("checks", []), "write_check"]))
    # counted only where a cache or the storage's reads are (webmetrics.miss_figures)
    spec["optional"] = list(dict.fromkeys([*spec.get("optional", []), *MISS_OPTIONAL]))
    order = {"trace": [t["name"] if isinstance(t, dict) else t
                       for t in resolved.get("traces") or []],
             "users": listed((resolved.get("load") or {}).get("users")),
             "docroot": listed((resolved.get("stack") or {}).get("docroot")),
             "placement": listed((resolved.get("stack") or {}).get("placement"))}
    # the family's own order (e.g. static content before dynamic) for what the file does not list
    spec["order"] = {**spec.get("order", {}), **{k: v for k, v in order.items() if len(v) > 1}}
    if resolved.get("disk_systems") or any("raid" in str(x)
                                           for x in order["docroot"] + order["placement"]):
        spec = disks.with_stripe_check(spec)  # a RAID-0 docroot: its stripe is checked
    rates = (resolved.get("load") or {}).get("rate")
    fractions = (resolved.get("load") or {}).get("rate_of_max")
    if isinstance(fractions, list) and len(fractions) > 1:
        # rates as fractions of each mode's own maximum: the modes meet at equal fractions,
        # never at equal target_rate (each mode's differs)
        spec["factors"] = [f for f in spec["factors"] if f != "target_rate"] + ["rate_of_max"]
    elif isinstance(rates, list) and len(rates) > 1 and "target_rate" not in spec["factors"]:
        # a load curve in any family: its conditions (comparisons, precision) are per rate
        spec["factors"] = [*spec["factors"], "target_rate"]
    return spec


# The application and database tiers' columns, optional where a point does not have them: the
# write check on traces without writes, the query of a static trace, the database's counters
# of a point during which it was down.
APP_DB_OPTIONAL = ["query", "writes_ok", "rows_written", "write_check", "db_tps", "db_rows_read",
                   "db_rows_written", "db_blocks_read", "db_rows_read_per_dyn",
                   "db_statements_per_dyn"]

# The cache-miss share and its flag: left out where neither a proxy cache nor the storage's
# reads were counted.
MISS_OPTIONAL = ["cache_miss_share", "cold_cache"]
