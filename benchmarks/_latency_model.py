"""A loopback OpenAI-compatible model server with a latency model, for ``agent_vs_react.py``.

It answers ParallelQA-shaped questions deterministically, in the three roles a goal-to-answer
comparison needs, told apart by the request:

- **ReAct agent** (the request offers tools): one ``search`` call per turn, then one ``math``
  call adding the values it found, then the answer; with ``parallel=True`` every ``search``
  call in the first turn.
- **joiner** (its system prompt says so): finishes with the output of the plan's ``total``
  task, read from the results in the prompt.
- **planner** (otherwise): a correct plan, ``k`` searches and one ``math`` task, as JSON,
  streamed over SSE a token at a time when asked to stream.

Latency model, per call: ``ttft_s`` + ``prefill_s`` per input token before the first token,
then ``per_token_s`` per output token. A token is 4 characters of the request's messages and
tools (input) or of the answer (output), a rough rule for English and JSON; the server reports
those counts as the call's usage.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LatencyModel", "ModelServer", "World"]

CHARS_PER_TOKEN = 4


def tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass(frozen=True)
class LatencyModel:
    ttft_s: float = 0.5
    per_token_s: float = 1 / 80
    prefill_s: float = 0.0001

    def scaled(self, factor: float) -> LatencyModel:
        return LatencyModel(
            self.ttft_s * factor, self.per_token_s * factor, self.prefill_s * factor
        )


class World:
    """Synthetic facts: question ``id`` has ``branch`` facts ``"fact J of question ID"``, each a
    seeded whole number; the right answer is their sum."""

    def __init__(self, questions: list[dict[str, Any]], seed: int) -> None:
        self.by_question: dict[str, dict[str, Any]] = {}
        self.facts: dict[str, int] = {}
        for q in questions:
            rng = random.Random(f"{seed}:{q['id']}")
            names = [f"fact {j} of question {q['id']}" for j in range(1, int(q["branch"]) + 1)]
            for name in names:
                self.facts[name] = rng.randint(100, 9999)
            self.by_question[str(q["question"]).strip()] = {**q, "facts": names}

    def answer(self, q: dict[str, Any]) -> str:
        return str(sum(self.facts[n] for n in q["facts"]))

    def question_in(self, text: str) -> dict[str, Any]:
        for question, q in self.by_question.items():
            if question in text:
                return q
        raise LookupError("no known question in the request")


def plan_for(q: dict[str, Any]) -> str:
    tasks: list[dict[str, Any]] = [
        {"id": f"s{j}", "tool": "search", "args": {"query": name}}
        for j, name in enumerate(q["facts"], 1)
    ]
    expression = " + ".join(f"${{s{j}}}" for j in range(1, len(q["facts"]) + 1))
    tasks.append({"id": "total", "tool": "math", "args": {"expression": expression}})
    return json.dumps({"tasks": tasks})


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (the benchmark's connections closing) is not news."""


class ModelServer:
    """``with ModelServer(world, latency) as server: server.base_url``: a threaded HTTP server
    on 127.0.0.1, one thread per request (sleeping for the latency model)."""

    def __init__(self, world: World, latency: LatencyModel, *, parallel: bool = False) -> None:
        self.world = world
        self.latency = latency
        self.parallel = parallel
        self.calls = 0
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

    # -- answers --------------------------------------------------------------------

    def reply(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """The answer's text and tool calls for a request body."""
        messages: list[dict[str, Any]] = body.get("messages", [])
        system = next((_text_of(m) for m in messages if m.get("role") == "system"), "")
        user = next((_text_of(m) for m in messages if m.get("role") == "user"), "")
        q = self.world.question_in(user)
        if body.get("tools"):
            return self._react(q, messages)
        if system.startswith("You are the joiner"):
            found = re.search(r"^- total: [a-z]+, output: (.+)$", user, re.M)
            answer = found.group(1).strip() if found else "unknown"
            return json.dumps({"action": "finish", "answer": answer, "cites": ["total"]}), []
        return plan_for(q), []

    def _react(
        self, q: dict[str, Any], messages: list[dict[str, Any]]
    ) -> tuple[str, list[dict[str, Any]]]:
        results = [_text_of(m) for m in messages if m.get("role") == "tool"]
        names: list[str] = q["facts"]
        k = len(names)
        if self.parallel and not results:
            return "", [_call(j, "search", {"query": n}) for j, n in enumerate(names)]
        if len(results) < k:
            return "", [_call(len(results), "search", {"query": names[len(results)]})]
        if len(results) == k:
            expression = " + ".join(r.strip() for r in results)
            return "", [_call(k, "math", {"expression": expression})]
        return f"The answer is {results[-1].strip()}.", []

    # -- HTTP -------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw)
                with outer._lock:
                    outer.calls += 1
                prompt = json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))
                n_in = tokens(prompt)
                try:
                    text, calls = outer.reply(body)
                except LookupError as exc:
                    self._json(400, {"error": {"message": str(exc)}})
                    return
                n_out = tokens(text + (json.dumps(calls) if calls else ""))
                lat = outer.latency
                time.sleep(lat.ttft_s + lat.prefill_s * n_in)
                usage = {"prompt_tokens": n_in, "completion_tokens": n_out}
                if body.get("stream"):
                    self._stream(text, calls, usage, lat.per_token_s)
                    return
                time.sleep(lat.per_token_s * n_out)
                message: dict[str, Any] = {"role": "assistant", "content": text or None}
                if calls:
                    message["tool_calls"] = calls
                finish = "tool_calls" if calls else "stop"
                self._json(
                    200,
                    {
                        "model": "latency-model",
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": usage,
                    },
                )

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
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(text), CHARS_PER_TOKEN):
                    piece = text[i : i + CHARS_PER_TOKEN]
                    self._event({"choices": [{"index": 0, "delta": {"content": piece}}]})
                    time.sleep(per_token_s)
                if calls:
                    for i, call in enumerate(calls):
                        delta = {"tool_calls": [{"index": i, **call}]}
                        self._event({"choices": [{"index": 0, "delta": delta}]})
                    time.sleep(per_token_s * tokens(json.dumps(calls)))
                finish = "tool_calls" if calls else "stop"
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                self._event({"choices": [], "usage": usage})
                self._event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler
