"""Tool discovery: which tools of a large registry a model is shown for a goal.

A prompt that lists every tool of a catalogue of hundreds (several MCP servers, say) costs
tokens on every planning call and gives the model more to confuse. Past a threshold
(:attr:`ToolDiscovery.threshold`, 30 tools by default), the planner is shown only the
:attr:`~ToolDiscovery.limit` tools most relevant to the goal (:func:`select_tools`):

- ranked lexically with BM25 (:class:`BM25Index`) over each tool's name (counted three
  times: a name is the densest description of a tool), description, and argument names and
  descriptions; words are split at ``_``, ``-``, ``.`` and camelCase, lower-cased, and
  plural ``s`` endings dropped, so ``listOpenIssues`` matches "open issues";
- or, when the discovery has an ``embed`` function (:data:`Embed`), by the cosine
  similarity of the goal's embedding and each tool's (tool embeddings are computed once
  per text and kept); an embedding call that fails falls back to BM25 for that selection,
  and the record says why.

Some tools are always shown, whatever their rank: those the goal names (a whole word equal
to the tool's name), those a caller keeps (the tools of the plan being revised, so a
replanner can keep its tasks), and ``read_skill`` when the registry has skills. The
selection (:class:`ToolSelection`) says which tools were shown, why, with what score, by
which method and past which threshold; the planner puts it on the record of each planning
call (``options["tool_selection"]``), where ``dagagent show`` reads it.

Agent tasks search the rest with ``find_tools`` (:func:`find_tools_tool`): a tool that
returns the matching tools' names, signatures and descriptions.
"""

from __future__ import annotations

import inspect
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ..errors import ConfigError
from ..events import get_logger
from ._skills import READ_SKILL

if TYPE_CHECKING:
    from ._registry import Registry
    from ._tool import Tool

__all__ = [
    "DEFAULT_THRESHOLD",
    "FIND_TOOLS",
    "BM25Index",
    "Embed",
    "ShownTool",
    "ToolDiscovery",
    "ToolSelection",
    "find_tools_tool",
    "found_names",
    "named_in",
    "select_tools",
    "tokens",
    "tool_text",
]

#: Registries of more tools than this are shown to the planner by relevance.
DEFAULT_THRESHOLD = 30
#: The name of the tool that agent tasks search a large registry with.
FIND_TOOLS = "find_tools"

Embed: TypeAlias = Callable[
    [list[str]], "Sequence[Sequence[float]] | Awaitable[Sequence[Sequence[float]]]"
]
"""An embedding function: a list of texts in, one vector per text out, in order (a plain
function or a coroutine function). All vectors must have the same length."""

Why: TypeAlias = Literal["named", "kept", "skills", "ranked"]

