"""The tests here run on both of anyio's backends, asyncio and trio."""

from __future__ import annotations

import pytest
from backends import BACKENDS, both_backends


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return both_backends(request)
