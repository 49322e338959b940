"""Time to first tool of a solve on Temporal, streamed against whole plans, next to a local
solve's: of round 1's plan, and of a later round's revised plan.

A scripted model on a loopback server speaking OpenAI's wire format writes a plan at a fixed
pace (``--chunk-delay`` seconds per ``--chunk-size`` characters, streamed or not: a whole
answer is sent once its last piece would have been written): ``--tools`` look-ups, then a
long note. The benchmark starts a Temporal development server (in memory, loopback) and one
``dagagent worker``, and solves the same goal four ways: locally and on Temporal, each with
a streamed plan and with the plan written whole (``stream=False``). Each look-up writes the
time it was entered to a file, so the worker's tools are timed where they run.

The **later round** solves another goal the same four ways: round 1's plan (one look-up,
``kept-topic``) comes at once, the joiner asks for another round, and the revised plan keeps
``kept-topic`` (reused: entering it again stops the benchmark) and adds the look-ups and the note,
at the same pace. Its first tool is the first new look-up, timed from the moment the
replanner's request reached the model.

Reported (best of ``--repeats``, medians in the JSON), from the call of ``dagagent.solve``:

- **first tool**: seconds until the first look-up was entered;
- **answered**: seconds until the solve answered;
- **streamed / whole**: the first tool's time streamed over whole, on each executor, from
  the same run (round 1, and the later round).

    python benchmarks/temporal_streamed_planning.py
    python benchmarks/temporal_streamed_planning.py --tools 8 --chunk-delay 0.02 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import _common as common

import dagagent
from dagagent.llm import OpenAIChat, wire
from dagagent.settings import RunSettings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUEUE = "bench-stream"
#: Where the look-ups write when they were entered (the worker inherits it).
MARKS = "DAGAGENT_BENCH_MARKS"
GOAL = "look things up"
#: The goal of the later-round case, and the look-up its revised plan keeps from round 1.
REVISE_GOAL = "look things up again"
KEPT = "kept-topic"

registry = dagagent.Registry()


@registry.tool
def lookup(topic: str) -> str:
    """Note when it was entered, then return a fact about ``topic``."""
    marks = os.environ.get(MARKS)
    if marks:
        with open(Path(marks) / f"{topic}.{os.getpid()}.{time.time_ns()}", "w"):
            pass
    return f"a fact about {topic}"


@registry.tool
def echo(value: Any) -> Any:
    """Return the value."""
    return value


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that closed its connection (its pool, at the end of a solve)
        super().handle_error(request, client_address)


class Model:
    """The scripted model, on a threaded HTTP server on 127.0.0.1: the plan at a fixed pace,
    then the joiner's answer at once. For :data:`REVISE_GOAL`: round 1's plan (``kept-topic``) at
    once, the joiner's request for another round, then the revised plan (``kept-topic`` and the
    plan's tasks) at the same pace (``revised_at``: when each request for it came)."""

    def __init__(self, tools: int, note: int, chunk_size: int, chunk_delay: float) -> None:
        tasks = [
            *({"id": f"l{i}", "tool": "lookup", "args": {"topic": f"t{i}"}} for i in range(tools)),
            {"id": "note", "tool": "echo", "args": {"value": "n" * note}},
        ]
        kept = {"id": "k", "tool": "lookup", "args": {"topic": KEPT}}
        self.plan = json.dumps({"goal": GOAL, "tasks": tasks})
        self.first = json.dumps({"goal": REVISE_GOAL, "tasks": [kept]})
        self.revised = json.dumps({"goal": REVISE_GOAL, "tasks": [kept, *tasks]})
        finish = {"action": "finish", "answer": "done", "cites": ["l0"]}
        self.finish = json.dumps(finish)
        self.again = json.dumps({"action": "replan", "feedback": "look up the topics too"})
        self.revised_at: list[float] = []
        outer = self

        def answer(body: dict[str, Any], planning: bool) -> tuple[str, bool]:
            """The answer's text, and whether it is written at the plan's pace."""
            said = json.dumps(body.get("messages"))
            if REVISE_GOAL not in said:
                return (outer.plan, True) if planning else (outer.finish, False)
            if not planning:  # round 2's joiner sees the look-ups
                return (outer.finish if "a fact about t0" in said else outer.again), False
            if KEPT not in said:  # round 1's planner
                return outer.first, False
            outer.revised_at.append(time.time())
            return outer.revised, True

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fmt = (body.get("response_format") or {}).get("json_schema") or {}
                text, paced = answer(body, "plan" in fmt.get("name", ""))
                reply = wire.openai_text(text, input_tokens=1000, output_tokens=len(text) // 4)
                pieces = len(text) // chunk_size + 1 if paced else 0
                if not body.get("stream"):  # whole: once the last piece would be written
                    time.sleep(pieces * chunk_delay)
                    raw = json.dumps(reply).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for event in wire.openai_events(reply, chunk_size=chunk_size):
                        if paced:
                            time.sleep(chunk_delay)
                        raw = wire.encode_sse([event])
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the client closed the stream (it had the whole plan)
                    self.close_connection = True

        self.server = _Quiet(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"


def _clear(marks: Path) -> None:
    for old in marks.iterdir():
        old.unlink()


def _first_entered(marks: Path) -> float:
    """When the first look-up but ``kept-topic`` was entered (Unix time), in whichever process ran
    it."""
    return min(
        int(p.name.split(".")[-1]) / 1e9 for p in marks.iterdir() if not p.name.startswith(KEPT)
    )


def _entered(marks: Path, topic: str) -> int:
    """How many times the look-up of ``topic`` was entered."""
    return sum(1 for p in marks.iterdir() if p.name.split(".")[0] == topic)


async def measure(
    args: argparse.Namespace, address: str, payloads: Path, marks: Path
) -> dict[str, dict[str, list[float]]]:
    from dagagent.executors.temporal import TemporalExecutor

    model = Model(args.tools, args.note, args.chunk_size, args.chunk_delay)
    found: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.repeats):
        for goal, case in ((GOAL, ""), (REVISE_GOAL, ", later round")):
            for where in ("local", "temporal"):
                for way in ("streamed", "whole"):
                    _clear(marks)
                    executor: Any = (
                        TemporalExecutor(address, task_queue=QUEUE, payloads=payloads)
                        if where == "temporal"
                        else "dataflow"
                    )
                    name = f"{where} {way}{case}"
                    async with OpenAIChat("gpt-bench", base_url=model.base_url, api_key="k") as llm:
                        began = time.time()
                        solution = await dagagent.solve(
                            goal,
                            registry,
                            llm,
                            settings=RunSettings(executor=executor),
                            stream=way == "streamed",
                        )
                        answered = time.time() - began
                    if solution.status.value != "answered":
                        raise SystemExit(f"{name}: {solution.status.value}: {solution.reason}")
                    if case:  # timed from the replanner's request; what it kept not rerun
                        began = model.revised_at[-1]
                        if len(solution.rounds) != 2 or _entered(marks, KEPT) != 1:
                            raise SystemExit(f"{name}: the kept look-up was not reused once")
                    entered = _first_entered(marks)
                    row = found.setdefault(name, {"first_tool": [], "answered": []})
                    row["first_tool"].append(entered - began)
                    row["answered"].append(answered)
    model.server.shutdown()
    return found


def run(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    from temporal_overhead import _free_port, _wait_ready, start_dev_server

    workdir = Path(tempfile.mkdtemp(prefix="temporal-stream-bench-"))
    payloads, marks = workdir / "payloads", workdir / "marks"
    marks.mkdir()
    os.environ[MARKS] = str(marks)  # this process's look-ups (the local solves) too
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
        "OPENAI_API_KEY": "sk-worker",
    }
    try:
        procs.append(start_dev_server(port))
        worker = subprocess.Popen(
            [
                sys.executable,
                *("-m", "dagagent", "worker", "--tools", "temporal_streamed_planning:registry"),
                *("--temporal-address", address, "--task-queue", QUEUE),
                *("--payload-store", str(payloads)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        procs.append(worker)
        _wait_ready(worker)
        return asyncio.run(measure(args, address, payloads, marks))
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Time to first tool of a solve on Temporal and locally, streamed and with "
        "whole plans, against a development server started for the run. Writes "
        "temporal_streamed_planning.json and .md.",
    )
    parser.add_argument("--tools", type=int, default=4, help="look-ups in the plan")
    parser.add_argument("--note", type=int, default=2_000, help="characters of the last task")
    parser.add_argument("--chunk-size", type=int, default=16, help="characters per piece")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.01, help="seconds the model takes per piece"
    )
    parser.add_argument("--repeats", type=int, default=3, help="solves of each way (min kept)")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    if min(args.tools, args.note, args.chunk_size, args.repeats) < 1 or args.chunk_delay < 0:
        parser.error("--tools, --note, --chunk-size and --repeats must be >= 1")
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise SystemExit(
            "this benchmark needs Temporal: pip install 'dagagent[temporal]'"
        ) from None
    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    found = run(args)
    best = {k: {m: min(v) for m, v in row.items()} for k, row in found.items()}
    medians = {k: {m: common.median(v) for m, v in row.items()} for k, row in found.items()}
    ratios = {
        f"{where}{case}": best[f"{where} streamed{case}"]["first_tool"]
        / best[f"{where} whole{case}"]["first_tool"]
        for case in ("", ", later round")
        for where in ("local", "temporal")
    }
    headers = ["solve", "first tool (s)", "answered (s)"]
    rows = [
        [k, common.fmt(b["first_tool"], 3), common.fmt(b["answered"], 3)] for k, b in best.items()
    ]
    print(common.text_table(headers, rows))
    for where, ratio in ratios.items():
        print(f"{where}: first tool streamed / whole = {ratio:.2f}")
    targets = [
        (
            "on Temporal, a streamed plan's first tool starts before a whole plan's would",
            ratios["temporal"] < 1.0,
            f"streamed / whole = {ratios['temporal']:.2f}",
        ),
        (
            "on Temporal, a later round's streamed revised plan's first tool starts before a "
            "whole revised plan's would",
            ratios["temporal, later round"] < 1.0,
            f"streamed / whole = {ratios['temporal, later round']:.2f}",
        ),
    ]
    common.print_targets(targets)
    data = {
        "machine": info,
        "command": common.command_line(),
        "options": {k: v for k, v in vars(args).items() if k not in ("write", "out", "no_write")},
        "best_s": best,
        "median_s": medians,
        "first_tool_streamed_over_whole": ratios,
        "targets": common.targets_json(targets),
    }
    lines = common.markdown_head(
        "Time to first tool: streamed planning on Temporal", data["command"], info
    )
    lines += ["", common.markdown_table(headers, rows), ""]
    lines += [
        "The later round's first tool is timed from the replanner's request; its answered "
        "time, from the solve's start (both rounds).",
        "",
    ]
    lines += [f"- {w}: first tool streamed / whole = {r:.2f}" for w, r in ratios.items()]
    lines += common.markdown_targets(targets)
    common.save(args, "temporal_streamed_planning", data, "\n".join(lines))


if __name__ == "__main__":
    main()