_NAME_WEIGHT = 3
_K1 = 1.2
_B = 0.75
_WORD_RE = re.compile(r"[A-Za-z0-9]+")
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "me",
        "my",
        "do",
        "does",
        "can",
        "could",
        "should",
        "would",
        "please",
        "all",
        "any",
        "some",
        "our",
        "your",
        "their",
        "them",
        "then",
        "than",
        "into",
        "about",
    }
)


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The words BM25 compares: split at non-letters and camelCase, lower-cased, common
    English words left out, plural endings dropped."""
    out: list[str] = []
    for chunk in _WORD_RE.findall(text):
        for part in _CAMEL_RE.findall(chunk) or [chunk]:
            word = part.lower()
            if word not in _STOPWORDS:
                out.append(_stem(word))
    return out


def _arg_docs(tool: Tool) -> list[str]:
    props = tool.parameters_schema.get("properties", {})
    parts: list[str] = []
    if isinstance(props, dict):
        for name, sub in props.items():
            parts.append(str(name))
            if isinstance(sub, dict) and sub.get("description"):
                parts.append(str(sub["description"]))
    return parts


def tool_text(tool: Tool) -> str:
    """What a tool is ranked by: its name, description, and argument names and notes."""
    return "\n".join([tool.name, tool.description or "", *_arg_docs(tool)])


def _terms(tool: Tool) -> Counter[str]:
    counts: Counter[str] = Counter()
    for word in tokens(tool.name):
        counts[word] += _NAME_WEIGHT
    counts.update(tokens(tool.description or ""))
    counts.update(tokens(" ".join(_arg_docs(tool))))
    return counts


class BM25Index:
    """A BM25 index (k1 1.2, b 0.75) over ``tools``: :meth:`scores` of a query for each.

    IDF is ``ln(1 + (N - df + 0.5) / (df + 0.5))``, never negative, so a word every tool
    has still counts a little."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self.names: list[str] = []
        self._docs: list[Counter[str]] = []
        for t in tools:
            self.names.append(t.name)
            self._docs.append(_terms(t))
        self._lengths = [sum(d.values()) for d in self._docs]
        n = len(self._docs)
        self._avg = (sum(self._lengths) / n) if n else 0.0
        df: Counter[str] = Counter()
        for d in self._docs:
            df.update(d.keys())
        self._idf = {w: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> dict[str, float]:
        """Each tool's score for ``query`` (0.0: no word in common)."""
        words = Counter(w for w in tokens(query) if w in self._idf)
        out: dict[str, float] = {}
        for name, doc, length in zip(self.names, self._docs, self._lengths, strict=True):
            score = 0.0
            norm = _K1 * (1.0 - _B + _B * length / self._avg) if self._avg else _K1
            for word, q in words.items():
                tf = doc.get(word, 0)
                if tf:
                    score += q * self._idf[word] * tf * (_K1 + 1.0) / (tf + norm)
            out[name] = score
        return out

    def rank(self, query: str, limit: int | None = None) -> list[tuple[str, float]]:
        """Tools by descending score (ties in registry order); only those scoring above 0."""
        scored = [(n, s) for n, s in self.scores(query).items() if s > 0.0]
        scored.sort(key=lambda item: -item[1])  # stable: ties keep the registry's order
        return scored[:limit] if limit is not None else scored


def named_in(goal: str, names: Iterable[str]) -> list[str]:
    """The ``names`` that appear in ``goal`` as whole words (``get_weather``, not
    ``get_weather_now``), in the order given."""
    found = []
    for name in names:
        if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", goal):
            found.append(name)
    return found


@dataclass(frozen=True)
class ShownTool:
    """A tool shown to the model: its ``name``, ``why`` (``named`` in the goal, ``kept`` by
    the caller, ``skills``: ``read_skill``, or ``ranked``) and ``score`` (the ranking's;
    ``None`` for a tool kept unranked)."""

    name: str
    why: Why
    score: float | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "why": self.why}
        if self.score is not None:
            out["score"] = round(self.score, 4)
        return out


