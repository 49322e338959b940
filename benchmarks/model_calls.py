"""Model calls you can see, bound and budget (issue 38): what recording them costs, and the
targets of a deadline and a budget against a model that never finishes.

**Recording overhead.** The ParallelQA questions of ``agent_vs_react.py``, answered by
streamed :func:`dagagent.solve` (the road of ``dagagent ask``) with a run store, against the
same loopback latency-model server (``_latency_model.py``), each question twice in one run:
once with every model call recorded (the solve's observer on each role's client: records,
events, the store's writer thread) and once without (the observer taken off the clients, as
before issue 38), in alternating order. Reported: mean wall time of each and their
difference, and the time spent in the observer itself (measured around its methods), as a
share of the wall time.

**Targets**, each a real ``python -m dagagent ask`` against a loopback server that writes one
token a second and never finishes:

- ``--deadline D``: the process's wall time (target: at most D + 2 s) and the partial text
  the store kept;
- ``--max-tokens-total N``: the tokens the solve used (target: at most N plus one call's
  in-flight reservation).

    python benchmarks/model_calls.py                     # print only
    python benchmarks/model_calls.py --write             # update benchmarks/results
    python benchmarks/model_calls.py --questions 20 --deadline 20 --budget 500
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import _common as common
import _datasets as ds
import _latency_model as lm
import anyio

import dagagent
from dagagent.llm import HTTPRetryPolicy, ModelSettings, OpenAIChat
from dagagent.workflows import _calls

ROOT = Path(__file__).resolve().parents[1]

# -- recording on and off ----------------------------------------------------------------------


class Timed:
    """Seconds spent in the solve's observer (its ``started``, ``wrote``, ``ended``,
    ``rejected``), summed over every call: the recording's own cost on the event loop."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        names = ("started", "wrote", "ended", "rejected")
        originals = {n: getattr(_calls.SolveCalls, n) for n in names}

        def timed(fn: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - t0

            return wrapper

        for n, fn in originals.items():
            setattr(_calls.SolveCalls, n, timed(fn))
        try:
            yield
        finally:
            for n, fn in originals.items():
                setattr(_calls.SolveCalls, n, fn)


@contextlib.contextmanager
def not_recorded() -> Iterator[None]:
    """The solve without its model-call records: no observer on the roles' clients (what a
    solve was before issue 38; benchmark only)."""
    original = _calls.SolveCalls.observer
    _calls.SolveCalls.observer = lambda self, role: None  # type: ignore[assignment,method-assign,return-value]
    try:
        yield
    finally:
        _calls.SolveCalls.observer = original  # type: ignore[method-assign]


PARALLELQA = ds.DATASETS["parallelqa"]


async def solve_one(
    q: ds.Question, base_url: str, registry: dagagent.Registry, store: dagagent.RunStore
) -> dict[str, Any]:
    llm = OpenAIChat(
        "latency-model",
        base_url=base_url,
        api_key="unused",
        settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)),
    )
    t0 = time.perf_counter()
    solution = await dagagent.solve(q.text, registry, llm, store=store)
    return {
        "latency_s": time.perf_counter() - t0,
        "calls": len(solution.calls),
        "right": PARALLELQA.is_right(solution.answer_text if solution.ok else None, q),
    }


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    questions = PARALLELQA.load(args.data_dir, args.questions, args.seed)
    latency = lm.LatencyModel().scaled(args.scale)
    registries = {q.id: PARALLELQA.registry(q, args.seed, args.scale) for q in questions}
    on: list[dict[str, Any]] = []
    off: list[dict[str, Any]] = []
    timer = Timed()
    with (
        tempfile.TemporaryDirectory() as tmp,
        lm.ModelServer(PARALLELQA, questions, latency) as server,
    ):
        store = dagagent.RunStore(Path(tmp) / "runs.db")
        for i, q in enumerate(questions):
            for recorded in (True, False) if i % 2 == 0 else (False, True):
                if recorded:
                    with timer.installed():
                        on.append(anyio.run(solve_one, q, server.base_url, registries[q.id], store))
                else:
                    with not_recorded():
                        off.append(
                            anyio.run(solve_one, q, server.base_url, registries[q.id], store)
                        )
        store.close()
    wall_on = statistics.mean(r["latency_s"] for r in on)
    wall_off = statistics.mean(r["latency_s"] for r in off)
    total_on = sum(r["latency_s"] for r in on)
    return {
        "questions": len(questions),
        "scale": args.scale,
        "model_calls_recorded": sum(r["calls"] for r in on),
        "right_recorded": sum(r["right"] for r in on),
        "right_not_recorded": sum(r["right"] for r in off),
        "mean_s_recorded": wall_on,
        "mean_s_not_recorded": wall_off,
        "difference_pct": 100 * (wall_on - wall_off) / wall_off,
        "observer_s": timer.seconds,
        "observer_pct_of_wall": 100 * timer.seconds / total_on,
    }


# -- the targets ---------------------------------------------------------------------------------


