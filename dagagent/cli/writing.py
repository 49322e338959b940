"""What a model is writing, shown while it writes: :class:`ModelProgress`.

- On a terminal, a live line on stderr under the rest of the progress: who is writing (the
  planner of round 1, agent task ``note``...), how much so far (characters and tokens,
  estimated), the rate and the time, for each call under way. Rich redraws it on its own
  thread a few times a second, never per piece of the answer.
- Otherwise (a pipe, a log file), the same as a plain line every :data:`PLAIN_EVERY_S` while
  calls are under way: a log shows that the model is writing, not silence.
- A rejected attempt is printed when it is rejected, with its issues.
- The joiner's answer goes to stdout as it is written when stdout is a terminal
  (``answer_to``): the live line is hidden meanwhile; ``streamed`` is the answer printed so
  far, so that the command does not print it twice.

Model text is untrusted: it is printed with control characters escaped and no markup (the
command line's consoles see to it), and shortened where it is quoted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import pydantic_core
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from ..llm import LiveCall, Usage, estimate_tokens
from ..text import printable, shorten

__all__ = ["PLAIN_EVERY_S", "ModelProgress", "who"]

#: Without a terminal, a line about the calls under way this often (seconds).
PLAIN_EVERY_S = 5.0


def who(role: str, round: int | None = None, task_id: str | None = None) -> str:
    """``"round 1: the planner"``, ``"agent task note"``: whose call it is."""
    if role == "agent":
        return f"agent task {task_id}" if task_id else "an agent task"
    where = f"round {round}: " if round is not None else ""
    return f"{where}the {role}"


@dataclass
class _Writing:
    call: LiveCall
    role: str
    round: int | None
    task_id: str | None
    within: str = ""  # a sub-solve's: the prefix of its lines (its answer is not streamed)


def _rate(call: LiveCall) -> str:
    elapsed = call.elapsed_s
    tokens = estimate_tokens(call.chars)
    if call.first_token_s is None:
        return f"waiting for the first token, {elapsed:.1f} s"
    writing = max(1e-3, elapsed - call.first_token_s)
    return (
        f"{call.chars:,} chars (~{tokens:,} tokens), {tokens / writing:.0f} tok/s, {elapsed:.1f} s"
    )


def _answer_so_far(text: str) -> str | None:
    """The answer a joiner's partial JSON holds so far (``None``: not a finish with a text
    answer, or not yet)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        value = pydantic_core.from_json(text[start:], allow_partial="trailing-strings")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if len(value) == 1 and isinstance(next(iter(value.values())), dict):  # {"finish": {...}}
        key, inner = next(iter(value.items()))
        value = {"action": key, **inner}
    answer = value.get("answer")
    if value.get("action") != "finish" or not isinstance(answer, str):
        return None
    return answer


