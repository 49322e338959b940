"""The web app: a Starlette application over a run store, opened read-only.

Routes (all ``GET``; no endpoint writes, and the store connection cannot)::

    /                               solves and runs, newest first (?status=, ?limit=)
    /solves/{solve}                 one solve: its rounds, timeline and model calls
    /runs/{run}                     one run (?status=, ?level=N or N-M, ?page= for its table),
                                    with its own model calls; for an id no run has, the
                                    model calls of a plan that was not run
    /runs/{run}/live                the part of the run page a running run refreshes
    /runs/{run}/tasks/{task}        one task's panel
    /static/app.css, /static/app.js the viewer's only stylesheet and script

Why Starlette and uvicorn: a small ASGI toolkit with explicit routing (this table is the
whole app), no framework magic, and both are widely used and well kept.

Every response carries a Content-Security-Policy that allows only the app's own script and
stylesheet, so even a value that escaped escaping could not run. Served on a loopback
address, requests must name a loopback host (a page elsewhere cannot reach the viewer
through DNS rebinding).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import StoreError
from ..store import RunRecord, RunStore, RunSummary
from .render import (
    STATIC,
    Page,
    RunAround,
    level_span,
    render_error,
    render_panel,
    render_run,
    render_runs,
    render_solve,
    render_unrun,
)
from .view import STATUSES, build_view

__all__ = ["LOOPBACK_HOSTS", "answers_of", "create_app", "related_runs", "run_around"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")

#: Where a page that failed is logged, with its traceback (``dagagent ui`` prints it).
_log = logging.getLogger("dagagent.ui")

_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class _SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + _HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _ErrorPages:
    """Any failure of a page becomes the page ``page(path, exc)`` makes (which logs it),
    sent as the response: not a bare 500, nor a connection the server drops."""

    def __init__(self, app: ASGIApp, page: Callable[[str, Exception], Response]) -> None:
        self.app = app
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:  # too late for a page: the server logs it and drops the connection
                raise
            await self.page(str(scope.get("path", "")), exc)(scope, receive, send)


def answers_of(store: RunStore, run_ids: list[str]) -> dict[str, Any]:
    """The answer a solve gave in each of these runs (the run it answered from)."""
    out: dict[str, Any] = {}
    for run_id in run_ids:
        solve = store.solve_of_run(run_id)
        if solve is not None and solve.run_id == run_id and solve.answer is not None:
            out[run_id] = solve.answer
    return out


def run_around(store: RunStore, record: RunRecord) -> RunAround:
    """What the page of ``record`` shows beside it: its parent and children, the answer it
    gave, the calls of it that waited for a person, and what became of its round of a
    solve."""
    parent, children = related_runs(store, record)
    solve = store.solve_of_run(record.run_id)
    answer = None
    note = None
    if solve is not None:
        if solve.run_id == record.run_id and solve.answer is not None:
            answer = solve.answer
        rnd = solve.round_of(record.run_id)
        if rnd is not None:
            note = f"round {rnd.round} of solve {solve.solve_id}: {rnd.outcome}"
            if rnd.reason:
                note += f": {rnd.reason}"
    return RunAround(
        parent=parent,
        children=children,
        answer=answer,
        approvals=store.approval_history(record.run_id),
        round_note=note,
        effects=store.effects(record.run_id),
        calls=[c for c in store.model_calls(run_id=record.run_id) if c.solve_id is None],
        revisions_not_run=store.revisions_not_run(record.run_id),
    )


def related_runs(
    store: RunStore, record: RunRecord, limit: int = 500
) -> tuple[RunRecord | None, list[RunSummary]]:
    """The run ``record`` replans (if still in the store) and the runs that replan it."""
    parent = None
    if record.parent_id is not None:
        with contextlib.suppress(StoreError):
            parent = store.get_run(record.parent_id)
    children = [r for r in store.list_runs(limit) if r.parent_id == record.run_id]
    return parent, children


def _int(q: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be a number") from None


def _level(q: Mapping[str, str]) -> tuple[int, int] | None:
    raw = q.get("level")
    if raw is None or raw == "":
        return None
    try:
        return level_span(raw)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


def _status(q: Mapping[str, str]) -> str | None:
    s = q.get("status") or None
    if s is not None and s not in (*STATUSES, "running", "interrupted", "paused"):
        raise HTTPException(400, "unknown status")
    return s


def create_app(
    store: str | Path | RunStore | None = None,
    *,
    loopback_only: bool = True,
    hosts: Sequence[str] = (),
) -> Starlette:
    """The viewer over the store at ``store`` (default: the usual run store), opened
    read-only. ``loopback_only``: answer only requests addressed to a loopback host, the
    usual names of one or ``hosts`` (the address it listens on, say ``127.0.0.2``)."""
    st = store if isinstance(store, RunStore) else RunStore(store, read_only=True)
    page = Page(mode="app", store=str(st.path))

    def get_run(run: str) -> RunRecord:
        try:
            return st.get_run(run)
        except StoreError as exc:
            raise HTTPException(404, str(exc)) from None

    def runs_page(request: Request) -> Response:
        limit = max(1, min(_int(request.query_params, "limit", 200) or 200, 5000))
        runs = st.list_runs(limit)
        status = request.query_params.get("status") or None
        html = render_runs(
            runs,
            page=page,
            status=status,
            answers=answers_of(st, [r.run_id for r in runs]),
            limit=limit,
            solves=st.list_solves(min(limit, 50)),
            unrun=st.unrun_plans(min(limit, 20)),
        )
        return HTMLResponse(html)

    def solve_page(request: Request) -> Response:
        ref = request.path_params["solve"]
        try:
            solve_id = st.resolve_solve(ref)
            if solve_id is None:
                raise StoreError(f"no solve {ref} in {st.path}")
            record = st.get_solve(solve_id)
        except StoreError as exc:
            raise HTTPException(404, str(exc)) from None
        runs: dict[str, RunRecord] = {}
        for rnd in record.rounds:
            if rnd.run_id is not None:
                with contextlib.suppress(StoreError):
                    runs[rnd.run_id] = st.get_run(rnd.run_id)
        return HTMLResponse(render_solve(record, runs, page=page, now=time.time()))

    def run_page(request: Request) -> Response:
        ref = request.path_params["run"]
        try:
            record = st.get_run(ref)
        except StoreError as exc:
            # No run of that id: the model calls of a plan that was not run, if they have it.
            try:
                unrun = st.resolve_calls(ref)
            except StoreError:
                unrun = None
            if unrun is None:
                raise HTTPException(404, str(exc)) from None
            calls = [c for c in st.model_calls(run_id=unrun) if c.solve_id is None]
            return HTMLResponse(render_unrun(unrun, calls, page=page))
        q = request.query_params
        html = render_run(
            record,
            page=page,
            around=run_around(st, record),
            solve=st.solve_of_run(record.run_id),
            status=_status(q),
            level=_level(q),
            page_no=_int(q, "page", 1) or 1,
        )
        return HTMLResponse(html)

    def live_part(request: Request) -> Response:
        record = get_run(request.path_params["run"])
        q = request.query_params
        html = render_run(
            record,
            page=page,
            around=RunAround(
                approvals=st.approval_history(record.run_id), effects=st.effects(record.run_id)
            ),
            status=_status(q),
            level=_level(q),
            page_no=_int(q, "page", 1) or 1,
            live_only=True,
            now=time.time(),
        )
        return HTMLResponse(html, headers={"X-Run-Status": str(record.status)})

    def task_panel(request: Request) -> Response:
        record = get_run(request.path_params["run"])
        task_id = request.path_params["task"]
        view = build_view(
            record,
            approvals=st.approval_history(record.run_id),
            effects=st.effects(record.run_id),
        )
        if task_id not in view.graph.tasks:
            raise HTTPException(404, f"run {record.run_id} has no task {task_id!r}")
        return HTMLResponse(render_panel(view, task_id, page=page))

    def error_page(code: int, detail: str) -> Response:
        try:
            html = render_error(code, detail, page=page)
        except Exception:  # the templates themselves failed: a page all the same
            from html import escape

            html = f"<!doctype html><title>dagagent</title><h1>{code}</h1><p>{escape(detail)}</p>"
        return HTMLResponse(html, status_code=code)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_page(getattr(exc, "status_code", 500), str(getattr(exc, "detail", "error")))

    def failed(path: str, exc: Exception) -> Response:
        # A bug, or a record the viewer cannot read: a page that says so, never a bare 500;
        # the traceback goes to the server's log.
        _log.error("the viewer could not show %s", path, exc_info=exc)
        what = f"{type(exc).__name__}: {exc}"
        return error_page(
            500,
            f"the viewer could not show {path}: {what}. The server's log has the traceback; "
            "please report it.",
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if not isinstance(store, RunStore):
                st.close()

    middleware = [Middleware(_SecurityHeaders), Middleware(_ErrorPages, page=failed)]
    if loopback_only:
        allowed = list(dict.fromkeys([*LOOPBACK_HOSTS, *hosts]))
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed))
    app = Starlette(
        routes=[
            Route("/", runs_page),
            Route("/solves/{solve}", solve_page),
            Route("/runs/{run}", run_page),
            Route("/runs/{run}/live", live_part),
            Route("/runs/{run}/tasks/{task:path}", task_panel),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ],
        middleware=middleware,
        exception_handlers={HTTPException: not_found},
        lifespan=lifespan,
    )
    app.state.store = st
    return app