@dataclass(frozen=True)
class ToolSelection:
    """Which tools a model was shown out of a registry of ``total``, how they were chosen
    (``method``: ``bm25`` or ``embedding``), past what ``threshold``, and ``note``: why the
    method is not the one asked for (an embedding call that failed), if so."""

    shown: tuple[ShownTool, ...]
    method: Literal["bm25", "embedding"]
    threshold: int
    limit: int
    total: int
    note: str = ""

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.shown]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "threshold": self.threshold,
            "limit": self.limit,
            "total": self.total,
            "shown": [s.as_json() for s in self.shown],
        }
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class ToolDiscovery:
    """How a large registry is shown to a model (see the module docstring).

    - ``threshold``: registries of more tools than this are shown by relevance (``None``:
      never; every tool is always shown).
    - ``limit``: how many tools are shown then (default: ``threshold``), besides those the
      goal names and those a caller keeps.
    - ``embed``: an :data:`Embed` function; without one, BM25 ranks.
    """

    threshold: int | None = DEFAULT_THRESHOLD
    limit: int | None = None
    embed: Embed | None = field(default=None, compare=False)
    #: The tools' embeddings, by text: computed once for this discovery's ``embed``.
    _vectors: dict[str, list[float]] = field(
        default_factory=dict, compare=False, repr=False, init=False
    )

    def __post_init__(self) -> None:
        for what, value in (("threshold", self.threshold), ("limit", self.limit)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(
                    f"tool discovery's {what} must be a whole number >= 1, not {value!r}"
                )
        if self.embed is not None and not callable(self.embed):
            raise ConfigError("tool discovery's embed must be a function: texts in, vectors out")

    @property
    def shown(self) -> int:
        """How many ranked tools are shown past the threshold."""
        return self.limit if self.limit is not None else (self.threshold or DEFAULT_THRESHOLD)

    def applies(self, registry: Registry) -> bool:
        """Whether ``registry`` is large enough to be shown by relevance."""
        return self.threshold is not None and len(registry) > self.threshold


async def _embed(embed: Embed, texts: list[str]) -> list[list[float]]:
    got = embed(list(texts))
    if inspect.isawaitable(got):
        got = await got
    vectors = [list(map(float, v)) for v in got]
    if len(vectors) != len(texts):
        raise ConfigError(
            f"the embed function returned {len(vectors)} vectors for {len(texts)} texts"
        )
    sizes = {len(v) for v in vectors}
    if len(sizes) > 1 or 0 in sizes:
        raise ConfigError(f"the embed function returned vectors of lengths {sorted(sizes)}")
    return vectors


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        raise ConfigError(f"the embed function returned vectors of lengths {len(a)} and {len(b)}")
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


async def _embedding_scores(
    discovery: ToolDiscovery, registry: Registry, query: str
) -> dict[str, float]:
    assert discovery.embed is not None
    tools = list(registry)
    texts = [tool_text(t) for t in tools]
    kept = discovery._vectors
    missing = [t for t in dict.fromkeys(texts) if t not in kept]
    if missing:
        if len(kept) > 50_000:  # a registry that keeps changing: start again
            kept.clear()
        for text, vector in zip(missing, await _embed(discovery.embed, missing), strict=True):
            kept[text] = vector
    vectors = [kept[t] for t in texts]
    (goal_vector,) = await _embed(discovery.embed, [query])
    return {t.name: _cosine(goal_vector, v) for t, v in zip(tools, vectors, strict=True)}


async def select_tools(
    registry: Registry,
    goal: str,
    discovery: ToolDiscovery | None = None,
    *,
    keep: Iterable[str] = (),
) -> ToolSelection | None:
    """The tools of ``registry`` to show a model for ``goal`` (see the module docstring), or
    ``None`` when every tool is shown (a registry no larger than the threshold). ``keep``:
    tools always shown (names the registry does not have are ignored)."""
    discovery = discovery if discovery is not None else ToolDiscovery()
    if not discovery.applies(registry):
        return None
    assert discovery.threshold is not None
    chosen: dict[str, ShownTool] = {}
    for name in named_in(goal, registry.names):
        chosen[name] = ShownTool(name, "named")
    for name in keep:
        if name in registry and name not in chosen:
            chosen[name] = ShownTool(name, "kept")
    if registry.skills and READ_SKILL in registry and READ_SKILL not in chosen:
        chosen[READ_SKILL] = ShownTool(READ_SKILL, "skills")
    method: Literal["bm25", "embedding"] = "bm25"
    note = ""
    scores: dict[str, float] | None = None
    if discovery.embed is not None:
        try:
            scores = await _embedding_scores(discovery, registry, goal)
            method = "embedding"
        except ConfigError:  # the function broke its contract: the caller's to fix
            raise
        except Exception as exc:  # the embedding service: BM25 still ranks
            note = f"the embed function failed ({type(exc).__name__}: {exc}); ranked by BM25"
            get_logger().warning("tools.embed_failed", error=str(exc))
    if scores is None:
        scores = BM25Index(registry).scores(goal)
    for name, shown in list(chosen.items()):
        chosen[name] = ShownTool(name, shown.why, scores.get(name))
    ranked = sorted(
        (n for n in registry.names if n not in chosen), key=lambda n: -scores.get(n, 0.0)
    )
    for name in ranked[: discovery.shown]:
        chosen[name] = ShownTool(name, "ranked", scores.get(name, 0.0))
    order = {n: i for i, n in enumerate(registry.names)}
    return ToolSelection(
        shown=tuple(sorted(chosen.values(), key=lambda s: order[s.name])),
        method=method,
        threshold=discovery.threshold,
        limit=discovery.shown,
        total=len(registry),
        note=note,
    )


def _entry(tool: Tool, score: float) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description or "",
        "parameters": tool.parameters_schema,
        "score": round(score, 4),
    }


def find_tools_tool(registry: Registry, *, limit: int = 8) -> Tool:
    """A ``find_tools(query)`` tool over ``registry``: the ``limit`` best matches (BM25) for
    ``query``, each ``{"name", "description", "parameters", "score"}``; an empty list when
    nothing matches."""
    from ._tool import Tool

    index_of: dict[tuple[int, ...], BM25Index] = {}

    def index() -> BM25Index:
        key = tuple(id(t) for t in registry)
        if key not in index_of:
            index_of.clear()
            index_of[key] = BM25Index(t for t in registry if t.name != FIND_TOOLS)
        return index_of[key]

    async def find_tools(query: str) -> list[dict[str, Any]]:
        """Search the tool catalogue: the tools that best match what you need to do, each
        with its name, description and argument schema. Tools found can be called at once.

        Args:
            query: Words describing the tool you need, e.g. "open issues of a repository".
        """
        if not query.strip():
            raise ValueError("the query is empty: describe the tool you need")
        return [_entry(registry.get(n), s) for n, s in index().rank(query, limit)]

    return Tool(find_tools, tags=("discovery",))


def found_names(query: str, registry: Registry, *, limit: int = 8) -> list[str]:
    """The names :func:`find_tools_tool` returns for ``query`` (BM25 is deterministic)."""
    index = BM25Index(t for t in registry if t.name != FIND_TOOLS)
    return [n for n, _ in index.rank(query, limit)]
