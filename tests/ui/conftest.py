"""Fixtures of the viewer's tests: a store with runs of known shape, the viewer served by
uvicorn on a free loopback port, and a headless Chromium (Debian's, never a downloaded one)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from eventually import wait_until

from dagagent.ui.app import create_app
from ui import runs as made

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Store:
    path: Path
    finished: str
    failed: str
    replan: str


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("ui-store") / "runs.db"
    finished = made.record_finished(path)
    failed, replan = made.record_failed_and_replan(path)
    return Store(path, finished, failed, replan)


class Server:
    """The viewer served by uvicorn in a thread, on a socket the test bound."""

    def __init__(self, store: Path | Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.app = create_app(store)
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> Server:
        self.thread.start()
        wait_until(
            lambda: self.server.started,
            "the viewer starts",
            unless=lambda: None if self.thread.is_alive() else "its thread ended",
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[Server]:
    with Server(store.path) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no browser at {CHROMIUM}: .ci/run installs Debian's chromium")
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))
    pg.errors = errors
    try:
        yield pg
    finally:
        context.close()
    assert not errors, errors
