"""The DAG as the viewer draws it: tasks in columns by level, edges as curves, the critical
path marked. Each node names its task and what it runs (a map task with its count, and how
its elements ended, as ``dagagent graph`` says it), with the time it took, or has been
running. Nodes are as wide as their longest label needs, up to :data:`MAX_NODE_W`; a longer
label is shortened and the text is clipped to its box. Coordinates are in SVG user units.

A DAG of more than :data:`MAX_DAG_NODES` tasks (or with a level wider than
:data:`MAX_LEVEL_NODES`) is drawn collapsed: one box per level with its tasks counted by
status, linking to the task table filtered to that level. A DAG deeper than
:data:`MAX_LEVEL_BOXES` levels is collapsed by depth too: each box then holds a band of
consecutive levels, so that the drawing never has more than :data:`MAX_LEVEL_BOXES` boxes,
however deep or wide the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from ..graph import PlanGraph
from ..results import TaskResult
from ..store import RunRecord
from ..text import shorten
from ._labels import fmt_s, short_label, status_counts_of, task_kind, task_what

__all__ = [
    "MAX_DAG_NODES",
    "MAX_LEVEL_BOXES",
    "MAX_LEVEL_NODES",
    "DagView",
    "Edge",
    "LevelBox",
    "Node",
    "layout_dag",
    "levels_name",
    "map_count",
]

MAX_DAG_NODES = 300
MAX_LEVEL_NODES = 60
#: A collapsed DAG draws at most this many boxes; a deeper one puts consecutive levels together.
MAX_LEVEL_BOXES = 50
#: The narrowest a status gets in a box's bar (px): one failed task among thousands shows.
MIN_SEGMENT_W = 3.0

NODE_W = 168.0
#: The widest a node grows for a long tool name; longer ones are shortened (the node's
#: tooltip has them whole).
MAX_NODE_W = 300.0
NODE_H = 40.0
COL_GAP = 64.0
ROW_GAP = 14.0
PAD = 16.0
TEXT_X = 14.0  # where a node's text starts
#: Generous widths of a character of the node's two lines (12.5 px bold, 11 px), so that an
#: estimate never falls short: the text is also clipped to its box.
_ID_CHAR_W = 7.8
_WHAT_CHAR_W = 6.8


@dataclass
class Node:
    id: str
    label: str
    what: str
    kind: str
    status: str
    level: int
    x: float
    y: float
    critical: bool
    duration_s: float | None
    running: bool = False
    title: str = ""


@dataclass
class Edge:
    src: str
    dst: str
    d: str
    critical: bool


@dataclass
class LevelBox:
    """A box of a collapsed DAG: the tasks of levels ``level`` to ``last`` (one level when
    they are the same), counted by status."""

    level: int
    x: float
    y: float
    h: float
    n: int
    counts: list[tuple[str, int]]
    segments: list[tuple[str, float, float]]  # status, x offset, width of the status bar
    last: int = -1

    def __post_init__(self) -> None:
        if self.last < self.level:
            self.last = self.level

    @property
    def span(self) -> str:
        """The levels it holds, as the query ``?level=`` takes them: ``3`` or ``0-1999``."""
        return str(self.level) if self.last == self.level else f"{self.level}-{self.last}"

    @property
    def name(self) -> str:
        """The levels it holds, for people: ``level 3`` or ``levels 0–1,999``."""
        return levels_name(self.level, self.last)


def levels_name(first: int, last: int) -> str:
    """Levels ``first`` to ``last`` for people: ``level 3`` or ``levels 0–1,999``."""
    return f"level {first:,}" if first == last else f"levels {first:,}–{last:,}"


@dataclass
class DagView:
    width: float
    height: float
    collapsed: bool
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    levels: list[LevelBox] = field(default_factory=list)
    level_edges: list[str] = field(default_factory=list)
    node_w: float = NODE_W
    node_h: float = NODE_H
    #: How many levels a box of a collapsed DAG holds (more than one: collapsed by depth).
    band: int = 1


def map_count(n: int, statuses: Sequence[str]) -> str:
    """A map task's count as ``dagagent graph`` shows it: ``×4``, and how its elements ended
    when they did not all end alike: ``×4 (3 succeeded, 1 failed)``."""
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    told = ", ".join(f"{k} {s}" for s, k in counts.items()) if len(counts) > 1 else ""
    return f"×{n}" + (f" ({told})" if told else "")


def _what_line(task: object, r: TaskResult | None) -> tuple[str, str]:
    """What a node's second line says: the tool (or agent), and a map task's count."""
    what = task_what(task)
    for_each = getattr(task, "for_each", None)
    if for_each is None:
        return what, ""
    if r is not None and r.elements is not None:
        return what, map_count(len(r.elements), [e.status.value for e in r.elements])
    return what, f"×{for_each}" if isinstance(for_each, str) else f"×{len(for_each)}"


def _time_label(seconds: float | None, running: bool) -> str:
    if seconds is None:
        return ""
    return f"{fmt_s(seconds)}…" if running else fmt_s(seconds)


def layout_dag(
    graph: PlanGraph,
    status_of: Mapping[str, str],
    record: RunRecord,
    critical: Iterable[str],
    *,
    now: float | None = None,
) -> DagView:
    """The DAG of ``graph`` laid out by level (collapsed when it is too big to draw); ``now``
    gives a running task its time so far."""
    levels = graph.levels
    widest = max((len(lv) for lv in levels), default=0)
    crit = set(critical)
    if len(graph) > MAX_DAG_NODES or widest > MAX_LEVEL_NODES:
        return _collapsed_dag(levels, status_of)
    lines: dict[str, tuple[str, str, str, float | None, bool]] = {}
    need = NODE_W
    for tid in graph.order:
        r = record.tasks.get(tid)
        running = status_of[tid] == "running"
        took = r.duration_s if r is not None else None
        if running and r is not None and r.started_at is not None and now is not None:
            took = max(0.0, now - r.started_at)
        what, count = _what_line(graph.tasks[tid], r)
        when = _time_label(took, running)
        agent = "✦ " if task_kind(graph.tasks[tid]) == "agent" else ""
        line2 = f"{agent}{what}{' ' + count if count else ''}"
        id_w = TEXT_X + len(tid) * _ID_CHAR_W + (len(when) + 2) * _WHAT_CHAR_W + 8
        need = max(need, id_w, TEXT_X + len(line2) * _WHAT_CHAR_W + 10)
        lines[tid] = (what, count, when, took, running)
    node_w = min(MAX_NODE_W, need)
    tall = widest * (NODE_H + ROW_GAP) - ROW_GAP
    height = max(tall, 0.0) + 2 * PAD
    width = len(levels) * (node_w + COL_GAP) - COL_GAP + 2 * PAD
    pos: dict[str, tuple[float, float]] = {}
    nodes: list[Node] = []
    for li, level in enumerate(levels):
        x = PAD + li * (node_w + COL_GAP)
        own = len(level) * (NODE_H + ROW_GAP) - ROW_GAP
        y0 = PAD + (tall - own) / 2
        for i, tid in enumerate(level):
            y = y0 + i * (NODE_H + ROW_GAP)
            pos[tid] = (x, y)
            task = graph.tasks[tid]
            what, count, when, took, running = lines[tid]
            room = int((node_w - TEXT_X - 10) / _WHAT_CHAR_W)
            mark = 2 if task_kind(task) == "agent" else 0  # "✦ "
            # The count says the most: the tool's name gives way first.
            keep = max(6, room - mark - (len(count) + 1 if count else 0))
            shown = short_label(what, keep) + (f" {count}" if count else "")
            id_room = int((node_w - TEXT_X - 8 - (len(when) + 2) * _WHAT_CHAR_W) / _ID_CHAR_W)
            nodes.append(
                Node(
                    id=tid,
                    label=short_label(tid, max(6, id_room)),
                    what=short_label(shown, max(6, room - mark)),
                    kind=task_kind(task),
                    status=status_of[tid],
                    level=li,
                    x=x,
                    y=y,
                    critical=tid in crit,
                    duration_s=took,
                    running=running,
                    title=" · ".join(
                        p
                        for p in (
                            tid,
                            f"{what} {count}".strip(),
                            status_of[tid],
                            when,
                            f"when {shorten(task.when, 80)}" if task.when else "",
                        )
                        if p
                    ),
                )
            )
    edges: list[Edge] = []
    crit_pairs = set(pairwise(critical))
    for tid in graph.order:
        x2, y2 = pos[tid]
        for dep in graph.dependencies[tid]:
            x1, y1 = pos[dep]
            sx, sy = x1 + node_w, y1 + NODE_H / 2
            ex, ey = x2, y2 + NODE_H / 2
            mid = (sx + ex) / 2
            d = f"M{sx:.1f},{sy:.1f} C{mid:.1f},{sy:.1f} {mid:.1f},{ey:.1f} {ex - 2:.1f},{ey:.1f}"
            edges.append(Edge(dep, tid, d, (dep, tid) in crit_pairs))
    return DagView(
        width=max(width, 240.0),
        height=height,
        collapsed=False,
        nodes=nodes,
        edges=edges,
        node_w=node_w,
    )


def _segments(
    counts: list[tuple[str, int]], n: int, inner: float
) -> list[tuple[str, float, float]]:
    """A status bar ``inner`` wide: each status in proportion to its tasks, none narrower
    than :data:`MIN_SEGMENT_W` (the widest gives up the room)."""
    widths = [max(MIN_SEGMENT_W, inner * k / n) for _, k in counts]
    excess = sum(widths) - inner
    if excess > 0 and widths:
        widest = max(range(len(widths)), key=widths.__getitem__)
        widths[widest] = max(MIN_SEGMENT_W, widths[widest] - excess)
    segs: list[tuple[str, float, float]] = []
    off = 0.0
    for (s, _), w in zip(counts, widths, strict=True):
        segs.append((s, off, w))
        off += w
    return segs


def _collapsed_dag(levels: list[list[str]], status_of: Mapping[str, str]) -> DagView:
    box_h = 64.0
    gap = 18.0
    boxes: list[LevelBox] = []
    per_row = 5
    band = max(1, -(-len(levels) // MAX_LEVEL_BOXES))
    # As wide as the longest name needs ("levels 98,000–99,999"), and no narrower than a node.
    longest = levels_name(max(0, len(levels) - band), len(levels) - 1)
    box_w = max(NODE_W, 12 + len(longest) * _ID_CHAR_W + 10)
    for bi, lo in enumerate(range(0, len(levels), band)):
        hi = min(len(levels), lo + band) - 1
        row, col = divmod(bi, per_row)
        x = PAD + col * (box_w + COL_GAP)
        y = PAD + row * (box_h + gap + 14)
        tally: dict[str, int] = {}
        n = 0
        for level in levels[lo : hi + 1]:
            n += len(level)
            for t in level:
                s = status_of[t]
                tally[s] = tally.get(s, 0) + 1
        counts = status_counts_of(tally)
        segs = _segments(counts, n, box_w - 16)
        boxes.append(LevelBox(lo, x, y, box_h, n, counts, segs, last=hi))
    arrows = []
    for a, b in pairwise(boxes):
        if a.y == b.y:
            sy = a.y + box_h / 2
            arrows.append(f"M{a.x + box_w:.1f},{sy:.1f} L{b.x - 2:.1f},{sy:.1f}")
    rows = (len(boxes) + per_row - 1) // per_row
    width = min(len(boxes), per_row) * (box_w + COL_GAP) - COL_GAP + 2 * PAD
    height = rows * (box_h + gap + 14) - gap + 2 * PAD
    return DagView(
        width=max(width, 240.0),
        height=height,
        collapsed=True,
        levels=boxes,
        level_edges=arrows,
        node_w=box_w,
        node_h=box_h,
        band=band,
    )
