"""Live progress of a run, as a listener.

- On a terminal, :class:`LiveProgress` shows tasks moving through their states in a rich
  ``Live`` display. The listener only updates counters; rendering happens on rich's refresh
  thread at a bounded rate (4 per second), never per event.
- On a pipe, :class:`PlainProgress` prints one plain line per finished task
  (``id status duration``), written in batches every 0.2 s by a small thread.
- ``--json`` shows no progress at all: only the result is printed.

:func:`dagagent.cli.recording.run_recorded` attaches the display that fits.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..events import TaskFinished, TaskRetrying, TaskStarted
from ..graph import PlanGraph
from .render import STATUS_STYLE

__all__ = [
    "LiveProgress",
    "PlainProgress",
    "progress_for",
    "question_on_terminal",
]

_FINAL_ORDER = ("succeeded", "reused", "failed", "denied", "cancelled", "skipped")


class PlainProgress:
    """One line per finished task on ``stream``: ``id status duration``.

    The listener only appends the result to a deque; a small daemon thread formats and writes
    the lines every ``flush_interval_s`` (and once more when the run ends), so a line is never
    more than that late and the event loop never waits on the stream.
    """

    def __init__(self, stream: IO[str], *, flush_interval_s: float = 0.2) -> None:
        self._stream = stream
        self._interval = flush_interval_s
        self._pending: deque[Any] = deque()
        self._append = self._pending.append
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._broken = False
        self._writing = threading.Lock()
        self._held = 0  # questions open on the terminal: lines wait until they are answered

    def __call__(self, event: Any) -> None:
        if type(event) is TaskFinished:
            self._append(event.result)

    def hold(self) -> None:
        """A question is about to be asked on the terminal: write what finished so far now,
        above it, then nothing more until :meth:`release` (a line must not land on the
        prompt the person is typing at)."""
        with self._writing:
            self._write_pending()
            self._held += 1

    def release(self) -> None:
        with self._writing:
            self._held = max(0, self._held - 1)

    def _drain(self) -> None:
        with self._writing:
            if not self._held:
                self._write_pending()

    def _write_pending(self) -> None:
        pending = self._pending
        lines = []
        while True:
            try:
                r = pending.popleft()
            except IndexError:
                break
            d = r.duration_s
            note = " (by its condition)" if r.skipped_by_condition else ""
            note = " (partial answer)" if r.partial else note
            took = f"{d:.3f}s" if d is not None else "-"
            lines.append(f"{r.task_id} {r.status.value} {took}{note}\n")
        if lines and not self._broken:
            try:
                self._stream.write("".join(lines))
                self._stream.flush()
            except (OSError, ValueError):  # the pipe is gone: nothing more to show
                self._broken = True

    def _work(self) -> None:
        while not self._stop.wait(self._interval):
            self._drain()

    def __enter__(self) -> PlainProgress:
        _ACTIVE.add(self)
        self._thread = threading.Thread(target=self._work, name="dagagent-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._writing:
            self._held = 0
            self._write_pending()
        _ACTIVE.discard(self)


_ACTIVE: set[PlainProgress] = set()


@contextmanager
def question_on_terminal() -> Iterator[None]:
    """While a question waits for an answer on the terminal, progress lines wait too; the
    lines of tasks that finished before it are written first, above the question."""
    held = list(_ACTIVE)
    for progress in held:
        progress.hold()
    try:
        yield
    finally:
        for progress in held:
            progress.release()


class LiveProgress:
    """A live table of the run on a terminal: counts by state, a progress bar, the tasks
    running now and the last few that finished.

    The listener part only updates a few dicts under a lock; rich renders a snapshot on its
    own refresh thread ``refresh_per_second`` times a second.
    """

    def __init__(
        self,
        graph: PlanGraph,
        console: Console,
        *,
        refresh_per_second: float = 4,
        show_running: int = 8,
        show_finished: int = 5,
    ) -> None:
        self.total = len(graph)
        self.console = console
        self.refresh_per_second = refresh_per_second
        self._show_running = show_running
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}  # task id -> started (monotonic)
        self._retrying: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._done = 0
        self._recent: deque[tuple[str, str, float | None]] = deque(maxlen=show_finished)
        self._started = time.monotonic()
        self._live: Live | None = None
        self._note: str | None = None  # what happens before the first task starts

    # -- the listener (event loop) ---------------------------------------------------------

    def __call__(self, event: Any) -> None:
        kind = type(event)
        if kind is TaskStarted:
            with self._lock:
                self._running[event.task_id] = time.monotonic()
                self._note = None
        elif kind is TaskFinished:
            r = event.result
            status = r.status.value
            with self._lock:
                self._running.pop(r.task_id, None)
                self._retrying.pop(r.task_id, None)
                self._counts[status] = self._counts.get(status, 0) + 1
                self._done += 1
                self._recent.append((r.task_id, status, r.duration_s))
        elif kind is TaskRetrying:
            with self._lock:
                self._retrying[event.task_id] = event.attempt

    def note(self, text: str) -> None:
        """Show what the run is waiting for before its first task starts (a Dask cluster
        starting, say), under the counts, until a task starts."""
        with self._lock:
            self._note = text

    # -- rendering (rich's refresh thread) --------------------------------------------------

    def __rich__(self) -> RenderableType:
        now = time.monotonic()
        with self._lock:
            running = list(self._running.items())
            retrying = dict(self._retrying)
            counts = dict(self._counts)
            done = self._done
            recent = list(self._recent)
            note = self._note
        pending = self.total - done - len(running)
        head = Text()
        head.append(f"{done}/{self.total} done", style="bold")
        head.append(f"  {len(running)} running  {max(pending, 0)} waiting")
        for st in _FINAL_ORDER:
            if counts.get(st):
                head.append(f"  {counts[st]} {st}", style=STATUS_STYLE.get(st, ""))
        head.append(f"  {now - self._started:.1f}s", style="dim")
        # a grid row ends its line: a bare ProgressBar does not, and the next row would
        # continue on the bar's line
        bar = Table.grid()
        bar.add_row(ProgressBar(total=max(self.total, 1), completed=done, width=40))
        table = Table(box=None, show_header=False, padding=(0, 1))
        table.add_column("state")
        table.add_column("id")
        table.add_column("time", justify="right")
        for tid, t0 in running[: self._show_running]:
            state = f"retry {retrying[tid]}" if tid in retrying else "running"
            table.add_row(Text(state, style="blue"), tid, f"{now - t0:.1f}s")
        if len(running) > self._show_running:
            table.add_row("", Text(f"... {len(running) - self._show_running} more", "dim"), "")
        for tid, st, dur in reversed(recent):
            table.add_row(
                Text(st, style=STATUS_STYLE.get(st, "")),
                tid,
                f"{dur:.2f}s" if dur is not None else "-",
            )
        if note is not None:
            return Group(head, bar, Text(note, style="dim"), table)
        return Group(head, bar, table)

    def __enter__(self) -> LiveProgress:
        self._started = time.monotonic()
        self._live = Live(
            self,
            console=self.console,
            refresh_per_second=self.refresh_per_second,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None


def progress_for(
    graph: PlanGraph, console: Console, *, live: bool = True
) -> LiveProgress | PlainProgress:
    """Live display on a terminal (unless ``live`` is false: e.g. when approval questions may
    be asked on the terminal during the run), plain lines otherwise."""
    if live and console.is_terminal:
        return LiveProgress(graph, console)
    return PlainProgress(console.file)
