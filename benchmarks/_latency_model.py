"""A loopback OpenAI-compatible model server with a latency model, for ``agent_vs_react.py``.

It answers the questions of one data set (``_datasets.py``) deterministically, in the three
roles a goal-to-answer comparison needs, told apart by the request:

- **ReAct agent** (the request offers tools): the data set's look-ups, one call per turn (or
  all in the first turn with ``parallel=True``), then the answer read from the results;
- **joiner** (its system prompt says so): finishes with the answer read from the results in
  its prompt;
- **planner** (otherwise): a correct plan, streamed a token at a time when asked to stream,
  written as ``--plan-written`` says (``PLAN_WRITTEN``): by default ``lean``, what the
  library's planner prompt asks a model to write (``{"tasks": [...]}``, each task its ``id``,
  ``tool`` and ``args``, optional arguments left out; ``depends_on`` only where no
  reference already orders two tasks, which no scripted plan needs); ``strict``, what
  ``LLMPlanner(..., strict=True)`` makes a model write (every field of every task,
  ``depends_on: []`` and ``for_each: null`` included, and no goal; the data sets' tools have
  no optional argument to write as ``null``); or
  ``llmcompiler``, LLMCompiler's text format, an estimate (the request is still the
  library's JSON prompt and schema). The server records whether each planner request sent
  a strict schema, so a run can check that its request and its written plan agree.

**Latency model**, per call: ``ttft_s`` + ``prefill_s`` per input token before the first
token, then ``per_token_s`` per output token. No prompt caching is modelled.

**Token rule** (one rule for every request and reply, every mode; see ``ACCOUNTING``): a
piece of text is ``ceil(len / 4)`` tokens. A reply costs the text the model writes: its
content, plus, for each tool call, one text: the tool's name and its arguments JSON -- the
call's ``id`` and the ``type``/``function`` envelope of the wire format are added by the API,
not written by the model, so neither side pays for them. A plan is content: its JSON text as
written. A request costs, per message, 3 tokens of framing plus its text (for an earlier tool
call, its name and arguments again), plus every tool definition offered (name, description,
parameters JSON) and the response format's JSON schema when there is one. The server
reports these counts as the call's usage and sleeps for them.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _datasets import Dataset, Question

__all__ = [
    "ACCOUNTING",
    "DEFAULT_PLAN",
    "PLAN_WRITTEN",
    "PRESETS",
    "LatencyModel",
    "ModelServer",
    "Preset",
    "plan_variants",
    "reply_tokens",
    "request_tokens",
    "schema_tokens",
    "text_tokens",
]

CHARS_PER_TOKEN = 4
MESSAGE_FRAMING = 3

ACCOUNTING = (
    "Tokens, one rule for every mode: a text is ceil(characters / 4) tokens. Output: what the "
    "model writes, i.e. its text, and each tool call as one text, the tool's name followed by "
    "its arguments JSON (ReAct's calls), or the plan's text as written (its format is stated "
    "with the run; by default what the planner's prompt asks for: per task id, tool and "
    "args); the call id "
    "and wire envelope an API adds are charged to no one. Input: per message 3 tokens plus "
    "its text (earlier tool calls again as name plus arguments), plus the tool definitions "
    "offered (name, description, parameters JSON) and the JSON schema of the response format "
    "actually sent (the planner's plan schema, non-strict unless the run says strict, and the "
    "joiner's)."
)


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _call_tokens(name: str, arguments: str) -> int:
    """A tool call is one text, its name followed by its arguments JSON, as a plan's task is
    part of the one text of its plan: both rounded up once, so neither side pays the rounding
    of more pieces than the other."""
    return text_tokens(name + arguments)


def request_tokens(body: dict[str, Any]) -> int:
    """The input tokens of a chat request, by the rule of the module docstring."""
    n = 0
    for m in body.get("messages", []):
        n += MESSAGE_FRAMING + text_tokens(_text_of(m))
        for call in m.get("tool_calls") or []:
            f = call.get("function", {})
            n += _call_tokens(str(f.get("name", "")), str(f.get("arguments", "")))
    for t in body.get("tools") or []:
        f = t.get("function", {})
        n += text_tokens(str(f.get("name", ""))) + text_tokens(str(f.get("description", "")))
        n += text_tokens(json.dumps(f.get("parameters", {})))
    return n + schema_tokens(body)


def schema_tokens(body: dict[str, Any]) -> int:
    """The input tokens of a request's response format schema (structured output)."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") != "json_schema":
        return 0
    return text_tokens(json.dumps(fmt.get("json_schema", {}).get("schema", {})))


def reply_tokens(text: str, calls: list[dict[str, Any]]) -> int:
    """The output tokens of a reply: the text written, and each call's name and arguments."""
    n = text_tokens(text)
    for call in calls:
        n += _call_tokens(call["function"]["name"], call["function"]["arguments"])
    return n


