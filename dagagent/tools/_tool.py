"""A tool from a plain function: its name, description, argument schema and how it is called.

A tool is a sync or async function. Its name is the function name, its description the
docstring's first paragraph, its argument schema comes from the type hints through pydantic,
and per-parameter descriptions come from the docstring (Google ``Args:`` sections, Sphinx
``:param x:`` fields or NumPy ``Parameters`` sections). Arguments are validated and coerced
by pydantic before every call; unknown arguments are rejected. Sync functions run in worker
threads so that they never block the event loop, unless declared ``blocking=False`` (a function
that only computes for a moment): then they are called on the event loop, without the cost of
a thread.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from types import AsyncGeneratorType, GeneratorType
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo
from typing_extensions import Unpack

from ..errors import ToolArgumentsError, ToolDefinitionError
from ..plan import MAX_RETRIES
from ..text import is_secret_name, shorten

if TYPE_CHECKING:
    from ._threads import SyncThreads

__all__ = [
    "GENERATOR_TYPES",
    "Tool",
    "ToolOptions",
    "call_sync",
    "format_validation_errors",
    "materialize_async",
    "tool",
]

F = TypeVar("F", bound=Callable[..., Any])

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into (description, {param: description})."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    params: dict[str, str] = {}
    desc_lines: list[str] = []
    i = 0
    section: str | None = None
    current: str | None = None
    header_re = re.compile(
        r"^(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|"
        r"Examples?|Notes?|See Also|Attributes)\s*:?\s*$"
    )
    sphinx_re = re.compile(r"^:param\s+(?:[^:\s]+\s+)?(\w+)\s*:\s*(.*)$")
    google_re = re.compile(r"^\s{0,8}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
    numpy_re = re.compile(r"^(\w+)\s*(?::.*)?$")
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        m = header_re.match(stripped)
        if m:
            section = m.group(1).lower()
            current = None
            i += 1
            if i < len(lines) and set(lines[i].strip()) == {"-"}:
                i += 1  # numpy underline
            continue
        sm = sphinx_re.match(stripped)
        if sm:
            section, current = "sphinx", sm.group(1)
            params[current] = sm.group(2).strip()
        elif stripped.startswith(":"):
            section, current = "sphinx", None
        elif section in ("args", "arguments", "parameters", "params"):
            indent = len(line) - len(line.lstrip())
            gm = google_re.match(line) if indent <= 8 else None
            nm = numpy_re.match(stripped) if indent == 0 else None
            if gm and (current is None or indent <= _indent_of(lines, current)):
                current = gm.group(1).lstrip("*")
                params[current] = gm.group(2).strip()
            elif nm and stripped:
                current = nm.group(1)
                params[current] = ""
            elif current and stripped:
                params[current] = (params[current] + " " + stripped).strip()
        elif section is None:
            desc_lines.append(line)
        elif section == "sphinx" and current and stripped:
            params[current] = (params[current] + " " + stripped).strip()
        i += 1
    description = "\n".join(desc_lines).strip()
    # Keep the first paragraph only as the short description.
    description = description.split("\n\n")[0].replace("\n", " ").strip()
    return description, params


def _annotations(fn: Callable[..., Any]) -> dict[str, Any]:
    """Evaluated annotations; names local to the defining scope are looked up in the calling
    frames (tools are often defined inside functions under
    ``from __future__ import annotations``)."""
    if not inspect.isfunction(fn):
        return {}
    try:
        return inspect.get_annotations(fn, eval_str=True)
    except NameError:
        frame = inspect.currentframe()
        localns: dict[str, Any] = {}
        depth = 0
        while frame is not None and depth < 8:
            for k, v in frame.f_locals.items():
                localns.setdefault(k, v)
            frame = frame.f_back
            depth += 1
        del frame
        return inspect.get_annotations(fn, eval_str=True, locals=localns)


def _indent_of(lines: list[str], name: str) -> int:
    for line in lines:
        if line.strip().startswith(name):
            return len(line) - len(line.lstrip())
    return 0


class Tool:
    """A callable exposed to plans and agents.

    ``Tool`` objects stay callable like the function they wrap; ``acall`` is the validated,
    async entry point the runner uses.
    """

    #: What a call needs open while the run lasts (an MCP session, say); ``execute`` enters
    #: it around the run, and executors that ship calls elsewhere call the tool in place.
    connection: AbstractAsyncContextManager[Any] | None = None
    #: Whether a failed call may be tried again (a plan's ``retries`` on a tool that is not
    #: retryable is a validation issue).
    retryable: bool = True
    #: JSON schema of the output, when its source declares one (shown to the planner).
    output_schema: dict[str, Any] | None = None

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        retries: int = 0,
        max_concurrency: int | None = None,
        side_effects: bool = False,
        tags: Iterable[str] = (),
        blocking: bool = True,
        max_calls: int | None = None,
        cooldown_s: float | None = None,
    ) -> None:
        self._init_options(
            fn,
            name,
            timeout_s=timeout_s,
            retries=retries,
            max_concurrency=max_concurrency,
            side_effects=side_effects,
            tags=tags,
            blocking=blocking,
            max_calls=max_calls,
            cooldown_s=cooldown_s,
        )
        doc_desc, param_docs = _parse_docstring(inspect.getdoc(fn))
        self.description = description if description is not None else doc_desc
        self._model = self._build_model(fn, param_docs)
        self._fields = tuple(self._model.model_fields)
        self._param_names = frozenset(self._fields)
        # Called once per tool call: the validator itself, without model_validate's wrapper.
        self._validate = self._model.__pydantic_validator__.validate_python
        functools.update_wrapper(self, fn)

    def _init_options(
        self,
        fn: Callable[..., Any],
        name: str | None,
        *,
        timeout_s: float | None,
        retries: int,
        max_concurrency: int | None,
        side_effects: bool,
        tags: Iterable[str],
        blocking: bool = True,
        max_calls: int | None = None,
        cooldown_s: float | None = None,
    ) -> None:
        """Check and set what every kind of tool has (all but its arguments' schema)."""
        if not callable(fn):
            raise ToolDefinitionError(f"tool must be a function, got {type(fn).__name__}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME_RE.match(self.name):
            raise ToolDefinitionError(
                f"tool name {self.name!r} is not valid: use letters, digits, '_', '.', '-' "
                "(at most 64, starting with a letter or '_')"
            )
        if not 0 <= retries <= MAX_RETRIES:
            raise ToolDefinitionError(f"tool {self.name!r}: retries must be 0 to {MAX_RETRIES}")
        if timeout_s is not None and timeout_s <= 0:
            raise ToolDefinitionError(f"tool {self.name!r}: timeout_s must be > 0")
        if max_concurrency is not None and max_concurrency < 1:
            raise ToolDefinitionError(f"tool {self.name!r}: max_concurrency must be >= 1")
        if max_calls is not None and (isinstance(max_calls, bool) or max_calls < 1):
            raise ToolDefinitionError(f"tool {self.name!r}: max_calls must be >= 1")
        if cooldown_s is not None and not cooldown_s > 0:
            raise ToolDefinitionError(f"tool {self.name!r}: cooldown_s must be > 0")
        #: At most this many calls of the tool in a run (in a solve: across its rounds); one
        #: more fails its task with :class:`~dagagent.errors.ToolLimitError`.
        self.max_calls = max_calls
        #: At least this many seconds between the starts of two calls of the tool in a run (or
        #: solve); a call sooner fails its task with :class:`~dagagent.errors.ToolLimitError`.
        self.cooldown_s = cooldown_s
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_concurrency = max_concurrency
        self.side_effects = side_effects
        self.tags = frozenset(tags)
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        #: Whether a call may block (wait on I/O, sleep, compute for long): a sync function
        #: that may runs in a worker thread; one declared ``blocking=False`` is called on the
        #: event loop, as an async function that never awaits would be.
        self.blocking = blocking
        self._inline = not self._is_async and not blocking

    def _build_model(self, fn: Callable[..., Any], docs: Mapping[str, str]) -> type[BaseModel]:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: cannot read signature: {exc}") from None
        try:
            hints = _annotations(fn)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r}: cannot evaluate type hints: {exc}"
            ) from None
        fields: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolDefinitionError(
                    f"tool {self.name!r}: *args / **kwargs parameters cannot be described "
                    f"by a schema ({pname!r}); list the parameters explicitly"
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: positional-only parameter {pname!r} is not supported"
                )
            annotation = hints.get(pname, param.annotation)
            if annotation is inspect.Parameter.empty:
                annotation = Any
            default = param.default
            if isinstance(default, FieldInfo):
                info = default
                if info.description is None and pname in docs:
                    info.description = docs[pname]
            else:
                info = FieldInfo(
                    default=... if default is inspect.Parameter.empty else default,
                    description=docs.get(pname) or None,
                )
            fields[pname] = (annotation, info)
        model_name = re.sub(r"\W", "_", self.name) + "_args"
        try:
            model: type[BaseModel] = create_model(
                model_name,
                __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
                **fields,
            )
            model.model_json_schema()
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r}: its parameters have no JSON schema: {exc}"
            ) from None
        return model

    # -- schema -------------------------------------------------------------------------------

    @functools.cached_property
    def parameters_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments (an object schema, no extra properties)."""
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        schema["additionalProperties"] = False
        return schema

    def spec(self) -> dict[str, Any]:
        """The tool as a model sees it: name, description, parameters."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters_schema,
        }

    @property
    def is_async(self) -> bool:
        return self._is_async

    # -- validation and calls -----------------------------------------------------------------

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and coerce ``args``; raise :class:`ToolArgumentsError` listing every problem."""
        if not self._fields and type(args) is dict and not args:
            return {}  # a tool without parameters, called without arguments
        try:
            m = self._validate(args)
        except ValidationError as exc:
            raise ToolArgumentsError(self.name, format_validation_errors(exc)) from None
        # The model forbids extra keys, so its __dict__ holds exactly the parameters, in
        # order; a fresh instance is dropped here, so its dict can be handed out as is.
        d: dict[str, Any] = m.__dict__
        return d if m is not args else dict(d)

    def check_partial(self, literal: Mapping[str, Any], referenced: Iterable[str]) -> list[str]:
        """Problems with the literal arguments of a plan task, ignoring referenced ones.

        ``referenced`` are argument names whose values come from references: they count as
        present, and their values are checked at run time.
        """
        referenced = set(referenced)
        if not self._fields and not literal and not referenced:
            return []  # a tool without parameters, called without arguments
        problems = [f"{k}: unexpected argument" for k in referenced if k not in self._param_names]
        try:
            self._validate(literal)
        except ValidationError as exc:
            for err in exc.errors():
                loc = err["loc"]
                if loc and loc[0] in referenced:
                    continue
                problems.append(_format_error(err))
        return problems

    async def acall(self, args: Mapping[str, Any]) -> Any:
        """Call with already validated arguments; sync functions run in a worker thread (one of
        :data:`dagagent.tools.sync_threads`, which a cancelled call leaves behind).

        A generator the tool returns (or a generator function's output) is drained into a
        list: an output is data that several references may read, and a run records it."""
        if self._is_async:
            result = await self.fn(**args)
            return await materialize_async(result) if type(result) in GENERATOR_TYPES else result
        if self._inline:  # declared never to block: called here, on the event loop
            result = call_sync(self.fn, args)
        else:
            result = await (_threads or _sync_threads()).run(call_sync, self.fn, args)
        if type(result) is _Raised:
            raise result.exc
        if type(result) is AsyncGeneratorType:
            return await materialize_async(result)
        return result

    async def run(self, args: Mapping[str, Any]) -> Any:
        """Validate then call."""
        return await self.acall(self.validate_args(args))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def __reduce__(self) -> Any:
        return (_rebuild_tool, (self.fn, self._options()))

    def _options(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "timeout_s": self.timeout_s,
            "retries": self.retries,
            "max_concurrency": self.max_concurrency,
            "side_effects": self.side_effects,
            "tags": tuple(self.tags),
            "blocking": self.blocking,
            "max_calls": self.max_calls,
            "cooldown_s": self.cooldown_s,
        }


GENERATOR_TYPES = (GeneratorType, AsyncGeneratorType)


class _Raised:
    """A GeneratorExit a sync tool raised in its worker thread, carried back as a value:
    handed back as an exception, asyncio would throw it into the awaiting coroutine, and a
    thrown GeneratorExit closes every frame of the task on its way out (PEP 380), so no runner
    could catch it and record the task."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_threads: SyncThreads | None = None


def _sync_threads() -> SyncThreads:
    """The process's threads for sync tools, imported on the first call (asyncio and anyio
    are not needed to define or validate tools)."""
    global _threads
    from ._threads import sync_threads

    _threads = sync_threads
    return sync_threads


def call_sync(fn: Callable[..., Any], args: Mapping[str, Any]) -> Any:
    """Call a sync tool function (in a worker thread); drain a generator it returns.

    Two exceptions cannot travel back to the awaiting coroutine as they are: a GeneratorExit
    comes back as a value (see :class:`_Raised`), and a StopIteration, which would end the
    coroutine that receives it as if it had returned, becomes a RuntimeError that says so."""
    try:
        result = fn(**args)
        return list(result) if type(result) is GeneratorType else result
    except GeneratorExit as exc:
        return _Raised(exc)
    except StopIteration as exc:
        raise RuntimeError(f"the tool raised {exc!r}") from exc


async def materialize_async(result: Any) -> Any:
    """A generator or async generator drained into a list; anything else unchanged."""
    if type(result) is AsyncGeneratorType:
        return [item async for item in result]
    if type(result) is GeneratorType:
        return list(result)
    return result


def _rebuild_tool(fn: Callable[..., Any], options: dict[str, Any]) -> Tool:
    return Tool(fn, **options)


def _format_error(err: Any) -> str:
    loc = ".".join(str(p) for p in err["loc"]) or "arguments"
    if err["type"] == "extra_forbidden":
        return f"{loc}: unexpected argument"
    if err["type"] == "missing":
        return f"{loc}: required argument is missing"
    if any(is_secret_name(part) for part in err["loc"]):
        return f"{loc}: {err['msg']} (the value is not shown: the name says it is a secret)"
    inp = err.get("input")
    shown = shorten(repr(inp), 60, one_line=False)
    return f"{loc}: {err['msg']} (got {shown})"


def format_validation_errors(exc: ValidationError) -> list[str]:
    return [_format_error(e) for e in exc.errors()]


class ToolOptions(TypedDict, total=False):
    """The options ``@tool(...)`` and ``@registry.tool(...)`` pass on to :class:`Tool`."""

    name: str | None
    description: str | None
    timeout_s: float | None
    retries: int
    max_concurrency: int | None
    side_effects: bool
    tags: Iterable[str]
    blocking: bool
    max_calls: int | None
    cooldown_s: float | None


@overload
def tool(fn: F, /) -> Tool: ...
@overload
def tool(**options: Unpack[ToolOptions]) -> Callable[[F], Tool]: ...
def tool(fn: Any = None, /, **options: Any) -> Any:
    """Turn a function into a :class:`Tool` (usable bare, ``@tool``, or with options)."""
    if fn is not None:
        return Tool(fn, **options)

    def deco(f: F) -> Tool:
        return Tool(f, **options)

    return deco
