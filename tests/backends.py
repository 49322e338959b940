"""Running a test module on both of anyio's backends, asyncio and trio.

A module (or a directory's ``conftest.py``) that should run on both defines::

    @pytest.fixture(params=BACKENDS)
    def anyio_backend(request: pytest.FixtureRequest) -> Any:
        return both_backends(request)
"""

from __future__ import annotations

from typing import Any

import pytest
from clock import backend

#: The event loops the engine runs on: the tests of the runner, the executors, maps, streamed
#: planning and solve run on each (``BOTH_BACKENDS`` as their ``anyio_backend`` fixture).
BACKENDS = ("asyncio", "trio")


def both_backends(request: pytest.FixtureRequest) -> Any:
    """An ``anyio_backend`` fixture body: each test on asyncio and on trio, except those marked
    ``asyncio_only`` (with the reason), which run on asyncio alone; a test marked
    ``skip_time`` on a clock that skips the waits (clock.py)."""
    name: str = request.param
    if name != "asyncio":
        marker = request.node.get_closest_marker("asyncio_only")
        if marker is not None:
            pytest.skip(f"asyncio only: {marker.args[0] if marker.args else ''}".strip())
        callspec = getattr(request.node, "callspec", None)
        if callspec is not None and callspec.params.get("executor") == "dask":
            pytest.skip("asyncio only: Dask's client runs on asyncio")
    return backend(name, skip_time=request.node.get_closest_marker("skip_time") is not None)