class Trickle(ThreadingHTTPServer):
    """An OpenAI-compatible server writing one token a second, forever."""

    daemon_threads = True

    def __init__(self) -> None:
        self.stop = threading.Event()
        super().__init__(("127.0.0.1", 0), _TrickleHandler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"


class _TrickleHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Trickle

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = 0
        with contextlib.suppress(OSError):
            while not self.server.stop.is_set():
                piece = '{"tasks": [' if n == 0 else ' "word"'
                data = {"choices": [{"index": 0, "delta": {"content": piece}}], "model": "trickle"}
                raw = f"data: {json.dumps(data)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                self.wfile.flush()
                n += 1
                self.server.stop.wait(1.0)


def ask(base_url: str, home: Path, *options: str) -> tuple[float, int, str]:
    """``dagagent ask`` against ``base_url``: its wall time, exit code and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))}
    env["DAGAGENT_HOME"] = str(home)
    argv = [sys.executable, "-m", "dagagent", "ask", "Which is warmer, Paris or Tokyo?"]
    argv += ["--model", "openai:trickle", "--base-url", base_url, *options]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    return time.perf_counter() - t0, proc.returncode, proc.stderr


def calls_of(home: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(home / "runs.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM model_calls ORDER BY seq")]


def targets(args: argparse.Namespace) -> dict[str, Any]:
    server = Trickle()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "deadline"
            wall, code, err = ask(server.base_url, home, "--deadline", str(args.deadline))
            (call,) = calls_of(home)
            deadline = {
                "deadline_s": args.deadline,
                "wall_s": wall,
                "exit_code": code,
                "within_target": wall <= args.deadline + 2,
                "recorded_status": call["status"],
                "recorded_text": call["text"],
                "recorded_output_tokens": call["output_tokens"],
                "message": err.strip().splitlines()[-2] if err.strip() else "",
            }
            home = Path(tmp) / "budget"
            wall, code, err = ask(server.base_url, home, "--max-tokens-total", str(args.budget))
            calls = calls_of(home)
            used = sum(c["input_tokens"] + c["output_tokens"] for c in calls)
            budget = {
                "budget_tokens": args.budget,
                "used_tokens": used,
                "exit_code": code,
                "wall_s": wall,
                "calls": [(c["role"], c["status"]) for c in calls],
                "within_target": used <= args.budget,
                "message": next(
                    (line for line in err.splitlines() if line.startswith("budget exhausted")), ""
                ),
            }
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
    return {"deadline": deadline, "budget": budget}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20, help="ParallelQA questions")
    parser.add_argument("--data-dir", type=Path, default=common.DATA_DIR, help="data folder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scale", type=float, default=0.2, help="multiply every latency")
    parser.add_argument("--deadline", type=float, default=20.0, help="ask --deadline")
    parser.add_argument("--budget", type=int, default=500, help="ask --max-tokens-total")
    parser.add_argument("--skip-targets", action="store_true", help="overhead only")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    data: dict[str, Any] = {"machine": common.machine_info(), "command": common.command_line()}
    data["overhead"] = o = overhead(args)
    lines = [
        "# Model calls: recording overhead and the targets of a deadline and a budget",
        "",
        common.machine_line(data["machine"]),
        "",
        f"`{data['command']}`",
        "",
        "## Recording overhead",
        "",
        common.markdown_table(
            [
                "questions",
                "model calls",
                "mean s recorded",
                "mean s not recorded",
                "difference",
                "observer's own time",
            ],
            [
                [
                    o["questions"],
                    o["model_calls_recorded"],
                    f"{o['mean_s_recorded']:.3f}",
                    f"{o['mean_s_not_recorded']:.3f}",
                    f"{o['difference_pct']:+.1f} %",
                    f"{o['observer_s'] * 1000:.1f} ms ({o['observer_pct_of_wall']:.2f} % of wall)",
                ]
            ],
        ),
    ]
    if not args.skip_targets:
        data["targets"] = t = targets(args)
        d, b = t["deadline"], t["budget"]
        lines += [
            "",
            "## Targets (a model writing one token a second, forever)",
            "",
            common.markdown_table(
                ["command", "result", "target met"],
                [
                    [
                        f"`ask --deadline {d['deadline_s']:g}`",
                        f"exit {d['exit_code']} after {d['wall_s']:.2f} s; the store kept "
                        f"{d['recorded_status']} text {d['recorded_text']!r} "
                        f"({d['recorded_output_tokens']} tokens, estimated)",
                        "yes" if d["within_target"] else "NO",
                    ],
                    [
                        f"`ask --max-tokens-total {b['budget_tokens']}`",
                        f"exit {b['exit_code']}; {b['used_tokens']} tokens used; calls "
                        f"{b['calls']}",
                        "yes" if b["within_target"] else "NO",
                    ],
                ],
            ),
        ]
    markdown = "\n".join(lines)
    print(markdown)
    out = common.result_dir(args)
    if out is not None:
        for path in common.write_results(out, "model_calls", data, markdown):
            print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
