"""The tests here run on both of anyio's backends, asyncio and trio."""

from __future__ import annotations

import pytest
from backends import BACKENDS, both_backends

# One Temporal development server (and one pair of shared workers) per test process, for the
# tests of the Temporal executor and of solves on Temporal.
from .temporal_fixtures import own_workers, payloads, temporal_server, workers

__all__ = ["own_workers", "payloads", "temporal_server", "workers"]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return both_backends(request)
