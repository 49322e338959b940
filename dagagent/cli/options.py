"""The options that several commands share, each declared once (``Annotated`` aliases), and
what they become, in one place: :class:`RunOptions` for a command that runs a plan (``run``,
``plan --execute``, ``replan --execute``), :class:`ModelChoice` for one that talks to a model
(``--model``, ``--base-url``, ``--timeout``, ``--max-tokens`` → a client with its
:class:`~dagagent.llm.ModelSettings`), :func:`make_planner` for one that plans
(``--planner-prompt``, ``--examples``)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from ..errors import ConfigError
from ..executors import EXECUTORS, get_executor
from ..limits import (
    DEFAULT_ANSWER_CHARS,
    DEFAULT_MAX_ELEMENTS,
    DEFAULT_MAX_TASKS,
    DEFAULT_STREAM_S,
)
from ..results import FailurePolicy
from ..settings import RunSettings
from ..tools import DEFAULT_THRESHOLD
from .recording import recorded_tools_spec
from .rules import ApprovalRules

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..llm import ModelSettings
    from ..planners import LLMPlanner
    from ..runner import Interceptor
    from ..tools import Registry, ToolDiscovery

__all__ = [
    "ApproveOpt",
    "AskOpt",
    "BaseUrlOpt",
    "BudgetOptions",
    "DeadlineOpt",
    "ExamplesOpt",
    "ExecutorOpt",
    "LastOpt",
    "MaxAttemptsOpt",
    "MaxConcurrencyOpt",
    "MaxCostOpt",
    "MaxElementsOpt",
    "MaxModelCallsOpt",
    "MaxTokensOpt",
    "MaxTokensTotalOpt",
    "MaxToolCallsOpt",
    "MaxToolsOpt",
    "McpOpt",
    "ModelChoice",
    "ModelOpt",
    "NoWaitOpt",
    "OnFailureOpt",
    "OutOpt",
    "PlanArg",
    "PlannerPromptOpt",
    "PolicyOpt",
    "PricesOpt",
    "RunArg",
    "RunOptions",
    "SkillsOpt",
    "StoreOpt",
    "StreamTimeoutOpt",
    "SubSolvesOpt",
    "TimeoutOpt",
    "ToolsOpt",
    "TurnDeadlineOpt",
    "discovery_of",
    "make_planner",
]

PlanArg = Annotated[
    Path, typer.Argument(help="Plan file (JSON); - reads it from stdin.", metavar="PLAN")
]
RunArg = Annotated[
    str | None,
    typer.Argument(metavar="RUN", help="Run id (12 hex digits, or a unique prefix of at least 4)."),
]
ToolsOpt = Annotated[
    str | None,
    typer.Option(
        "--tools",
        "-t",
        metavar="MODULE:ATTR",
        help="Tools: a Registry (or list of tools) as module:attr or path/file.py:attr. "
        "Default: $DAGAGENT_TOOLS, else the bundled demo tools (replan: the tools the run "
        "used).",
    ),
]
McpOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        metavar="NAME=COMMAND|URL",
        help="Tools of an MCP server, named NAME.TOOL: NAME=COMMAND ARGS... starts a server "
        "speaking over stdio, NAME=URL (http/https) reaches one over streamable HTTP "
        "(repeatable). Beside --tools, or instead: with --mcp, the demo tools are left out.",
    ),
]
SkillsOpt = Annotated[
    Path | None,
    typer.Option(
        "--skills",
        metavar="DIR",
        help="Skills: a folder of Markdown files (NAME.md or NAME/SKILL.md), each a procedure "
        "whose one-line summary goes in the planner's and agents' prompts and whose full text "
        "a model reads with the read_skill tool when it needs it.",
    ),
]
StoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--store",
        metavar="PATH",
        help="Run store file. Default: $DAGAGENT_HOME/runs.db, else runs.db in the nearest "
        ".dagagent/ directory here or above, else the per-user store ('dagagent runs' says "
        "which).",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        metavar="FILE",
        help="Write the plan (JSON) to FILE (replan: the revised plan; without a revision, the "
        "run's plan, to edit).",
    ),
]
LastOpt = Annotated[bool, typer.Option("--last", help="The most recent run.")]
ExecutorOpt = Annotated[
    str,
    typer.Option(
        "--executor",
        "-e",
        metavar="|".join(EXECUTORS),
        help=f"When tasks start: {', '.join(EXECUTORS)}.",
    ),
]
DaskAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--dask-address",
        metavar="tcp://HOST:PORT",
        help="With --executor dask: the Dask scheduler to use. Default: a local cluster "
        "started and shut down with the run.",
    ),
]
DaskWorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--dask-workers",
        min=1,
        metavar="N",
        help="With --executor dask: worker processes of the local cluster. Default: as Dask "
        "picks for this machine.",
    ),
]
DaskThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--dask-threads",
        min=1,
        metavar="N",
        help="With --executor dask: tool calls each worker of the local cluster runs at once.",
    ),
]
TemporalAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--temporal-address",
        metavar="HOST:PORT",
        help="With --executor temporal (and for dagagent worker): the Temporal server. "
        "Default: localhost:7233.",
    ),
]
TaskQueueOpt = Annotated[
    str | None,
    typer.Option(
        "--task-queue",
        metavar="NAME",
        help="With --executor temporal (and for dagagent worker): the task queue the workers "
        "serve. Default: dagagent.",
    ),
]
TemporalNamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--temporal-namespace",
        metavar="NAME",
        help="With --executor temporal (and for dagagent worker): the Temporal namespace. "
        "Default: default.",
    ),
]
PayloadStoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--payload-store",
        metavar="DIR",
        help="With --executor temporal (and for dagagent worker): where values too large for "
        "the workflow's history "
        "go (a directory every worker and the driver share). Default: "
        "~/.cache/dagagent/payloads ($DAGAGENT_PAYLOADS).",
    ),
]
#: The environment variable ``--temporal-api-key`` is read from when not given.
TEMPORAL_API_KEY_ENV = "TEMPORAL_API_KEY"
TemporalApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--temporal-api-key",
        envvar=TEMPORAL_API_KEY_ENV,
        show_envvar=True,
        show_default=False,
        metavar="KEY",
        help="With --executor temporal (and for dagagent worker): the API key of the Temporal "
        "server (Temporal Cloud), sent as a bearer token, with TLS. Default: "
        f"${TEMPORAL_API_KEY_ENV}; keep it there (a key on the command line is visible to "
        "the machine's other users). Never shown, logged or recorded.",
    ),
]
TemporalTlsOpt = Annotated[
    bool | None,
    typer.Option(
        "--temporal-tls/--no-temporal-tls",
        show_default=False,
        help="With --executor temporal (and for dagagent worker): reach the Temporal server "
        "over TLS, checking its certificate against the system's root certificates (or "
        "--temporal-tls-ca). Default: TLS when there is an API key, else none.",
    ),
]
TemporalTlsCertOpt = Annotated[
    Path | None,
    typer.Option(
        "--temporal-tls-cert",
        metavar="FILE",
        help="With --executor temporal (and for dagagent worker): the client certificate "
        "(PEM) for mutual TLS, with --temporal-tls-key. Implies --temporal-tls.",
    ),
]
TemporalTlsKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--temporal-tls-key",
        metavar="FILE",
        help="With --executor temporal (and for dagagent worker): the private key (PEM) of "
        "--temporal-tls-cert. Implies --temporal-tls.",
    ),
]
TemporalTlsCaOpt = Annotated[
    Path | None,
    typer.Option(
        "--temporal-tls-ca",
        metavar="FILE",
        help="With --executor temporal (and for dagagent worker): the CA certificate (PEM) the "
        "server's certificate is checked against, instead of the system's. Implies "
        "--temporal-tls.",
    ),
]
OnFailureOpt = Annotated[
    str,
    typer.Option(
        "--on-failure",
        help="cancel: stop the run at the first failure; "
        "continue: run independent branches to the end.",
    ),
]
OtelOpt = Annotated[
    bool,
    typer.Option(
        "--otel",
        help="Send traces and metrics where the standard OTEL_* variables say: "
        "OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER (otlp by default, console, none), "
        "OTEL_EXPORTER_OTLP_ENDPOINT... Needs dagagent[otel].",
    ),
]
MaxConcurrencyOpt = Annotated[
    int | None,
    typer.Option("--max-concurrency", "-j", min=1, help="At most N tasks at once."),
]
MaxElementsOpt = Annotated[
    int,
    typer.Option(
        "--max-elements",
        min=0,
        metavar="N",
        help="The longest list a map task (for_each) may expand; a longer one fails the task.",
    ),
]
ApproveOpt = Annotated[
    bool,
    typer.Option(
        "--approve",
        help="Show the plan and ask before running it (needs a terminal; answering no exits 1).",
    ),
]
AskOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ask",
        metavar="TOOL",
        help="Ask on the terminal before each call of TOOL (glob; repeatable). Without a "
        "terminal, such calls wait for a person (dagagent approve) and the run pauses; "
        "--no-wait denies them.",
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        metavar="FILE",
        help="Approval rules file: JSON (or TOML on Python 3.11+). Checked before --ask; a call "
        "runs only if both allow it.",
    ),
]
NoWaitOpt = Annotated[
    bool,
    typer.Option(
        "--no-wait",
        help="Without a terminal, deny the calls that need approval instead of leaving them "
        "for a person (by default such a task waits and the run pauses: dagagent approvals).",
    ),
]
MaxAttemptsOpt = Annotated[
    int,
    typer.Option(
        "--max-attempts",
        min=1,
        help="Answers to ask the model for before giving up (exit 3); invalid ones are sent "
        "back with their issues.",
    ),
]
MaxToolsOpt = Annotated[
    int,
    typer.Option(
        "--max-tools",
        min=0,
        metavar="N",
        help="Past N tools (several MCP servers, say), the planner, and an agent task without "
        "a tools list, are shown only the N most relevant to the goal (BM25 over names, "
        "descriptions and arguments; the tools the goal names always); agents can search the "
        "rest with find_tools. 0 shows every tool.",
    ),
]
AgentTasksOpt = Annotated[
    bool,
    typer.Option(
        "--agent-tasks",
        help="Allow agent tasks (sub-goals solved by a ReAct agent with the same model).",
    ),
]
NoSchemaOpt = Annotated[
    bool,
    typer.Option(
        "--no-schema",
        help="Send no response format (for servers that reject json_schema); the prompt "
        "still describes the plan format.",
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.1,
        metavar="SECONDS",
        help="How long each model call may wait for the server: to the first byte of an "
        "answer, and between two pieces of a streamed one (a slow local model may need more). "
        "--stream-timeout bounds one streamed answer in all, --deadline the whole command.",
    ),
]
PricesOpt = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        metavar="FILE",
        help="Model prices in US dollars per million tokens, over the built-in table: JSON "
        '{"openai:MODEL": {"input": N, "output": N}} (TOML on Python 3.11+).',
    ),
]
SubSolvesOpt = Annotated[
    bool,
    typer.Option(
        "--sub-solves",
        help='Allow sub-solves: tasks ("solve": true) whose sub-goal gets plan, run and join '
        "rounds of its own, within what the solve's budget and deadline have left; each is "
        "recorded as a solve of its own, under its task ('dagagent show SOLVE').",
    ),
]
MaxTokensTotalOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens-total",
        min=1,
        metavar="N",
        help="Budget: input + output tokens over every model call of the solve. Each call's "
        "worst case is reserved before it is made; one that could cross the budget is not "
        "made, and the joiner answers from what it has (exit 9 without an answer).",
    ),
]
MaxCostOpt = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        metavar="USD",
        help="Budget: US dollars over every model call, at the prices of --prices and the "
        "built-in table (a model without a price cannot be given a cost budget).",
    ),
]
MaxModelCallsOpt = Annotated[
    int | None,
    typer.Option("--max-model-calls", min=1, metavar="N", help="Budget: model calls, every role."),
]
MaxToolCallsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tool-calls",
        min=0,
        metavar="N",
        help="Budget: tool calls (tasks, map elements, agents' calls); past it they are denied.",
    ),
]
TurnDeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        min=0.1,
        metavar="SECONDS",
        help="Each turn's time, model calls and streams included (counted afresh for every "
        "turn): when it passes, what runs is cancelled, what finished is kept and recorded, "
        "and the next line is the next turn (exit 8 at the end).",
    ),
]
DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        min=0.1,
        metavar="SECONDS",
        help="The whole command's time, model calls and streams included: when it passes, "
        "what runs is cancelled, what finished is kept and recorded, and the message says what "
        "was running (exit 8).",
    ),
]
StreamTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--stream-timeout",
        min=0.1,
        metavar="SECONDS",
        help="How long one streamed model answer may last in all, however steadily it "
        f"trickles in. Default: {DEFAULT_STREAM_S:g} s (only the deadline, where --deadline "
        "is given).",
    ),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=1,
        metavar="N",
        help="The most tokens each model call may write (a plan, the joiner's answer, an "
        "agent's turn). Default: each derives its own from what it writes: room for a plan "
        f"of {DEFAULT_MAX_TASKS} tasks of the tools given, an answer of "
        f"{DEFAULT_ANSWER_CHARS:,} characters. Lower it for a small context (a local server "
        "that refuses the request); reasoning models get room to reason on top.",
    ),
]
PlannerPromptOpt = Annotated[
    Path | None,
    typer.Option(
        "--planner-prompt",
        metavar="FILE",
        help="The planner's system prompt, from a UTF-8 text file, instead of the built-in "
        "one; {tools} in it stands for the tool catalog (added at its end when missing).",
    ),
]
ExamplesOpt = Annotated[
    Path | None,
    typer.Option(
        "--examples",
        metavar="FILE",
        help='Few-shot plans shown to the planner: a JSON array of {"goal": "...", "plan": '
        '{"tasks": [...]}}, each a valid plan for the tools (checked first: exit 2).',
    ),
]

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="SPEC",
        help="The model: openai:MODEL (OpenAI or any OpenAI-compatible server: vLLM, Ollama, "
        "...), anthropic:MODEL or gemini:MODEL; several, separated by commas, are fallbacks "
        "in that order "
        "(a call moves on when a model is rate limited, down, unreachable or its context "
        "too short). Keys come from the environment. Default: $DAGAGENT_MODEL.",
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="Server for the model (the first, with fallbacks), e.g. "
        "http://localhost:11434/v1 (Ollama). Default: $DAGAGENT_BASE_URL, else "
        "$OPENAI_BASE_URL / $ANTHROPIC_BASE_URL / $GEMINI_BASE_URL.",
    ),
]


@dataclass(frozen=True)
class ModelChoice:
    """``--model``, ``--base-url``, ``--timeout``, ``--max-tokens``, ``--deadline`` and
    ``--stream-timeout`` as given, turned into a client (and the settings the planners and the
    joiner call it with) once. Three bounds in time, each of its own: ``timeout`` each wait for
    the server (to an answer's first byte, between two pieces of a stream), ``stream_timeout``
    one streamed answer in all, ``deadline`` the whole command. Without ``--stream-timeout``
    a streamed answer has the client's own limit (:data:`~dagagent.limits.DEFAULT_STREAM_S`),
    or none but the deadline when there is one."""

    model: str | None = None
    base_url: str | None = None
    timeout: float = 60.0
    max_tokens: int | None = None
    deadline: float | None = None
    stream_timeout: float | None = None

    @property
    def configured(self) -> bool:
        """A model is named, by ``--model`` or ``$DAGAGENT_MODEL``."""
        return bool(self.model or os.environ.get("DAGAGENT_MODEL", "").strip())

    def settings(self) -> ModelSettings:
        """The client's settings, which the planners and the joiner are given too (their
        ``max_tokens`` is ``--max-tokens``: unset, each derives its own)."""
        from ..llm import ModelSettings

        if self.stream_timeout is not None:
            stream_s: float | None = self.stream_timeout
        elif self.deadline is not None:  # the deadline bounds a streamed answer, not 900 s
            stream_s = None
        else:
            stream_s = DEFAULT_STREAM_S
        return ModelSettings(
            timeout=self.timeout, max_tokens=self.max_tokens, max_stream_s=stream_s
        )

    def require(self) -> None:
        """:class:`~dagagent.errors.ConfigError` when no model is named."""
        if not self.configured:
            raise ConfigError(
                "no model configured: pass --model SPEC (e.g. --model openai:gpt-4o-mini, or "
                "--model openai:llama3.1 --base-url http://localhost:11434/v1) or set "
                "DAGAGENT_MODEL (and DAGAGENT_BASE_URL for a local server)"
            )

    def client(self) -> Any:
        """The client (see :meth:`require`)."""
        from ..llm import from_env

        self.require()
        return from_env(self.model, self.base_url, settings=self.settings())

    def to_record(self, client: Any) -> dict[str, Any]:
        """What a run's record keeps of this choice, for ``resume``: the model's spec, its
        server's URL, the timeout and the stream's (when given); never a key (a URL that
        carries a password is left out: a resume then needs ``--base-url`` again)."""
        kept: dict[str, Any] = {
            "model": (self.model or os.environ.get("DAGAGENT_MODEL", "")).strip(),
            "timeout": self.timeout,
        }
        if self.stream_timeout is not None:
            kept["stream_timeout"] = self.stream_timeout
        url = getattr(client, "base_url", None)
        if isinstance(url, str) and "***@" not in url:  # the client shows a password so
            kept["base_url"] = url
        return kept

    @classmethod
    def recorded(
        cls,
        context: dict[str, Any],
        model: str | None,
        base_url: str | None,
        stream_timeout: float | None = None,
    ) -> ModelChoice:
        """The choice ``resume`` makes: ``--model`` (with ``--base-url``) if given, else the
        model, server and timeout the run was recorded with (``context``: see
        :meth:`to_record`), else the environment's; ``--stream-timeout`` if given, else the
        recorded one."""
        timeout = context.get("timeout")
        timeout = float(timeout) if isinstance(timeout, (int, float)) else 60.0
        if stream_timeout is None:
            kept_stream = context.get("stream_timeout")
            if isinstance(kept_stream, (int, float)) and kept_stream > 0:
                stream_timeout = float(kept_stream)
        if model:
            return cls(model, base_url, timeout, stream_timeout=stream_timeout)
        kept = context.get("model")
        if not isinstance(kept, str) or not kept:
            return cls(None, base_url, timeout, stream_timeout=stream_timeout)
        url = context.get("base_url")
        return cls(
            kept,
            base_url or (url if isinstance(url, str) else None),
            timeout,
            stream_timeout=stream_timeout,
        )

    def client_if_named(self) -> Any:
        """The client, or ``None`` when no model is named (``--base-url`` alone is an error)."""
        if not self.configured:
            if self.base_url is not None:
                raise ConfigError("--base-url needs a model: pass --model or set DAGAGENT_MODEL")
            return None
        return self.client()


def discovery_of(max_tools: int) -> ToolDiscovery:
    """The :class:`~dagagent.tools.ToolDiscovery` of ``--max-tools N``: past N tools, the N
    most relevant; 0, every tool."""
    from ..tools import ToolDiscovery

    return ToolDiscovery(threshold=max_tools or None)


#: The largest planner prompt file read.
MAX_PROMPT_BYTES = 200_000


def make_planner(
    llm: Any,
    registry: Registry,
    *,
    settings: ModelSettings,
    prompt_file: Path | None = None,
    examples_file: Path | None = None,
    **options: Any,
) -> LLMPlanner:
    """The planner of ``plan`` and ``ask``: the built-in prompt, or ``--planner-prompt``'s,
    with ``--examples``' few-shot plans (a :class:`~dagagent.errors.ConfigError` naming the
    file when one cannot be read or used); ``options`` are
    :class:`~dagagent.planners.LLMPlanner`'s."""
    from ..planners import LLMPlanner
    from ..text import read_bounded

    prompt = None
    if prompt_file is not None:
        try:
            prompt = read_bounded(prompt_file, MAX_PROMPT_BYTES, what="planner prompt file")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the planner prompt file {str(prompt_file)!r}: {exc.strerror or exc}"
            ) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(
                f"cannot read the planner prompt file {str(prompt_file)!r}: {exc}"
            ) from None
        if not prompt.strip():
            raise ConfigError(f"the planner prompt file {str(prompt_file)!r} is empty")
    return LLMPlanner(
        llm,
        registry,
        system_prompt=prompt,
        examples=examples_file if examples_file is not None else (),
        settings=settings,
        **options,
    )


