"""The agent tests' shared tools: ``weather``, ``add``, ``shout``, ``boom`` (always fails) and
``slow``, each call logged in :class:`Calls` (``calls`` fixture)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from backends import BACKENDS, both_backends

from dagagent import Registry


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return both_backends(request)


class Calls:
    """Records tool calls: (name, start, end, args)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float, float, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [c[0] for c in self.log]


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def tools(calls: Calls) -> Registry:
    reg = Registry()

    @reg.tool
    async def weather(city: str, delay: float = 0.0) -> dict[str, Any]:
        """Current weather for a city.

        Args:
            city: City name.
            delay: Seconds to wait before answering.
        """
        t0 = anyio.current_time()
        await anyio.sleep(delay)
        calls.log.append(("weather", t0, anyio.current_time(), {"city": city}))
        return {"city": city, "temp_c": {"Paris": 18, "Tokyo": 24}.get(city, 10)}

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.log.append(("add", 0.0, 0.0, {"a": a, "b": b}))
        return a + b

    @reg.tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        calls.log.append(("shout", 0.0, 0.0, {"text": text}))
        return text.upper()

    @reg.tool
    def boom(reason: str = "no reason") -> str:
        """Always fails."""
        raise RuntimeError(f"exploded: {reason}")

    @reg.tool
    async def slow(seconds: float) -> str:
        """Sleep."""
        calls.log.append(("slow", anyio.current_time(), 0.0, {"seconds": seconds}))
        await anyio.sleep(seconds)
        return "slept"

    return reg
