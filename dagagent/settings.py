"""How a run is run: one frozen :class:`RunSettings`, shared by :func:`dagagent.execute`,
:func:`dagagent.resume`, :func:`dagagent.solve` and the command line."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, get_args

from .errors import ConfigError
from .limits import DEFAULT_MAX_ELEMENTS
from .results import FailurePolicy, InDoubtPolicy

if TYPE_CHECKING:
    from .executors import Executor

__all__ = ["RunSettings", "TaskRetryPolicy"]


@dataclass(frozen=True)
class TaskRetryPolicy:
    """The wait before a task's next attempt: ``base_delay_s * 2**(attempt-1)``, capped at
    ``max_delay_s``, with ±``jitter`` (a fraction). How many attempts a task gets is its own
    business (``retries`` in the plan, else its tool's); this only spaces them out.

    Not to be confused with :class:`dagagent.llm.HTTPRetryPolicy`, which retries one HTTP
    request of a model client."""

    base_delay_s: float = 0.2
    max_delay_s: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ConfigError("retry delays must be at least 0")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"retry jitter must be between 0 and 1, not {self.jitter}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt number ``attempt`` (from 1) failed."""
        d: float = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        if self.jitter:
            d *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, d)


@dataclass(frozen=True)
class RunSettings:
    """How to run a plan.

    - ``executor``: ``"dataflow"`` (each task as soon as its own dependencies are done),
      ``"levels"`` (one topological level at a time), ``"serial"``, ``"dask"``, or an
      executor object.
    - ``on_failure``: ``"cancel"`` (cancel running tasks, mark the rest) or ``"continue"``
      (independent branches run on; descendants of a failure are skipped).
    - ``max_concurrency``: at most this many tasks run at once across the run (a task takes
      its slot before it starts and holds it until it finishes, retries included; each
      element of a map task takes one).
    - ``max_elements``: the longest list a map task (``for_each``) may expand; a longer one
      fails that task with :class:`~dagagent.errors.MapError`.
    - ``retry``: the wait between a task's attempts.
    - ``in_doubt``: what a resumed run does with a call of a tool with side effects that its
      process left in doubt (started, no outcome on record) when neither a person nor the
      tool's reconciler resolved it (and a run on Temporal with one a lost worker left):
      ``"ask"`` a person (the task waits, as for an approval), ``"retry"`` it with the same
      idempotency key (for services that drop a key they have seen), or ``"deny"`` it (not
      made; the task is denied). See ``docs/exactly-once.md``.

    Invalid values raise :class:`~dagagent.errors.ConfigError` when the settings are made.
    ``settings.but(on_failure="continue")`` is a copy with some values changed. A recorded
    run keeps its settings (``RunRecord.settings``), and :func:`dagagent.resume` goes on
    with them unless it is given others.
    """

    executor: str | Executor = "dataflow"
    on_failure: FailurePolicy = "cancel"
    max_concurrency: int | None = None
    max_elements: int = DEFAULT_MAX_ELEMENTS
    retry: TaskRetryPolicy = field(default_factory=TaskRetryPolicy)
    in_doubt: InDoubtPolicy = "ask"

    def __post_init__(self) -> None:
        if self.on_failure not in get_args(FailurePolicy):
            raise ConfigError(f"on_failure must be 'cancel' or 'continue', not {self.on_failure!r}")
        if self.in_doubt not in get_args(InDoubtPolicy):
            raise ConfigError(f"in_doubt must be 'ask', 'retry' or 'deny', not {self.in_doubt!r}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be at least 1, not {self.max_concurrency}")
        if self.max_elements < 0:
            raise ConfigError(f"max_elements must be at least 0, not {self.max_elements}")

    def but(self, **changes: Any) -> RunSettings:
        """A copy of these settings with ``changes``."""
        return replace(self, **changes)

    def to_record(self) -> dict[str, Any]:
        """The settings as a record keeps them (JSON): a solve's options, and a run's
        (``RunRecord.settings``, without the executor, which the run's row names). An
        executor object is not recorded: ``executor`` is then ``None``, and a resume uses
        the run's own."""
        return {
            "executor": self.executor if isinstance(self.executor, str) else None,
            "on_failure": self.on_failure,
            "max_concurrency": self.max_concurrency,
            "max_elements": self.max_elements,
            "in_doubt": self.in_doubt,
            "retry": asdict(self.retry),
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any], **changes: Any) -> RunSettings:
        """The settings a record kept (see :meth:`to_record`), with ``changes``; what the
        record does not say keeps its default. A value the record holds that is not one
        these settings take (a damaged record) is a :class:`~dagagent.errors.ConfigError`
        naming it."""
        kept: dict[str, Any] = {
            k: data[k]
            for k in ("on_failure", "max_concurrency", "max_elements", "in_doubt")
            if k in data
        }
        if isinstance(data.get("executor"), str):
            kept["executor"] = data["executor"]
        retry = data.get("retry")
        if isinstance(retry, Mapping):
            try:
                kept["retry"] = TaskRetryPolicy(
                    **{k: float(v) for k, v in retry.items() if k in _RETRY_FIELDS}
                )
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"the recorded retry spacing {dict(retry)!r}: {exc}") from None
        return cls(**{**kept, **changes})


#: The fields of a recorded :class:`TaskRetryPolicy`.
_RETRY_FIELDS = frozenset(f.name for f in fields(TaskRetryPolicy))