class ModelProgress:
    """Shows the model calls under way on ``console`` (stderr): live on a terminal (unless
    ``live`` is false: questions may be asked there), a plain line now and then otherwise
    (see the module docstring). ``answer_to``: the console the joiner's answer is streamed to
    (stdout, when it is a terminal), or ``None``."""

    def __init__(
        self,
        console: Console,
        *,
        answer_to: Console | None = None,
        live: bool = True,
        refresh_per_second: float = 4,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.console = console
        self.answer_to = answer_to
        # No live line while questions may be asked on the terminal: it would draw over them.
        self.live_display = live and console.is_terminal
        self.refresh_per_second = refresh_per_second
        self.plain_every_s = plain_every_s
        self._lock = threading.Lock()
        self._writing: dict[str, _Writing] = {}
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: The joiner's answer printed to ``answer_to`` so far (by call), and the call whose
        #: answer is being printed.
        self._printed: dict[str, str] = {}
        self._answering: str | None = None
        self._answer_lock = threading.RLock()  # the loop and the ticking thread both print it
        self._last_line: float | None = None  # when the last plain line was printed
        self.streamed: str | None = None

    # -- what happens (event loop) --------------------------------------------------------

    def started(
        self,
        call: LiveCall,
        role: str,
        round: int | None,
        task_id: str | None,
        *,
        within: str = "",
    ) -> None:
        """A call began; ``within``: it is a sub-solve's, whose lines begin so (its joiner's
        answer is not the answer: it is not streamed to ``answer_to``)."""
        with self._lock:
            self._writing[call.id] = _Writing(call, role, round, task_id, within)

    def ended(self, call_id: str) -> None:
        with self._lock:
            writing = self._writing.pop(call_id, None)
        if (
            writing is not None
            and writing.role == "joiner"
            and not writing.within
            and self.answer_to is not None
        ):
            self._stream_answer(writing, final=True)

    def rejected(
        self,
        role: str,
        round: int | None,
        task_id: str | None,
        issues: Sequence[str],
        *,
        within: str = "",
    ) -> None:
        """Print a rejected attempt now, with its issues (the model is asked again);
        ``within``: a sub-solve's, whose lines begin so."""
        what = "plan" if role in ("planner", "replanner") else "answer"
        lines = [f"{within}{who(role, round, task_id)}'s {what} was rejected:"]
        lines += [f"{within}  {shorten(issue, 300)}" for issue in issues[:8]]
        if len(issues) > 8:
            lines.append(f"{within}  ... {len(issues) - 8} more")
        if role == "joiner" and not within and self._answering is not None:
            self._end_answer("(that answer was rejected)")
        for line in lines:
            self.console.print(printable(line), markup=False, highlight=False)

    def summary(self, role: str, round: int | None, usage: Usage, duration_s: float | None) -> None:
        """A line about a planner's or joiner's call that ended (who, tokens, time)."""
        took = f" in {duration_s:.1f} s" if duration_s is not None else ""
        est = " (estimated)" if usage.estimated else ""
        self.console.print(
            f"{who(role, round)} wrote {usage.output_tokens:,} tokens{est}{took}",
            markup=False,
            highlight=False,
        )

    def line(self) -> str | None:
        """What the calls under way have written, as one line (``None``: no call)."""
        with self._lock:
            writing = list(self._writing.values())
        if not writing:
            return None
        parts = [
            f"{w.within.lstrip()}{who(w.role, w.round, w.task_id)} writing: {_rate(w.call)}"
            for w in writing[:3]
        ]
        if len(writing) > 3:
            parts.append(f"{len(writing) - 3} more calls")
        return " | ".join(parts)

    # -- the joiner's answer, to stdout --------------------------------------------------------

    def _stream_answer(self, w: _Writing, *, final: bool = False) -> None:
        if self.answer_to is None:
            return
        with self._answer_lock:
            self._print_answer(w, final)

    def _print_answer(self, w: _Writing, final: bool) -> None:
        assert self.answer_to is not None
        text = _answer_so_far(w.call.text)
        if text is None:
            return
        before = self._printed.get(w.call.id, "")
        if not text.startswith(before):  # a partial escape decoded otherwise: start over
            return
        new = text[len(before) :]
        if not new and not final:
            return
        if self._answering is None:
            self._answering = w.call.id
            if self._live is not None:
                self._live.stop()  # the answer owns the terminal while it is written
        if self._answering != w.call.id:
            return
        self.answer_to.print(printable(new, lines=True), end="", markup=False, highlight=False)
        self._printed[w.call.id] = text
        self.streamed = text
        if final:
            self._end_answer(None)

    def _end_answer(self, note: str | None) -> None:
        with self._answer_lock:
            if self.answer_to is not None:
                self.answer_to.print("", markup=False)
            if note is not None:
                self.streamed = None
                self.console.print(note, markup=False, highlight=False)
            self._answering = None
            if self._live is not None:
                self._live.start()

    # -- rendering (another thread) ------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        text = self.line()
        return Group(Text(text, style="dim")) if text else Group()

    def tick(self, now: float) -> None:
        """What the ticking thread does at ``now`` (``time.monotonic()``): the joiner's answer
        so far to ``answer_to``; without a terminal, a plain line once ``plain_every_s`` have
        passed since the last one."""
        if self.answer_to is not None:
            with self._lock:
                joiners = [w for w in self._writing.values() if w.role == "joiner" and not w.within]
            for w in joiners:
                self._stream_answer(w)
        if self.live_display:
            return
        if self._last_line is None:
            self._last_line = now
        if now - self._last_line >= self.plain_every_s:
            self._last_line = now
            text = self.line()
            if text is not None:
                self.console.print(printable(text), markup=False, highlight=False)

    def _tick(self) -> None:
        interval = 1 / self.refresh_per_second if self.answer_to is not None else self.plain_every_s
        while not self._stop.wait(min(interval, 0.25)):
            self.tick(time.monotonic())

    def __enter__(self) -> ModelProgress:
        if self.live_display:
            self._live = Live(
                self,
                console=self.console,
                refresh_per_second=self.refresh_per_second,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.__enter__()
        self._thread = threading.Thread(target=self._tick, name="dagagent-writing", daemon=True)
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
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None