@dataclass(frozen=True)
class BudgetOptions:
    """``--max-tokens-total``, ``--max-cost``, ``--max-model-calls``, ``--max-tool-calls``
    and ``--prices`` as given: a :class:`~dagagent.Budget` (``None`` when nothing is
    limited) and the :class:`~dagagent.Prices` calls are costed at."""

    tokens: int | None = None
    cost_usd: float | None = None
    model_calls: int | None = None
    tool_calls: int | None = None
    prices_file: Path | None = None

    def budget(self) -> Any:
        from ..budget import Budget

        if self.cost_usd is not None and self.cost_usd <= 0:
            raise ConfigError(f"--max-cost must be more than 0 dollars, not {self.cost_usd:g}")
        budget = Budget(
            tokens=self.tokens,
            cost_usd=self.cost_usd,
            model_calls=self.model_calls,
            tool_calls=self.tool_calls,
        )
        return budget if budget.limited else None

    def prices(self) -> Any:
        from ..budget import Prices

        return Prices.load(self.prices_file) if self.prices_file is not None else Prices()


@dataclass(frozen=True)
class RunOptions:
    """The options of a command that runs a plan, as given on the command line: built by
    :meth:`of` from the command's parameters, named as the shared options above name them."""

    executor: str = "dataflow"
    on_failure: str = "cancel"
    max_concurrency: int | None = None
    max_elements: int = DEFAULT_MAX_ELEMENTS
    store: Path | None = None
    tools: str | None = None
    mcp: tuple[str, ...] = ()
    skills: Path | None = None
    max_tools: int = DEFAULT_THRESHOLD
    approve: bool = False
    asks: tuple[str, ...] = ()
    policy_file: Path | None = None
    dask_address: str | None = None
    dask_workers: int | None = None
    dask_threads: int | None = None
    temporal_address: str | None = None
    task_queue: str | None = None
    temporal_namespace: str | None = None
    payload_store: Path | None = None
    no_wait: bool = False
    #: ``tls`` and ``api_key`` of the Temporal executor (see :func:`temporal_security`).
    security: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for given, option in (
            (self.dask_address, "--dask-address"),
            (self.dask_workers, "--dask-workers"),
            (self.dask_threads, "--dask-threads"),
        ):
            if given is not None and self.executor != "dask":
                raise ConfigError(f"{option} needs --executor dask")
        temporal: tuple[tuple[object, str], ...] = (
            (self.temporal_address, "--temporal-address"),
            (self.task_queue, "--task-queue"),
            (self.temporal_namespace, "--temporal-namespace"),
            (self.payload_store, "--payload-store"),
        )
        for value, option in temporal:
            if value is not None and self.executor != "temporal":
                raise ConfigError(f"{option} needs --executor temporal")
        if self.dask_address is not None and (
            self.dask_workers is not None or self.dask_threads is not None
        ):
            raise ConfigError(
                "--dask-workers and --dask-threads size the local cluster a run starts; "
                "with --dask-address the scheduler's own workers run the tools"
            )

    @classmethod
    def of(cls, ctx: typer.Context, **overrides: Any) -> RunOptions:
        """The run options among the parameters of the command ``ctx`` runs (``--executor``
        is ``executor``, ``--ask`` is ``asks``...); those it does not take keep their defaults,
        and ``overrides`` (by field name) win."""
        params = ctx.params
        given: dict[str, Any] = {}
        for f in fields(cls):
            name = _PARAMETER.get(f.name, f.name)
            if name in params:
                value = params[name]
                given[f.name] = tuple(value or ()) if f.name in _REPEATABLE else value
        on = {**given, **overrides}.get("executor") == "temporal"
        given["security"] = temporal_security(ctx, temporal=on)
        return cls(**{**given, **overrides})

    @functools.cached_property
    def rules(self) -> ApprovalRules:
        """The approval rules of ``--policy`` (its file read once, here) and ``--ask``."""
        return ApprovalRules.given(self.policy_file, self.asks)

    @property
    def live(self) -> bool:
        """A live display, unless questions may be asked on the terminal during the run."""
        return not (self.asks or self.policy_file)

    def interceptors(self, graph: PlanGraph, registry: Registry) -> list[Interceptor]:
        """The approval interceptors of ``--approve``, ``--ask`` and ``--policy`` (see
        :func:`dagagent.cli.approve.run_interceptors`)."""
        from .approve import run_interceptors

        return run_interceptors(
            graph, registry, approve=self.approve, rules=self.rules, no_wait=self.no_wait
        )

    def settings(self) -> RunSettings:
        """The run settings the options give (a Dask executor made as ``--dask-*`` say)."""
        executor: Any = self.executor
        if self.executor == "dask":
            executor = get_executor(
                "dask",
                address=self.dask_address,
                n_workers=self.dask_workers,
                threads_per_worker=self.dask_threads,
            )
        elif self.executor == "temporal":
            executor = get_executor(
                "temporal",
                **temporal_options(
                    self.temporal_address,
                    self.temporal_namespace,
                    self.task_queue,
                    self.payload_store,
                ),
                **self.security,
            )
        return RunSettings(
            executor=executor,
            on_failure=cast(FailurePolicy, self.on_failure),  # checked by RunSettings
            max_concurrency=self.max_concurrency,
            max_elements=self.max_elements,
            # on Temporal, a call a lost worker left in doubt that nothing decides waits for
            # a person; with --no-wait nobody decides later: it is not made
            in_doubt="deny" if self.no_wait and self.executor == "temporal" else "ask",
        )

    def agent_runner(self) -> dict[str, Any]:
        """``{"agent_runner": ...}`` showing agent tasks ``--max-tools`` tools, when it is not
        the default (empty otherwise: execute's own runner)."""
        if self.max_tools == DEFAULT_THRESHOLD:
            return {}
        from ..agent import make_agent_runner

        return {"agent_runner": make_agent_runner(discovery=discovery_of(self.max_tools))}

    def execute_options(
        self,
        tools_spec: str | None = None,
        mcp: tuple[str, ...] | None = None,
        skills: Path | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments of :func:`~dagagent.cli.recording.run_recorded`: the run's
        settings, the tools recorded with the run (``tools_spec``, ``mcp`` and ``skills``,
        default ``--tools``, ``--mcp`` and ``--skills``), so that ``replan`` loads the same
        tools, and the approval rules (``--policy``'s rules as read, ``--ask``), so that
        ``resume`` asks the same questions."""
        mcp = self.mcp if mcp is None else mcp
        return {
            "settings": self.settings(),
            "tools_spec": recorded_tools_spec(
                self.tools if tools_spec is None else tools_spec, mcp
            ),
            "mcp_specs": mcp,
            "skills_dir": self.skills if skills is None else skills,
            **self.agent_runner(),
            "approval": self.rules.context(),
        }


#: The parameters of the options that say how the Temporal server is reached securely.
_SECURITY = {
    "temporal_tls": "--temporal-tls",
    "temporal_tls_cert": "--temporal-tls-cert",
    "temporal_tls_key": "--temporal-tls-key",
    "temporal_tls_ca": "--temporal-tls-ca",
    "temporal_api_key": "--temporal-api-key",
}


def temporal_security(ctx: typer.Context, *, temporal: bool) -> dict[str, Any]:
    """The Temporal executor's (or worker's) ``tls`` and ``api_key`` from the command's
    ``--temporal-tls*`` and ``--temporal-api-key`` (or ``$TEMPORAL_API_KEY``), those given;
    the certificate files read now. ``temporal``: whether the command runs on Temporal;
    if not, an option given on the command line is a :class:`ConfigError` (a key in the
    environment is not). A file that cannot be read, or a certificate without its key, is
    a :class:`ConfigError` naming the option and the file. The key is never in a message."""
    params = ctx.params
    if not temporal:
        for name, option in _SECURITY.items():
            source = getattr(ctx.get_parameter_source(name), "name", None)
            if params.get(name) is not None and (
                name != "temporal_api_key" or source == "COMMANDLINE"
            ):
                raise ConfigError(f"{option} needs --executor temporal")
        return {}
    found: dict[str, Any] = {}
    api_key = params.get("temporal_api_key")
    if isinstance(api_key, str) and api_key.strip():
        found["api_key"] = api_key.strip()
    pem: dict[str, bytes] = {}
    for name, attr in (
        ("temporal_tls_cert", "client_cert"),
        ("temporal_tls_key", "client_private_key"),
        ("temporal_tls_ca", "server_root_ca_cert"),
    ):
        path = params.get(name)
        if path is None:
            continue
        try:
            pem[attr] = Path(path).expanduser().read_bytes()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise ConfigError(f"{_SECURITY[name]}: cannot read {path}: {why}") from None
    if ("client_cert" in pem) != ("client_private_key" in pem):
        raise ConfigError(
            "--temporal-tls-cert and --temporal-tls-key go together: a client certificate "
            "needs its private key (mutual TLS)"
        )
    if pem and params.get("temporal_tls") is False:
        raise ConfigError(
            "--no-temporal-tls goes against --temporal-tls-cert, --temporal-tls-key and "
            "--temporal-tls-ca, which are for TLS"
        )
    if pem:
        from temporalio.service import TLSConfig

        found["tls"] = TLSConfig(
            server_root_ca_cert=pem.get("server_root_ca_cert"),
            client_cert=pem.get("client_cert"),
            client_private_key=pem.get("client_private_key"),
        )
    elif params.get("temporal_tls") is not None:
        found["tls"] = bool(params["temporal_tls"])
    return found


def temporal_options(
    address: str | None, namespace: str | None, task_queue: str | None, payloads: Path | None
) -> dict[str, Any]:
    """The Temporal executor's (or worker's) keywords from ``--temporal-address``,
    ``--temporal-namespace``, ``--task-queue`` and ``--payload-store`` (those given)."""
    found = {
        "address": address,
        "namespace": namespace,
        "task_queue": task_queue,
        "payloads": payloads,
    }
    return {k: v for k, v in found.items() if v is not None}


#: The fields of :class:`RunOptions` whose option has another parameter name.
_PARAMETER = {"asks": "ask"}
#: The fields of repeatable options (a list, or ``None`` when not given).
_REPEATABLE = frozenset(("mcp", "asks"))
