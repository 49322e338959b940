"""A run's timeline as text, for a terminal (``dagagent show RUN --timeline``).

One line per task that ran (or runs now), in start order, from the same bars the viewer
draws (:mod:`._bars`)::

    task        0s          0.50s         1.00s
    fetch     * ██████████                         410ms  succeeded
    parse       ·····████████████                  520ms  succeeded

``█`` is the task running (or that ran), ``·`` the time it waited after it was ready (for a
free slot or a level barrier), ``╌`` the time it could have run but was not planned yet (a
plan written while it ran), ``▒`` the time it waited for a person's decision, ``*`` marks
the critical path. Task ids are plain ids (the plan format allows no control characters in
them); nothing else from the run is printed.
"""

from __future__ import annotations

from ..text import shorten
from .view import RunView, fmt_s

__all__ = ["timeline_text"]


def _cell(t: float, span: float, width: int) -> int:
    return min(width - 1, max(0, int(t / span * width))) if span > 0 else 0


def timeline_text(view: RunView, *, width: int = 100) -> str:
    """The timeline of ``view`` as lines of at most ``width`` characters (at least 60)."""
    tl = view.timeline
    bars = tl.bars
    if not bars:
        if not view.record.plan.tasks:
            return "no task ran: no task of this run's plan was accepted"
        return "no task of this run has started yet" if view.running else "no task ran"
    span = tl.span_s
    label_w = min(24, max(4, *(len(b.task_id) for b in bars)))
    tail_w = 20
    bar_w = max(20, width - label_w - 3 - tail_w)
    head = [" "] * (label_w + 3 + bar_w)
    for at, text in ((0, "0s"), (bar_w // 2 - 2, fmt_s(span / 2)), (bar_w - 6, fmt_s(span))):
        start = label_w + 3 + max(0, min(at, bar_w - len(text)))
        head[start : start + len(text)] = text
    lines = ["".join(head).rstrip()]
    for b in bars:
        cells = [" "] * bar_w

        def paint(lo: float, hi: float, mark: str, cells: list[str] = cells) -> None:
            for i in range(_cell(lo, span, bar_w), min(_cell(hi, span, bar_w), bar_w)):
                cells[i] = mark

        if b.unplanned is not None:
            paint(b.unplanned, b.ready, "╌")
        paint(b.ready, b.start, "·")
        s = _cell(b.start, span, bar_w)
        e = max(s + 1, _cell(b.end, span, bar_w) + 1)
        for i in range(s, min(e, bar_w)):
            cells[i] = "█"
        for lo, hi in b.approvals:
            paint(lo, hi, "▒")
        label = shorten(b.task_id, label_w, one_line=False)
        mark = "*" if b.critical else " "
        took = fmt_s(b.duration_s) + ("…" if b.running else "")
        tail = f"{took:>7}  {b.status}"
        lines.append(f"{label:<{label_w}} {mark} {''.join(cells)} {tail}".rstrip())
    n = len(bars)
    more = f" ({tl.left_out} more not drawn)" if tl.left_out else ""
    lines.append(
        f"{n} task{'s' if n != 1 else ''}{more} over {fmt_s(span)}"
        f"{' so far' if view.running else ''}; critical path {fmt_s(view.critical_s)} (*)"
    )
    keys = ["█ ran", "· waiting after ready"]
    if tl.planned:
        keys.append("╌ not planned yet")
    keys.append("▒ waiting for a person's decision")
    lines.append("  ".join(keys))
    return "\n".join(lines)
