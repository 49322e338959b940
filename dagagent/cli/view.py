"""``dagagent ui`` (the web viewer) and ``dagagent report`` (a run as one HTML file). The
pages live in :mod:`dagagent.ui`; this module only parses options and starts the server."""

from __future__ import annotations

import threading
import webbrowser
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import ConfigError
from ._app import app, check_output_path, err, guard, out
from .options import LastOpt, RunArg, StoreOpt
from .runs import find_run

__all__: list[str] = []

_MISSING_UI = (
    "the viewer needs the 'ui' extra (Starlette, uvicorn, Jinja2): pip install \"dagagent[ui]\""
)


def _ui_modules() -> Any:
    try:
        from ..ui import app as ui_app, render
    except ImportError as exc:
        raise ConfigError(f"{_MISSING_UI} ({exc})") from None
    return ui_app, render


def _loopback(address: str) -> bool:
    """Whether the address a socket is bound to is a loopback one (``127.x.y.z``, ``::1``)."""
    import ipaddress

    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _host_names(host: str, address: str) -> tuple[str, ...]:
    """The names a request to the viewer may give in its Host header besides the usual
    loopback ones: the host it was told to listen on and the address it is bound to (an IPv6
    address also in brackets, as a URL writes it)."""
    names = [host, address]
    names += [f"[{n}]" for n in names if ":" in n and not n.startswith("[")]
    return tuple(dict.fromkeys(names))


@app.command("ui")
@guard
def ui_cmd(
    store: StoreOpt = None,
    port: int = typer.Option(8765, "--port", "-p", min=0, max=65535, help="Port (0: any free)."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to listen on. Anything but a loopback address lets other machines "
        "read every recorded run: there is no login.",
    ),
    open_browser: bool = typer.Option(False, "--open", help="Open the viewer in a browser."),
) -> None:
    """Look at recorded runs in a browser: the runs, each run's graph, timeline and task
    details, replans beside their parents; a running run updates live. Read-only."""
    ui_app, _ = _ui_modules()
    import socket  # here: every other command starts without it

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    address = str(sock.getsockname()[0])
    loopback = _loopback(address)  # what it is bound to, not what the name looks like
    if not loopback:
        err.print(
            f"warning: listening on {host}: anyone who can reach this address can read every "
            "run in the store (goals, arguments, outputs); the viewer has no login",
            markup=False,
            highlight=False,
        )
    try:
        web = ui_app.create_app(store, loopback_only=loopback, hosts=_host_names(host, address))
    except BaseException:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    out.print(
        f"dagagent viewer on {url} (store {web.state.store.path}); Ctrl-C to stop",
        markup=False,
        highlight=False,
    )
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    config = uvicorn.Config(web, log_level="warning", lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


ReportOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        metavar="FILE",
        help="The HTML file to write. Default: run-RUN.html in the current directory.",
    ),
]


@app.command("report")
@guard
def report_cmd(
    run: RunArg = None,
    last: LastOpt = False,
    out_file: ReportOutOpt = None,
    store: StoreOpt = None,
) -> None:
    """Write a run's page (graph, timeline, every task's details, the replan it revises) as
    one self-contained HTML file, to open in any browser, mail or attach to a ticket."""
    ui_app, render = _ui_modules()
    from ..store import RunStore

    with RunStore(store, read_only=True) as st:
        record = find_run(st, run, last)
        around = ui_app.run_around(st, record)
        path = st.path
    html = render.render_report(record, around=around, store=str(path))
    target = out_file if out_file is not None else Path(f"run-{record.run_id}.html")
    check_output_path(target, path, "report")
    try:
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {target}: {exc}") from None
    err.print(f"wrote {target}", markup=False, highlight=False)