@dataclass(frozen=True)
class LatencyModel:
    ttft_s: float = 0.5
    per_token_s: float = 1 / 80
    prefill_s: float = 0.0001

    def scaled(self, factor: float) -> LatencyModel:
        return LatencyModel(
            self.ttft_s * factor, self.per_token_s * factor, self.prefill_s * factor
        )


@dataclass(frozen=True)
class Preset:
    name: str
    model: LatencyModel
    describes: str
    source: str

    def with_overrides(self, **values: float | None) -> Preset:
        given = {k: v for k, v in values.items() if v is not None}
        if not given:
            return self
        return replace(self, name=f"{self.name}+overrides", model=replace(self.model, **given))


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "hosted-fast",
            LatencyModel(ttft_s=0.5, per_token_s=1 / 80, prefill_s=1 / 10_000),
            "a small hosted model (GPT-4o mini class)",
            "time to first token about 0.5 s and about 80 output tokens per second: GPT-4o "
            "mini as measured by Artificial Analysis in 2024; 10,000 input tokens per second "
            "is an assumption",
        ),
        Preset(
            "hosted-slow",
            LatencyModel(ttft_s=1.0, per_token_s=1 / 36, prefill_s=1 / 10_000),
            "a large hosted model (GPT-4 Turbo class, the model of the paper's ParallelQA runs)",
            "36 output tokens per second: gpt-4-turbo-2024-04-09, mean 35.7 tokens/s over 8 "
            "prompts (OpenAI developer forum measurement, May 2024); first token after "
            "0.8-1.2 s (a developer's GPT-4 Turbo benchmark, May 2024; 1.0 s taken); 10,000 "
            "input tokens per second is an assumption",
        ),
        Preset(
            "local",
            LatencyModel(ttft_s=0.05, per_token_s=1 / 20.9, prefill_s=1 / 225),
            "an 8B model on a desktop (Llama 3.1 8B Q4_K_M, llama.cpp with Metal on an Apple M4)",
            "225 prompt tokens per second (pp512 = 224.8) and 20.9 generated tokens per "
            "second (tg128 = 20.87), a llama-bench result for Llama 3.1 8B Q4_K_M on a Mac "
            "mini M4 (normiebench, March 2026); 0.05 s before the prompt is read (no network, "
            "no queue) is an assumption; no prompt cache, and every question in flight is "
            "served at once (a local server would queue them)",
        ),
    )
}


@dataclass
class CallRecord:
    question: str
    role: str  # "react", "planner" or "joiner"
    start: float
    end: float
    input_tokens: int
    output_tokens: int
    schema_tokens: int  # of input_tokens, the response format's schema
    strict: bool | None = None  # the response format's strict flag (None: no schema sent)


PLAN_WRITTEN = {  # --plan-written: what the scripted planner writes
    "lean": "as the planner's prompt asks: per task id, tool and args",
    "strict": "as LLMPlanner(strict=True) makes a model write it: every field of every task",
    "llmcompiler": "in LLMCompiler's text format, an estimate: the request is the library's",
}
DEFAULT_PLAN = "lean"


