"""Small helpers for writing tools: deterministic simulated latency."""

from __future__ import annotations

import hashlib

import anyio

__all__ = ["Latency"]


class Latency:
    """Seeded, deterministic latency: the same key always waits the same time."""

    def __init__(self, scale: float = 1.0, seed: str = "dagagent") -> None:
        self.scale = scale
        self.seed = seed

    def of(self, key: str, low: float, high: float) -> float:
        h = hashlib.blake2b(f"{self.seed}:{key}".encode(), digest_size=8).digest()
        frac = int.from_bytes(h, "big") / 2**64
        return (low + (high - low) * frac) * self.scale

    async def sleep(self, key: str, low: float, high: float) -> None:
        d = self.of(key, low, high)
        if d > 0:
            await anyio.sleep(d)
