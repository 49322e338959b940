"""The history of a 100-call solve on Temporal, as the server reports it.

A solve of ``--rounds`` rounds (default 50) makes two model calls a round (the planner's or
replanner's, then the joiner's): 100 calls. Every round's plan writes a long text into its
arguments (``--text`` characters) and runs a tool with a long output (``--output``
characters); the joiner asks for another plan with long feedback (``--text`` characters)
until the last round, where it answers at length. The model is a server on loopback speaking
OpenAI's wire format, called by the workers with the key of their own environment.

The benchmark starts a Temporal development server (``temporal server start-dev``, in memory,
on a free loopback port) and one ``dagagent worker``, runs ``dagagent.solve(...,
RunSettings(executor=TemporalExecutor(...)))`` from this process, and reads from the server
the history of the solve's workflow and of each round's run workflow (their length and size),
next to what the payload store holds (the values that travel by reference instead of in the
histories). Temporal warns at 10 MB of history and terminates a workflow at 50 MB.

Then a **long** solve (``--long-rounds``, default 300; 0 skips it) whose workflow continues
as new whenever its history passes ``--history-events`` (default 1,000): each run of the
solve's workflow (the chain from its first run to its last, as the server has them) keeps
a history of about that many events, however many rounds the solve has.

With ``--turns N`` the solve is the next turn of a conversation (a session's) of ``N``
earlier turns, each with a ``--text``-character question and answer and one
``--output``-character output: the conversation travels to every model step, as its own
payload (kept once by the payload store, whichever steps carry it), and the results go to
``temporal_solve_history_turns.*`` (no long solve then).

    python benchmarks/temporal_solve_history.py
    python benchmarks/temporal_solve_history.py --rounds 5 --turns 20 --output 50000 --write
    python benchmarks/temporal_solve_history.py --rounds 50 --text 20000 --output 100000 \
        --long-rounds 300 --history-events 1000 --write
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
QUEUE = "bench-solve"

registry = dagagent.Registry()


@registry.tool
def big(i: int, n: int) -> str:
    """A long text: ``n`` characters made of ``i``'s digits."""
    return (str(i) * n)[:n]


@registry.tool
def echo(value: Any) -> Any:
    """Return the value."""
    return value


