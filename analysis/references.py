"""The seed papers' own numbers (2004-2008 hardware), from ../shared/EXPERIMENTS.md, per family."""

from __future__ import annotations

from dataclasses import dataclass, field

HARDWARE = "2004-2008 hardware"


@dataclass(frozen=True)
class RefRow:
    """One reference comparison: a quantity with and without the offload, at one x value."""

    x: str  # the point of the figure it belongs to (trace size, alpha, threads, clients, ...)
    quantity: str
    unit: str
    with_offload: float | None
    without_offload: float | None
    match: dict[str, float] = field(default_factory=dict)  # tidy columns that locate it here

    @property
    def change_pct(self) -> float | None:
        """Change of the with-offload value over the without-offload value, in %."""
        if self.with_offload is None or not self.without_offload:
            return None
        return 100.0 * (self.with_offload / self.without_offload - 1.0)


@dataclass(frozen=True)
class Reference:
    """A seed figure and the numbers the paper reports for it."""

    family: str
    figure: str
    labels: tuple[str, str]  # what "with" and "without" were in the paper
    rows: tuple[RefRow, ...]
    note: str = ""


REFERENCES: dict[str, Reference] = {
    "dc-single": Reference(
        "dc-single", "000 §5.2.1 Fig. 8a", ("with I/OAT", "without I/OAT"),
        (RefRow("4K trace", "TPS", "requests/s", 9754, 8569, {"size_bytes": 4096}),),
        "other single-file traces (2K-10K): 5-8 % more TPS with I/OAT",
    ),
    "dc-zipf": Reference(
        "dc-zipf", "000 §5.2.2 Fig. 8b", ("with I/OAT", "without I/OAT"),
        (RefRow("Zipf traces", "TPS", "requests/s", 2212, 1989),),
        "alpha 0.95, 0.9, 0.75, 0.5; the paper quotes one pair for the Zipf traces",
    ),
    "dc-clients": Reference(
        "dc-clients", "000 §5.2.3 Fig. 9", ("with I/OAT", "without I/OAT"),
        (RefRow("256 threads", "TPS", "requests/s", 14996, 12928, {"users": 256}),),
        "16K file; client CPU saturates at 64 threads without I/OAT vs 256 with it",
    ),
    "dc-classes": Reference(
        "dc-classes", "004 §4.3 Table 2, Fig. 6", ("PVFS", "local fs"), (),
        "qualitative: PVFS loses on small working sets (no client cache, costly open/close) "
        "and wins on class 4 (1K-64M files, 6 GB working set)",
    ),
    "dc-hybrid": Reference(
        "dc-hybrid", "004 §4.4 Fig. 7", ("small files on ramfs", "on ext3 / on PVFS"), (),
        "qualitative: the foreground site gains up to 40 % with its files below 1 MB on ramfs "
        "instead of ext3, and up to 4.5x instead of PVFS; more as the background working set "
        "grows, less as the foreground's grows",
    ),
    "pfs": Reference(
        "pfs", "000 §6.2.1 Fig. 10-11", ("with I/OAT", "without I/OAT"),
        (
            RefRow("1 client, reads", "aggregate", "MB/s", 360, 361, {"users": 1, "size_bytes": 65536}),
            RefRow("6 clients, reads", "aggregate", "MB/s", 731, 649, {"users": 6}),
            RefRow("1 client, writes", "aggregate", "MB/s", 460, 464),
            RefRow("6 clients, writes", "aggregate", "MB/s", 750, 697),
        ),
        "reads +12 %, writes +8 % at 6 clients (N = 5, 6 I/O servers on tmpfs)",
    ),
    "net-conns": Reference(
        "net-conns", "001 (TCP transmit, 64K writes)", ("10GbE with TSO", "—"),
        (
            RefRow("1 connection", "throughput", "Mb/s", 928, None, {"users": 1, "size_bytes": 65536}),
            RefRow("1 connection", "cycles per KB", "cycles/KB", 11792, None, {"users": 1, "size_bytes": 65536}),
            RefRow("100 connections", "throughput", "Mb/s", 9240, None, {"users": 100, "size_bytes": 65536}),
            RefRow("100 connections", "cycles per KB", "cycles/KB", 3161, None, {"users": 100, "size_bytes": 65536}),
            RefRow("6000 connections", "throughput", "Mb/s", 6370, None, {"users": 6000, "size_bytes": 65536}),
            RefRow("6000 connections", "cycles per KB", "cycles/KB", 17053, None,
                   {"users": 6000, "size_bytes": 65536}),
        ),
        "one mode only in the paper: its numbers are absolute, not a with/without pair",
    ),
}


def reference(family: str) -> Reference | None:
    """The seed figure's reference numbers for an experiment family (None when it has none)."""
    return REFERENCES.get(family)
