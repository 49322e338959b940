"""``Session``: a conversation of questions, each answered by a solve that sees the turns
before it.

::

    async with dagagent.Session("trip", registry, llm, store="runs.db") as session:
        first = await session.ask("What is the weather in Paris?")
        second = await session.ask("And how does that compare with Tokyo?")

Each :meth:`Session.ask` is one **turn**: a :func:`~dagagent.solve` whose planner, replanner
and joiner are shown the conversation so far (the earlier questions and answers, and every
earlier task output by reference; see :mod:`dagagent.planners.conversation`) and whose plans
may use an earlier output as ``${turnN.task}``: it is reused from the record, its tool is not
called again. Past a token limit (``max_tokens``) the oldest turns are summarised by one model
call (role ``compress``), the latest ``keep`` turns staying word for word; the summary is
recorded with the turn.

**Records.** A session lives in the run store (tables ``sessions`` and ``session_turns``;
each turn's solve and runs are recorded as any solve's): opening a session of the same name
again, in any process, goes on from its last turn. ``dagagent sessions`` lists them, the
viewer shows one as a thread of solves.

**A turn that did not end.** When the process dies in the middle of a turn (or a turn
pauses for a person's decision), the session says so: :meth:`Session.ask` refuses to start
the next turn (:class:`~dagagent.errors.SessionError`) until :meth:`Session.resume` has
continued it (with :func:`~dagagent.resume_solve`: what finished stands, the rest goes on).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ..errors import ClusterError, ConfigError, SessionError, StoreError
from ..plan import ToolTask
from ..planners import LLMPlanner
from ..planners.conversation import EARLIER_TURN, Conversation, Turn, earlier_turn_tool
from ..results import SolveStatus, TaskStatus
from ..run import new_run_id
from ..store import OUTPUT_NOT_RECORDED, RunStore, SessionRecord, check_session_name
from ..text import as_text, jsonable
from ..tools import Registry, Tool
from .solution import Solution
from .solve import solve
from .solve_resume import resume_solve

if TYPE_CHECKING:
    from ..approval import Approval
    from ..llm import LLM

__all__ = ["Session"]

#: The statuses of a turn that did not end: the next turn waits for its resume.
UNFINISHED = frozenset({SolveStatus.RUNNING, SolveStatus.INTERRUPTED, SolveStatus.PAUSED})

#: Options that are the session's, not a turn's: not passed on to :func:`solve`.
_OWN = ("conversation", "solve_id", "store")


class Session:
    """A named conversation with ``registry``'s tools and ``llm``, recorded in ``store``.

    - ``name``: 1-64 letters, digits, ``_``, ``-`` or ``.``; the same name in the same
      store is the same conversation (opening it again goes on from its last turn).
    - ``store``: a :class:`~dagagent.store.RunStore` or the path of one (required: a
      session is its record).
    - ``max_tokens``: the conversation's size (estimated tokens of what the models are shown
      of the earlier turns) past which older turns are summarised; ``None``: never.
    - ``keep``: how many of the latest turns stay word for word when summarising.
    - ``output_chars``: how much of each earlier output the models are shown in the listing
      (the reference gives the plan the whole output).
    - ``**options``: what every turn's :func:`~dagagent.solve` gets (``max_rounds``,
      ``stream``, ``policy``, ``budget``, ``listeners``, ``settings``...); :meth:`ask` takes
      more for one turn.

    Use it as an async context manager (it opens the store it was given by path, and reads
    the session's turns); :attr:`turns` are the turns on record.
    """

    def __init__(
        self,
        name: str,
        registry: Registry,
        llm: LLM,
        *,
        store: RunStore | str | Path,
        max_tokens: int | None = 2000,
        keep: int = 2,
        output_chars: int = 200,
        **options: Any,
    ) -> None:
        self.name = check_session_name(name)
        if store is None:
            raise ConfigError("a session needs a run store (store=...): it is its record")
        for key in _OWN:
            if key in options:
                raise ConfigError(f"{key}= is the session's own: a turn cannot be given one")
        if EARLIER_TURN in registry:
            raise ConfigError(
                f"the registry has a tool named {EARLIER_TURN!r}: a session needs that name "
                "for the tool that reads earlier turns' outputs"
            )
        self.llm = llm
        self.options = options
        self.max_tokens = max_tokens
        self.keep = keep
        self.output_chars = output_chars
        Conversation(max_tokens=max_tokens, keep=keep)  # a bad limit fails here, not mid-turn
        # The session's tools: the registry's, and the reader of earlier turns' outputs.
        self.registry = registry.subset(registry.names)
        self.registry.add(_earlier_turn_tool(self))
        self._given_store = store
        self.store: RunStore | None = store if isinstance(store, RunStore) else None
        self.record: SessionRecord | None = None
        self._turns: list[Turn] = []

    # -- opening and closing ----------------------------------------------------------------

    async def __aenter__(self) -> Session:
        if self.store is None:
            path = self._given_store
            assert not isinstance(path, RunStore)
            self.store = await anyio.to_thread.run_sync(lambda: RunStore(path))
        await self.refresh()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store, if the session opened it."""
        if self.store is not None and self.store is not self._given_store:
            self.store.close()
            self.store = None

    def _store(self) -> RunStore:
        if self.store is None:
            raise ConfigError(
                f"session {self.name!r} is not open: use it as 'async with Session(...)'"
            )
        return self.store

    async def refresh(self) -> None:
        """Read the session's turns from the store again (another process may have added
        some)."""
        store = self._store()
        self.record, self._turns = await anyio.to_thread.run_sync(_load, store, self.name)

    # -- what is on record ------------------------------------------------------------------

    @property
    def turns(self) -> list[Turn]:
        """Every turn on record (as read when the session was opened, and since), oldest
        first: question, answer, outputs by task id."""
        return list(self._turns)

    @property
    def unfinished(self) -> int | None:
        """The number of the last turn if it did not end (interrupted, paused, or still
        running in another process), else ``None``."""
        record = self.record
        if record is None or record.last is None:
            return None
        return record.last.turn if record.last.status in UNFINISHED else None

    def conversation(self, before: int | None = None) -> Conversation:
        """What turn ``before`` (default: the next one) is shown of the turns before it: the
        latest summary on record of the turns before it, and the turns themselves."""
        n = before if before is not None else len(self._turns) + 1
        summary, summarized = None, 0
        for t in self.record.turns if self.record is not None else ():
            if t.turn <= n and t.summary:
                summary, summarized = t.summary, t.summarized
        store, name = self._store(), self.name

        def record(text: str, upto: int) -> None:
            store.record_compression(name, n, text, upto)

        return Conversation(
            turns=tuple(t for t in self._turns if t.number < n),
            summary=summary,
            summarized=summarized,
            max_tokens=self.max_tokens,
            keep=self.keep,
            output_chars=self.output_chars,
            record=record,
        )

    # -- turns ------------------------------------------------------------------------------

    async def ask(self, question: str, **options: Any) -> Solution:
        """Ask the next question: a turn, answered by a solve that sees the conversation so
        far. ``options`` go to :func:`~dagagent.solve` for this turn, over the session's.
        Returns the turn's :class:`~dagagent.Solution`.

        Raises :class:`~dagagent.errors.SessionError` while the last turn has not ended
        (resume it first) or when another process took the next turn meanwhile;
        :class:`~dagagent.errors.ConfigError` for an empty question or a bad option."""
        if not question.strip():
            raise ConfigError("the question is empty: say what the answer should be about")
        for key in _OWN:
            if key in options:
                raise ConfigError(f"{key}= is the session's own: a turn cannot be given one")
        store = self._store()
        await self.refresh()
        waiting = self.unfinished
        if waiting is not None:
            assert self.record is not None and self.record.last is not None
            raise SessionError(
                f"turn {waiting} of session {self.name!r} has not ended (it is "
                f"{self.record.last.status.value}): resume it first (Session.resume(), or "
                f"'dagagent chat --session {self.name}' / 'dagagent ask --session {self.name}',"
                " which resume it)"
            )
        chosen = self._turn_options(options)  # a bad option fails before the turn is taken
        solve_id = new_run_id()
        after = len(self._turns)
        try:
            number = await anyio.to_thread.run_sync(
                lambda: store.start_turn(
                    self.name,
                    solve_id,
                    question.strip(),
                    after=after,
                    options={"max_tokens": self.max_tokens, "keep": self.keep},
                )
            )
        except StoreError as exc:
            if "moved on" in str(exc):
                raise SessionError(str(exc)) from None
            raise
        conversation = self.conversation(number)
        try:
            solution = await solve(
                question,
                self.registry,
                self.llm,
                store=store,
                solve_id=solve_id,
                conversation=conversation,
                **chosen,
            )
        except (ConfigError, ClusterError):
            # refused before it began (a bad option; a Temporal server it cannot reach): the
            # turn is not taken after all, unless its solve is on record (it began)
            await anyio.to_thread.run_sync(lambda: store.drop_unstarted_turn(self.name, number))
            raise
        finally:
            await self.refresh()
        return solution

    def _turn_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The session's options with a turn's over them; a planner of one's own plans for
        the session's tools (the registry's, and the reader of earlier turns' outputs)."""
        chosen = {**self.options, **options}
        planner = chosen.get("planner")
        if isinstance(planner, LLMPlanner) and planner.registry is not self.registry:
            if planner.registry.names != [n for n in self.registry.names if n != EARLIER_TURN]:
                raise ConfigError(
                    "the planner plans for other tools than the session runs: build it with "
                    "the same registry (LLMPlanner(llm, registry, ...))"
                )
            chosen["planner"] = planner.for_registry(self.registry)
        return chosen

    async def resume(
        self,
        *,
        decisions: Mapping[str, Approval] | None = None,
        decided_by: str | None = None,
        **options: Any,
    ) -> Solution | None:
        """Continue the last turn if it did not end (its process died, or it paused for a
        person's decision): :func:`~dagagent.resume_solve` with the conversation it was
        asked in (its recorded summary included: no compression is made again). Returns its
        :class:`~dagagent.Solution`, or ``None`` when every turn had ended. ``decisions``,
        ``decided_by`` and ``options`` (``policy``, ``listeners``, ``interceptors``,
        ``executor``, ``confirm``, ``model_settings``, ``prices``) go to
        :func:`~dagagent.resume_solve`; the session's own options of those names are used
        when not given. A turn whose process died before its solve began (nothing of it is
        on record but its question) is asked again, as that turn. A turn on the temporal
        executor (the session's ``settings``) whose process died went on on the workers: it
        is followed there to its end and recorded
        (:func:`~dagagent.workflows.temporal_solve.attach_solve`), never run again."""
        store = self._store()
        await self.refresh()
        waiting = self.unfinished
        if waiting is None:
            return None
        assert self.record is not None and self.record.last is not None
        last = self.record.last
        if not last.solve_recorded:  # it died before its solve began: nothing of it ran
            try:
                return await solve(
                    last.question,
                    self.registry,
                    self.llm,
                    store=store,
                    solve_id=last.solve_id,
                    conversation=self.conversation(waiting),
                    **self._turn_options(options),
                )
            finally:
                await self.refresh()
        chosen = self._turn_options(options)
        durable = _temporal(chosen.get("settings"))
        if durable is not None and last.status is not SolveStatus.PAUSED:
            # its process died, and its solve goes on (or ended) on the workers: follow it
            # there, recording what its record lacks, instead of running it again here
            from .temporal_solve import attach_solve

            try:
                return await attach_solve(
                    last.solve_id,
                    executor=durable,
                    store=store,
                    listeners=chosen.get("listeners", ()),
                    prices=chosen.get("prices"),
                    settings=chosen.get("settings"),
                )
            finally:
                await self.refresh()
        taken = ("policy", "listeners", "interceptors", "model_settings", "prices", "confirm")
        given = {k: v for k, v in chosen.items() if k in taken}
        try:
            return await resume_solve(
                self.record.last.solve_id,
                self.registry,
                self.llm,
                store=store,
                decisions=decisions,
                decided_by=decided_by,
                conversation=self.conversation(waiting),
                **given,
            )
        finally:
            await self.refresh()


def _temporal(settings: Any) -> Any:
    """The :class:`~dagagent.executors.temporal.TemporalExecutor` ``settings`` (a
    :class:`~dagagent.RunSettings`) run on, or ``None``."""
    chosen = getattr(settings, "executor", None)
    name = chosen if isinstance(chosen, str) else getattr(chosen, "name", None)
    if chosen is None or name != "temporal":
        return None
    from ..executors import get_executor

    return get_executor(chosen)


def _earlier_turn_tool(session: Session) -> Tool:
    return earlier_turn_tool(lambda: session.turns, f"session {session.name!r}")


def _load(store: RunStore, name: str) -> tuple[SessionRecord | None, list[Turn]]:
    """The session's record and its turns, each with the outputs of its tasks that
    succeeded (over its rounds, a later round's output over an earlier one's; an earlier
    turn's outputs, reused, are not a turn's own)."""
    record = store.get_session(name)
    if record is None:
        return None, []
    turns = []
    for t in record.turns:
        outputs: dict[str, Any] = {}
        try:
            solve = store.get_solve(t.solve_id)
        except StoreError:
            solve = None  # its process died before the solve was recorded
        for rnd in solve.rounds if solve is not None else ():
            if rnd.run_id is None:
                continue
            try:
                run = store.get_run(rnd.run_id)
            except StoreError:
                continue  # planned, never started
            tasks = {task.id: task for task in run.plan.tasks}
            for tid, r in run.tasks.items():
                task = tasks.get(tid)
                if (
                    r.status in (TaskStatus.SUCCEEDED, TaskStatus.REUSED)
                    and r.error_type != OUTPUT_NOT_RECORDED
                    and not (isinstance(task, ToolTask) and task.tool == EARLIER_TURN)
                ):
                    outputs[tid] = jsonable(r.output)
        answer = t.answer
        turns.append(
            Turn(
                number=t.turn,
                question=t.question,
                answer=None if answer is None else _text(answer),
                outputs=outputs,
                status=t.status.value,
            )
        )
    return record, turns


def _text(answer: Any) -> str:
    return as_text(answer)