def plan_variants(dataset: Dataset, q: Question) -> dict[str, str]:
    """The scripted plan of ``q`` in every format of :data:`PLAN_WRITTEN`: ``lean`` as the
    library's planner prompt asks (``{"tasks": [{"id", "tool", "args"}, ...]}``, a task's
    ``depends_on`` kept only when the data set gives one, which none does: references already
    order the tasks), ``strict`` as the strict schema makes a model write it (the same tasks
    with ``depends_on`` and ``for_each`` written out, empty), and ``llmcompiler``
    (``1. search("X")`` ... ``join()<END_OF_PLAN>``)."""
    tasks = dataset.plan_tasks(q)
    strict = [
        {"id": t["id"], "tool": t["tool"], "args": t["args"],
         "depends_on": t.get("depends_on", []), "for_each": None}
        for t in tasks
    ]  # fmt: skip
    numbered = {t["id"]: i for i, t in enumerate(tasks, 1)}

    def compact(value: Any) -> str:
        text = json.dumps(value)
        return re.sub(r"\$\{([^}]+)\}", lambda m: f"${numbered.get(m.group(1), m.group(1))}", text)

    lines = [
        f"{i}. {t['tool']}({', '.join(compact(v) for v in t['args'].values())})"
        for i, t in enumerate(tasks, 1)
    ]
    lines.append(f"{len(tasks) + 1}. join()<END_OF_PLAN>")
    return {
        "lean": json.dumps({"tasks": tasks}),
        "strict": json.dumps({"tasks": strict}),
        "llmcompiler": "\n".join(lines),
    }


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (the benchmark's connections closing) is not news."""


_GOAL = re.compile(r"Goal: (.*?)\n\n(?:Answer with|The plan that ran)", re.S)


class ModelServer:
    """``with ModelServer(dataset, questions, latency) as server: server.base_url``: a
    threaded HTTP server on 127.0.0.1, one thread per request (sleeping for the latency
    model). ``records`` holds one :class:`CallRecord` per answered call."""

    def __init__(
        self,
        dataset: Dataset,
        questions: list[Question],
        latency: LatencyModel,
        *,
        parallel: bool = False,
        plan_written: str = DEFAULT_PLAN,
    ) -> None:
        if plan_written not in PLAN_WRITTEN:
            choices = ", ".join(PLAN_WRITTEN)
            raise ValueError(f"plan_written: one of {choices}, not {plan_written!r}")
        self.dataset = dataset
        self.plan_written = plan_written
        self.questions = questions
        self.by_text = {" ".join(q.text.split()): q for q in questions}
        self.latency = latency
        self.parallel = parallel
        self.records: list[CallRecord] = []
        self._lock = threading.Lock()
        self._server = _Quiet(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def take_records(self) -> list[CallRecord]:
        with self._lock:
            out, self.records = self.records, []
        return out

    # -- answers --------------------------------------------------------------------

    def question_in(self, user: str) -> Question:
        for candidate in (user, *(m.group(1) for m in [_GOAL.search(user)] if m)):
            q = self.by_text.get(" ".join(candidate.split()))
            if q is not None:
                return q
        found = [q for q in self.questions if q.text in user]  # the slow road
        if not found:
            raise LookupError("no known question in the request")
        return max(found, key=lambda q: len(q.text))

    def reply(self, body: dict[str, Any]) -> tuple[Question, str, str, list[dict[str, Any]]]:
        """(question, role, text, tool calls) for a request body."""
        messages: list[dict[str, Any]] = body.get("messages", [])
        system = next((_text_of(m) for m in messages if m.get("role") == "system"), "")
        user = next((_text_of(m) for m in messages if m.get("role") == "user"), "")
        q = self.question_in(user)
        if body.get("tools"):
            results = [_text_of(m) for m in messages if m.get("role") == "tool"]
            text, calls = self.dataset.react_reply(q, results, self.parallel)
            start = len(results)
            return q, "react", text, [_call(start + i, n, a) for i, (n, a) in enumerate(calls)]
        if system.startswith("You are the joiner"):
            tasks = self.dataset.plan_tasks(q)
            ids = (
                [str(i) for i in range(1, len(tasks) + 1)]
                if self.plan_written == "llmcompiler"
                else [t["id"] for t in tasks]
            )
            answer, cites = self.dataset.join_reply(q, user, ids)
            reply = {"action": "finish", "answer": answer, "cites": cites}
            return q, "joiner", json.dumps(reply), []
        return q, "planner", plan_variants(self.dataset, q)[self.plan_written], []

    # -- HTTP -------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                start = time.perf_counter()
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                n_in = request_tokens(body)
                try:
                    q, role, text, calls = outer.reply(body)
                except LookupError as exc:
                    self._json(400, {"error": {"message": str(exc)}})
                    return
                n_out = reply_tokens(text, calls)
                lat = outer.latency
                time.sleep(lat.ttft_s + lat.prefill_s * n_in)
                usage = {"prompt_tokens": n_in, "completion_tokens": n_out}

                def record() -> None:
                    """Kept before the reply's last bytes go out: once the client has them,
                    the benchmark may take the records at any moment."""
                    end = time.perf_counter()
                    fmt = body.get("response_format") or {}
                    strict = (
                        bool(fmt.get("json_schema", {}).get("strict"))
                        if fmt.get("type") == "json_schema"
                        else None
                    )
                    rec = CallRecord(
                        q.id, role, start, end, n_in, n_out, schema_tokens(body), strict
                    )
                    with outer._lock:
                        outer.records.append(rec)

                if body.get("stream"):
                    self._stream(text, calls, usage, lat.per_token_s, record)
                else:
                    time.sleep(lat.per_token_s * n_out)
                    message: dict[str, Any] = {"role": "assistant", "content": text or None}
                    if calls:
                        message["tool_calls"] = calls
                    finish = "tool_calls" if calls else "stop"
                    choice = {"index": 0, "message": message, "finish_reason": finish}
                    record()
                    self._json(200, {"model": "latency-model", "choices": [choice], "usage": usage})

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _event(self, data: Any) -> None:
                text = data if isinstance(data, str) else json.dumps(data)
                chunk = f"data: {text}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()

            def _stream(
                self,
                text: str,
                calls: list[dict[str, Any]],
                usage: dict[str, int],
                per_token_s: float,
                record: Callable[[], None],
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(text), CHARS_PER_TOKEN):
                    piece = text[i : i + CHARS_PER_TOKEN]
                    self._event({"choices": [{"index": 0, "delta": {"content": piece}}]})
                    time.sleep(per_token_s)
                for i, call in enumerate(calls):
                    time.sleep(per_token_s * reply_tokens("", [call]))
                    delta = {"tool_calls": [{"index": i, **call}]}
                    self._event({"choices": [{"index": 0, "delta": delta}]})
                finish = "tool_calls" if calls else "stop"
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                self._event({"choices": [], "usage": usage})
                record()
                self._event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler
