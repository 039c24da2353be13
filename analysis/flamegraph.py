"""A flame graph per profiled point (issue 43): a point's folded stacks (points/<id>/
perf-folded.txt, written by `tierbench run --profile categories`: one line per distinct call
chain, root first, and its sample count) drawn as plotly's icicle chart, root at the bottom,
into points/<id>/flamegraph.html: click a frame to zoom into it, hover for its samples and share.
plotly.js is written once per run (RUN/plotly.min.js) and each page loads it from there, so the
pages work offline and a run of many points does not hold many copies of it.

Frames under MIN_SHARE of the point's samples are folded into their parent (a page stays small:
a point has thousands of distinct chains, most of a sample or two)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

FOLDED, PAGE, PLOTLY_JS = "perf-folded.txt", "flamegraph.html", "plotly.min.js"
MIN_SHARE = 0.001  # of the point's busy samples


def read_folded_text(text: str) -> Counter[tuple[str, ...]]:
    """Folded stacks (``a;b;c 12`` per line) as chain -> samples; lines that do not parse are
    passed over."""
    out: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        chain, _, count = line.rpartition(" ")
        if chain and count.isdigit():
            out[tuple(chain.split(";"))] += int(count)
    return out


def frames(stacks: Counter[tuple[str, ...]], min_share: float = MIN_SHARE
           ) -> tuple[list[str], list[str], list[str], list[int]]:
    """The icicle's nodes: ids (a number per distinct chain up to the frame, callers before
    callees), labels (the frame), parents (their caller's id, '' for a process) and values
    (samples in the frame and everything it called); frames under ``min_share`` of all samples
    left out (their samples stay in their parent's value)."""
    total = sum(stacks.values())
    value: Counter[tuple[str, ...]] = Counter()
    for chain, n in stacks.items():
        for depth in range(1, len(chain) + 1):
            value[chain[:depth]] += n
    keep = [k for k, v in value.items() if v >= min_share * total]
    keep.sort(key=lambda k: (len(k), -value[k]))
    number = {k: str(i) for i, k in enumerate(keep)}
    ids = [number[k] for k in keep]
    parents = [number.get(k[:-1], "") for k in keep]
    return ids, [k[-1] for k in keep], parents, [value[k] for k in keep]


def write_page(point_dir: Path, title: str, js_src: str) -> Path | None:
    """points/<id>/flamegraph.html from its perf-folded.txt (None without samples); plotly.js
    loaded from ``js_src`` (a path relative to the page)."""
    import plotly.graph_objects as go  # imported only for runs that have a profile

    stacks = read_folded_text((point_dir / FOLDED).read_text(encoding="utf-8",
                                                             errors="replace"))
    if not stacks:
        return None
    ids, labels, parents, values = frames(stacks)
    fig = go.Figure(go.Icicle(
        ids=ids, labels=labels, parents=parents, values=values, branchvalues="total",
        tiling={"orientation": "v", "flip": "y"}, maxdepth=40, root={"color": "lightgrey"},
        hovertemplate="%{label}<br>%{value} samples, %{percentRoot:.1%} of the point<br>"
                      "%{percentParent:.1%} of its caller<extra></extra>"))
    fig.update_layout(title=f"{title}: {sum(stacks.values()):,} busy samples (perf, every CPU; "
                            "root at the bottom, callers below callees; click a frame to zoom)",
                      margin={"t": 60, "l": 10, "r": 10, "b": 10}, height=900)
    out = point_dir / PAGE
    fig.write_html(out, include_plotlyjs=js_src, full_html=True)
    return out


def write_all(run_dir: Path, titles: dict[str, str]) -> dict[str, str]:
    """A flame graph for every point of the run with folded stacks (rewritten only when the
    stacks are newer than the page), plotly.js once beside them: point id -> the page's path
    relative to the run folder."""
    pages: dict[str, str] = {}
    points = run_dir / "points"
    found = sorted(points.glob(f"*/{FOLDED}")) if points.is_dir() else []
    if not found:
        return pages
    js = run_dir / PLOTLY_JS
    if not js.exists():
        from plotly.offline import get_plotlyjs

        js.write_text(get_plotlyjs(), encoding="utf-8")
    for folded in found:
        pdir = folded.parent
        page = pdir / PAGE
        if not page.exists() or page.stat().st_mtime < folded.stat().st_mtime:
            title = titles.get(pdir.name, pdir.name)
            if write_page(pdir, title, "../../" + PLOTLY_JS) is None:
                continue
        pages[pdir.name] = f"points/{pdir.name}/{PAGE}"
    return pages
