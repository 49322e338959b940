"""A run's timeline as text, for a terminal (``dagagent show RUN --timeline``).

One line per task that ran, in start order::

    task        0s          0.50s         1.00s
    fetch     * ██████████                         410ms  succeeded
    parse       ·····████████████                  520ms  succeeded

``█`` is the task running, ``·`` the time it waited after it was ready (for a free slot or a
level barrier), ``▒`` the time its call waited for an approval decision, ``*`` marks the
critical path. Task ids are plain ids (the plan format allows no control characters in them);
nothing else from the run is printed.
"""

from __future__ import annotations

from ..text import shorten
from .view import RunView, fmt_s, waits_of

__all__ = ["timeline_text"]


def _cell(t: float, span: float, width: int) -> int:
    return min(width - 1, max(0, int(t / span * width))) if span > 0 else 0


def timeline_text(view: RunView, *, width: int = 100) -> str:
    """The timeline of ``view`` as lines of at most ``width`` characters (at least 60)."""
    record = view.record
    rows = [
        (tid, r)
        for tid, r in record.tasks.items()
        if r.started_at is not None and r.finished_at is not None
    ]
    if not rows:
        return "no task of this run has a recorded start and end"
    origin = record.started_at
    if origin is None:
        origin = min(r.started_at for _, r in rows if r.started_at is not None)
    ends = [r.finished_at - origin for _, r in rows if r.finished_at is not None]
    span = max([*ends, (record.finished_at or origin) - origin, 1e-3])
    pos = {t.id: i for i, t in enumerate(record.plan.tasks)}
    rows.sort(key=lambda x: (x[1].started_at or 0.0, pos.get(x[0], 0)))
    label_w = min(24, max(4, *(len(t) for t, _ in rows)))
    tail_w = 20
    bar_w = max(20, width - label_w - 3 - tail_w)
    crit = set(view.critical)
    waits = waits_of(record, view.graph)
    head = [" "] * (label_w + 3 + bar_w)
    for at, text in ((0, "0s"), (bar_w // 2 - 2, fmt_s(span / 2)), (bar_w - 6, fmt_s(span))):
        start = label_w + 3 + max(0, min(at, bar_w - len(text)))
        head[start : start + len(text)] = text
    scale = "".join(head)
    lines = [scale.rstrip()]
    for tid, r in rows:
        assert r.started_at is not None and r.finished_at is not None
        cells = [" "] * bar_w
        ready = waits.get(tid, (r.started_at, r.started_at))[0]
        a = _cell(ready - origin, span, bar_w)
        s = _cell(r.started_at - origin, span, bar_w)
        e = max(s + 1, _cell(r.finished_at - origin, span, bar_w) + 1)
        for i in range(a, s):
            cells[i] = "·"
        for i in range(s, min(e, bar_w)):
            cells[i] = "█"
        decided = [d.at for d in r.decisions or () if d.source == "plan"]
        if decided:
            k = _cell(min(max(decided), r.finished_at) - origin, span, bar_w)
            for i in range(s, min(k, bar_w)):
                cells[i] = "▒"
        label = shorten(tid, label_w, one_line=False)
        mark = "*" if tid in crit else " "
        tail = f"{fmt_s(r.finished_at - r.started_at):>7}  {r.status.value}"
        lines.append(f"{label:<{label_w}} {mark} {''.join(cells)} {tail}".rstrip())
    lines.append(
        f"{len(rows)} task{'s' if len(rows) != 1 else ''} over {fmt_s(span)}; "
        f"critical path {fmt_s(view.critical_s)} (*)"
    )
    lines.append("█ running  · waiting after ready  ▒ waiting for approval")
    return "\n".join(lines)
