"""The DAG as the viewer draws it: tasks in columns by level, edges as curves, the critical
path marked. Coordinates are in SVG user units.

A DAG of more than :data:`MAX_DAG_NODES` tasks (or with a level wider than
:data:`MAX_LEVEL_NODES`) is drawn collapsed: one box per level with its tasks counted by
status, linking to the task table filtered to that level.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

from ..graph import PlanGraph
from ..store import RunRecord
from ._labels import short_label, status_counts, task_kind, task_what

__all__ = ["MAX_DAG_NODES", "MAX_LEVEL_NODES", "DagView", "Edge", "LevelBox", "Node", "layout_dag"]

MAX_DAG_NODES = 300
MAX_LEVEL_NODES = 60

NODE_W = 168.0
NODE_H = 40.0
COL_GAP = 64.0
ROW_GAP = 14.0
PAD = 16.0


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


@dataclass
class Edge:
    src: str
    dst: str
    d: str
    critical: bool


@dataclass
class LevelBox:
    level: int
    x: float
    y: float
    h: float
    n: int
    counts: list[tuple[str, int]]
    segments: list[tuple[str, float, float]]  # status, x offset, width of the status bar


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


def layout_dag(
    graph: PlanGraph, status_of: Mapping[str, str], record: RunRecord, critical: Iterable[str]
) -> DagView:
    """The DAG of ``graph`` laid out by level (collapsed when it is too big to draw)."""
    levels = graph.levels
    widest = max((len(lv) for lv in levels), default=0)
    crit = set(critical)
    if len(graph) > MAX_DAG_NODES or widest > MAX_LEVEL_NODES:
        return _collapsed_dag(levels, status_of)
    tall = widest * (NODE_H + ROW_GAP) - ROW_GAP
    height = tall + 2 * PAD
    width = len(levels) * (NODE_W + COL_GAP) - COL_GAP + 2 * PAD
    pos: dict[str, tuple[float, float]] = {}
    nodes: list[Node] = []
    for li, level in enumerate(levels):
        x = PAD + li * (NODE_W + COL_GAP)
        own = len(level) * (NODE_H + ROW_GAP) - ROW_GAP
        y0 = PAD + (tall - own) / 2
        for i, tid in enumerate(level):
            y = y0 + i * (NODE_H + ROW_GAP)
            pos[tid] = (x, y)
            task = graph.tasks[tid]
            r = record.tasks.get(tid)
            nodes.append(
                Node(
                    id=tid,
                    label=short_label(tid, 20),
                    what=short_label(task_what(task), 22),
                    kind=task_kind(task),
                    status=status_of[tid],
                    level=li,
                    x=x,
                    y=y,
                    critical=tid in crit,
                    duration_s=r.duration_s if r is not None else None,
                )
            )
    edges: list[Edge] = []
    crit_pairs = set(pairwise(critical))
    for tid in graph.order:
        x2, y2 = pos[tid]
        for dep in graph.dependencies[tid]:
            x1, y1 = pos[dep]
            sx, sy = x1 + NODE_W, y1 + NODE_H / 2
            ex, ey = x2, y2 + NODE_H / 2
            mid = (sx + ex) / 2
            d = f"M{sx:.1f},{sy:.1f} C{mid:.1f},{sy:.1f} {mid:.1f},{ey:.1f} {ex - 2:.1f},{ey:.1f}"
            edges.append(Edge(dep, tid, d, (dep, tid) in crit_pairs))
    return DagView(
        width=max(width, 240.0), height=height, collapsed=False, nodes=nodes, edges=edges
    )


def _collapsed_dag(levels: list[list[str]], status_of: Mapping[str, str]) -> DagView:
    box_h = 64.0
    gap = 18.0
    boxes: list[LevelBox] = []
    per_row = 5
    for li, level in enumerate(levels):
        row, col = divmod(li, per_row)
        x = PAD + col * (NODE_W + COL_GAP)
        y = PAD + row * (box_h + gap + 14)
        counts = status_counts({t: status_of[t] for t in level})
        segs: list[tuple[str, float, float]] = []
        off = 0.0
        inner = NODE_W - 16
        for s, n in counts:
            w = inner * n / len(level)
            segs.append((s, off, w))
            off += w
        boxes.append(LevelBox(li, x, y, box_h, len(level), counts, segs))
    arrows = []
    for a, b in pairwise(boxes):
        if a.y == b.y:
            sy = a.y + box_h / 2
            arrows.append(f"M{a.x + NODE_W:.1f},{sy:.1f} L{b.x - 2:.1f},{sy:.1f}")
    rows = (len(levels) + per_row - 1) // per_row
    width = min(len(levels), per_row) * (NODE_W + COL_GAP) - COL_GAP + 2 * PAD
    height = rows * (box_h + gap + 14) - gap + 2 * PAD
    return DagView(
        width=max(width, 240.0),
        height=height,
        collapsed=True,
        levels=boxes,
        level_edges=arrows,
        node_h=box_h,
    )