class Model:
    """The scripted model: planner and replanner write round ``k``'s plan, the joiner asks
    for another round until the last one. A threaded HTTP server on 127.0.0.1."""

    def __init__(self, rounds: int, text: int, output: int) -> None:
        self.rounds, self.text, self.output = rounds, text, output
        self.plans = 0
        self.joins = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                fmt = (body.get("response_format") or {}).get("json_schema") or {}
                answer = outer.answer("plan" in fmt.get("name", ""))
                reply = wire.openai_text(answer, input_tokens=1000, output_tokens=len(answer) // 4)
                if body.get("stream"):
                    raw = wire.encode_sse(wire.openai_events(reply, chunk_size=4096))
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                else:
                    raw = json.dumps(reply).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def answer(self, planning: bool) -> str:
        with self.lock:
            if planning:
                self.plans += 1
                k = self.plans
                plan = {
                    "goal": "a long solve",
                    "tasks": [
                        {"id": f"long{k}", "tool": "big", "args": {"i": k, "n": self.output}},
                        {"id": f"note{k}", "tool": "echo", "args": {"value": "n" * self.text}},
                    ],
                }
                return json.dumps(plan)
            self.joins += 1
            if self.joins < self.rounds:
                return json.dumps({"action": "replan", "feedback": "f" * self.text})
            return json.dumps(
                {"action": "finish", "answer": "a" * self.text, "cites": [f"long{self.joins}"]}
            )


def _dir_bytes(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def _stored(payload: Any) -> tuple[bytes, int]:
    """A payload of a history: what it is (its bytes: the reference, for a value in the
    payload store) and the size of the value it stands for."""
    size = payload.external_payloads[0].size_bytes if payload.external_payloads else None
    return payload.SerializeToString(deterministic=True), size or payload.ByteSize()


async def _chain(client: Any, workflow: str) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """Each run of ``workflow``, first to last (its continue-as-new chain): the length and
    size of its history, as the server describes it; and what the runs started with (the
    sizes of each run's arguments: its input, then the earlier runs' steps), what that
    stored (each value once) and the size of the last run's result (every step)."""
    latest = await client.get_workflow_handle(workflow).describe()
    run_id = latest.raw_description.workflow_execution_info.first_run_id
    found = []
    inputs: list[list[int]] = []
    values: dict[bytes, int] = {}
    result = 0
    while run_id:
        handle = client.get_workflow_handle(workflow, run_id=run_id)
        info = (await handle.describe()).raw_description.workflow_execution_info
        found.append((info.history_length, info.history_size_bytes))
        events = (await handle.fetch_history()).events
        started = [
            _stored(p) for p in events[0].workflow_execution_started_event_attributes.input.payloads
        ]
        inputs.append([size for _, size in started])
        values.update(started)
        last = events[-1]
        if last.HasField("workflow_execution_completed_event_attributes"):
            result = sum(
                _stored(p)[1]
                for p in last.workflow_execution_completed_event_attributes.result.payloads
            )
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    carried = {
        "input_bytes": inputs,
        "inputs_stored_bytes": sum(values.values()),
        "steps_bytes": result,
    }
    return found, carried


def _at_least(path: Path, size: float) -> int:
    """How many stored values are at least ``size`` bytes: those that hold the whole
    conversation (the workflow's input, and the argument every model step shares)."""
    return sum(1 for p in path.rglob("*") if p.is_file() and p.stat().st_size >= size)


async def measure(
    address: str,
    payloads: Path,
    *,
    rounds: int,
    text: int,
    output: int,
    history_events: int | None = None,
    turns: int = 0,
) -> dict[str, Any]:
    """One solve of ``rounds`` rounds (the next turn of a conversation of ``turns``), and
    the histories the server has of it."""
    from dagagent.executors.temporal import TemporalExecutor, workflow_id
    from dagagent.planners.conversation import Conversation, Turn
    from dagagent.workflows.temporal_solve import solve_workflow_id
    from dagagent.workflows.temporal_solve._planning import conversation_data

    model = Model(rounds, text, output)
    more = {} if history_events is None else {"history_events": history_events}
    ex = TemporalExecutor(address, task_queue=QUEUE, payloads=payloads, **more)
    stored_before = await asyncio.to_thread(_dir_bytes, payloads)  # a solve before this one's
    conversation = (
        Conversation(
            turns=tuple(
                Turn(k, "q" * text, "a" * text, {f"out{k}": big(k, output)})
                for k in range(1, turns + 1)
            ),
            max_tokens=None,  # no compression: the whole conversation goes to every step
        )
        if turns
        else None
    )
    t0 = time.perf_counter()
    async with OpenAIChat("bench", base_url=model.base_url, api_key="sk-driver") as llm:
        solution = await dagagent.solve(
            "a long solve",
            registry,
            llm,
            settings=RunSettings(executor=ex),
            max_rounds=rounds,
            conversation=conversation,
        )
    took = time.perf_counter() - t0
    if solution.status.value != "answered" or len(solution.calls) != 2 * rounds:
        raise SystemExit(f"the solve did not go as scripted: {solution.reason}")
    async with ex.session():
        assert ex.client is not None
        solve_runs, carried = await _chain(ex.client, solve_workflow_id(solution.solve_id))
        runs = []
        for rnd in solution.rounds:
            assert rnd.run_id is not None
            rd = await ex.client.get_workflow_handle(workflow_id(rnd.run_id)).describe()
            info = rd.raw_description.workflow_execution_info
            runs.append((info.history_length, info.history_size_bytes))
    files, stored = _dir_bytes(payloads)
    size = (
        len(json.dumps(conversation_data(conversation), separators=(",", ":")))
        if conversation is not None
        else 0
    )
    copies = _at_least(payloads, size * 0.9) if size else 0
    texts = sum(c.text_chars for c in solution.calls)
    outputs = sum(
        len(json.dumps(r.output))
        for rnd in solution.rounds
        if rnd.result
        for r in rnd.result.tasks.values()
    )
    return {
        "turns": turns,
        "conversation_chars": size,
        "conversation_copies_stored": copies,
        "rounds": rounds,
        "model_calls": len(solution.calls),
        "text_chars": text,
        "output_chars": output,
        "history_events_option": ex.history_events,
        "wall_s": took,
        "solve_runs": len(solve_runs),
        "solve_run_events": [e for e, _ in solve_runs],
        "solve_run_bytes": [b for _, b in solve_runs],
        "solve_history_events": sum(e for e, _ in solve_runs),
        "solve_history_bytes": sum(b for _, b in solve_runs),
        "solve_run_events_max": max(e for e, _ in solve_runs),
        "solve_run_bytes_max": max(b for _, b in solve_runs),
        # what each run of the solve's workflow started with: the sizes of its arguments
        # (its input, then one per earlier run: that run's steps), the values they stored
        # (each once), and the size of the last run's result (every step of the solve)
        "solve_run_input_bytes": carried["input_bytes"],
        "solve_inputs_stored_bytes": carried["inputs_stored_bytes"],
        "solve_steps_bytes": carried["steps_bytes"],
        "run_histories": len(runs),
        "run_history_bytes_max": max(b for _, b in runs),
        "run_history_bytes_total": sum(b for _, b in runs),
        "model_text_chars_total": texts,
        "tool_output_chars_total": outputs,
        "payload_files": files - stored_before[0],
        "payload_bytes": stored - stored_before[1],
    }


async def measure_both(
    args: argparse.Namespace, address: str, payloads: Path
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    h = await measure(
        address,
        payloads,
        rounds=args.rounds,
        text=args.text,
        output=args.output,
        turns=args.turns,
    )
    if not args.long_rounds or args.turns:
        return h, None
    long = await measure(
        address,
        payloads,
        rounds=args.long_rounds,
        text=args.long_text,
        output=args.long_output,
        history_events=args.history_events,
    )
    return h, long


def run(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any] | None]:
    from temporal_overhead import _free_port, _wait_ready, start_dev_server

    workdir = Path(tempfile.mkdtemp(prefix="temporal-solve-bench-"))
    payloads = workdir / "payloads"
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
                "-m",
                "dagagent",
                "worker",
                "--tools",
                "temporal_solve_history:registry",
                "--temporal-address",
                address,
                "--task-queue",
                QUEUE,
                "--payload-store",
                str(payloads),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        procs.append(worker)
        _wait_ready(worker)
        return asyncio.run(measure_both(args, address, payloads))
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
        description="The history of a 100-call solve on Temporal (long model texts, long "
        "outputs), read from a development server started for the run. Writes "
        "temporal_solve_history.json and .md.",
    )
    parser.add_argument("--rounds", type=int, default=50, help="rounds (two model calls each)")
    parser.add_argument("--text", type=int, default=20_000, help="characters of model texts")
    parser.add_argument("--output", type=int, default=100_000, help="characters of tool outputs")
    parser.add_argument(
        "--long-rounds", type=int, default=300, help="rounds of the long solve (0: none)"
    )
    parser.add_argument(
        "--long-text", type=int, default=2_000, help="characters of the long solve's texts"
    )
    parser.add_argument(
        "--long-output", type=int, default=10_000, help="characters of its tool outputs"
    )
    parser.add_argument(
        "--history-events",
        type=int,
        default=1_000,
        help="the long solve's history_events: the history length at which its workflow "
        "continues as new",
    )
    parser.add_argument(
        "--turns", type=int, default=0, help="earlier turns of the conversation (0: none)"
    )
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    if min(args.rounds, args.text, args.output, args.long_text, args.long_output) < 1:
        parser.error("--rounds, --text, --output, --long-text and --long-output must be >= 1")
    if args.long_rounds < 0 or args.history_events < 100 or args.turns < 0:
        parser.error("--long-rounds and --turns must be at least 0, --history-events at least 100")
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise SystemExit(
            "this benchmark needs Temporal: pip install 'dagagent[temporal]'"
        ) from None
    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    h, long = run(args)
    limit = 10_000_000
    targets = [
        (
            f"a {h['model_calls']}-call solve: its workflow's history under 10 MB",
            h["solve_run_bytes_max"] < limit,
            f"{h['solve_run_bytes_max'] / 1e3:,.0f} kB",
        ),
        (
            "every round's run workflow: its history under 10 MB",
            h["run_history_bytes_max"] < limit,
            f"largest {h['run_history_bytes_max'] / 1e3:,.0f} kB",
        ),
    ]
    headers = ["workflow", "histories", "events", "bytes"]
    rows = _rows(h)
    line = _line(h)
    if long is not None:
        # a run of the solve's workflow ends at the first round boundary past the limit
        per_round = long["solve_history_events"] / long["rounds"]
        inputs = long["solve_run_input_bytes"]
        bound_stored = (
            long["solve_steps_bytes"]
            + long["tool_output_chars_total"]
            + len(inputs) * (inputs[1][0] if len(inputs) > 1 else 0)
        )
        bound = long["history_events_option"] + 2 * per_round
        targets += [
            (
                f"a {long['rounds']}-round solve continues as new: each run of its workflow "
                f"stays near history_events ({long['history_events_option']:,} events)",
                long["solve_runs"] > 1 and long["solve_run_events_max"] <= bound,
                f"{long['solve_runs']} runs, largest {long['solve_run_events_max']:,} events",
            ),
            (
                f"a {long['rounds']}-round solve: each run of its workflow under Temporal's "
                "warnings (10,240 events, 10 MB)",
                long["solve_run_events_max"] < 10_240 and long["solve_run_bytes_max"] < limit,
                f"largest {long['solve_run_events_max']:,} events, "
                f"{long['solve_run_bytes_max'] / 1e3:,.0f} kB",
            ),
            (
                f"a {long['rounds']}-round solve: continuing as new stores each step and output "
                "once (what the runs' inputs store is at most the solve's steps, its outputs "
                "and, for each run, as much as the second run's input)",
                long["solve_inputs_stored_bytes"] <= bound_stored,
                f"{long['solve_inputs_stored_bytes'] / 1e6:.1f} MB, at most "
                f"{bound_stored / 1e6:.1f} MB",
            ),
        ]
    print()
    print(common.text_table(headers, rows))
    print()
    print(line)
    if long is not None:
        print()
        print(common.text_table(headers, _rows(long)))
        print()
        print(_line(long))
        print()
        print(_carried_line(long))
    print()
    for what, ok, got in targets:
        print(f"  {'met   ' if ok else 'MISSED'}  {what}: {got}")
    command = common.command_line()
    title = (
        f"# The history of a turn of a {h['turns'] + 1}-turn conversation on Temporal"
        if h["turns"]
        else "# The history of a 100-call solve on Temporal"
    )
    md = [
        title,
        "",
        f"Command: `{command}`  ",
        f"Machine: {common.machine_line(info)}  ",
        "One Temporal development server (in memory, loopback) and one `dagagent worker`; the "
        "model a loopback server speaking OpenAI's wire format, called by the worker. Every "
        f"round's plan carries a {h['text_chars']:,}-character argument and runs a tool with a "
        f"{h['output_chars']:,}-character output; the joiner's feedback (and its last answer) "
        f"is {h['text_chars']:,} characters. Sizes as the server reports them "
        "(`history_size_bytes` of each workflow's description).",
        "",
        common.markdown_table(headers, rows),
        "",
        "Targets:",
        "",
    ]
    md += [f"- {'met' if ok else '**missed**'}: {what} — {got}" for what, ok, got in targets]
    md += ["", line]
    if long is not None:
        md += [
            "",
            f"## A long solve: {long['rounds']} rounds, continuing as new",
            "",
            f"The same script, {long['rounds']} rounds, with {long['text_chars']:,}-character "
            f"texts and {long['output_chars']:,}-character outputs; `history_events="
            f"{long['history_events_option']:,}`: the solve's workflow continues as new between "
            "two rounds once its history passes that length. Events of each run of the "
            "solve's workflow, first to last: "
            + ", ".join(f"{e:,}" for e in long["solve_run_events"])
            + ".",
            "",
            common.markdown_table(headers, _rows(long)),
            "",
            _line(long),
            "",
            _carried_line(long),
        ]
    data = {
        "benchmark": "temporal_solve_history",
        "command": command,
        "machine": info,
        "options": {k: v for k, v in vars(args).items() if k != "out"},
        "history": h,
        "long": long,
        "targets": [{"target": w, "met": ok, "value": g} for w, ok, g in targets],
    }
    out = common.result_dir(args)
    if out is None:
        print("results not written (pass --write to update benchmarks/results, or --out DIR)")
    else:
        name = "temporal_solve_history_turns" if h["turns"] else "temporal_solve_history"
        for p in common.write_results(out, name, data, "\n".join(md)):
            print(f"wrote {p}")


def _rows(h: dict[str, Any]) -> list[list[Any]]:
    runs = h["solve_runs"]
    return [
        [
            "the solve" + (f" ({runs} runs, continued as new)" if runs > 1 else ""),
            runs,
            f"{h['solve_history_events']:,} (largest run {h['solve_run_events_max']:,})",
            f"{h['solve_history_bytes']:,} (largest run {h['solve_run_bytes_max']:,})",
        ],
        [
            "its rounds' runs",
            h["run_histories"],
            "",
            f"{h['run_history_bytes_total']:,} (largest {h['run_history_bytes_max']:,})",
        ],
    ]


def _line(h: dict[str, Any]) -> str:
    line = (
        f"{h['rounds']} rounds, {h['model_calls']} model calls writing "
        f"{h['model_text_chars_total'] / 1e6:.1f} M characters, tool outputs of "
        f"{h['tool_output_chars_total'] / 1e6:.1f} M characters: the payload store holds "
        f"{h['payload_files']:,} values, {h['payload_bytes'] / 1e6:.1f} MB, each once, that "
        f"travel by reference instead of in the histories. The solve took {h['wall_s']:.1f} s."
    )
    if h["turns"]:
        line += (
            f" The conversation of {h['turns']} earlier turns ({h['conversation_chars']:,} "
            f"characters as it travels) went to each of the {h['model_calls']} model steps; "
            f"the payload store holds it {h['conversation_copies_stored']} times."
        )
    return line


def _carried_line(h: dict[str, Any]) -> str:
    inputs = h["solve_run_input_bytes"]
    return (
        "What each run of the solve's workflow started with, first to last: its input of "
        + ", ".join(f"{sizes[0] / 1e3:,.1f}" for sizes in inputs)
        + " kB, and after it one argument per earlier run, that run's own steps and the "
        "outputs its rounds added ("
        + ", ".join(f"{sizes[-1] / 1e3:,.0f}" for sizes in inputs[1:] if len(sizes) > 1)
        + " kB), passed on by reference. Stored for the runs' inputs, each value once: "
        f"{h['solve_inputs_stored_bytes'] / 1e6:.2f} MB; the solve's steps (its last run's "
        f"result): {h['solve_steps_bytes'] / 1e6:.2f} MB."
    )


if __name__ == "__main__":
    sys.exit(main())
