"""Reading a model server's body with its size counted as it is decoded.

httpx decodes a compressed body (``Content-Encoding: gzip``) a chunk at a time, but each
chunk whole: a 2.6 KB answer compressed twice (``gzip, gzip``) inflates to 1.5 GB inside one
chunk, before any cap on what it yields can act. So the clients read the raw bytes and
decode them here, each layer asked for at most the bytes still allowed: no layer ever holds
more than the cap, whatever the server packed. The clients ask for ``gzip, deflate`` only
(:data:`ACCEPT_ENCODING`); a body in another encoding is refused, not guessed at.
"""

from __future__ import annotations

import codecs
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from dagagent.llm.types import closing_stream

__all__ = [
    "ACCEPT_ENCODING",
    "BodyTooLarge",
    "UnsupportedEncoding",
    "decoded_bytes",
    "decoded_text",
]

#: What the clients accept: the encodings they decode with a bound.
ACCEPT_ENCODING = "gzip, deflate"


class BodyTooLarge(Exception):
    """A body that decodes to more than its cap (the bytes decoded so far: ``.size``)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"decodes to more than {size:,} bytes")
        self.size = size


class UnsupportedEncoding(ValueError):
    """A ``Content-Encoding`` the clients did not ask for and do not decode."""


def _layers(response: httpx.Response) -> list[Any]:
    """A decompressor per encoding of the body, the last applied first."""
    names = [
        e.strip().lower()
        for e in response.headers.get("content-encoding", "").split(",")
        if e.strip() and e.strip().lower() != "identity"
    ]
    layers = []
    for name in reversed(names):
        if name in ("gzip", "x-gzip"):
            layers.append(zlib.decompressobj(zlib.MAX_WBITS | 16))
        elif name == "deflate":
            layers.append(zlib.decompressobj(zlib.MAX_WBITS | 32))  # zlib-wrapped or gzip
        else:
            raise UnsupportedEncoding(
                f"the body is encoded as {name!r}, which was not asked for (Accept-Encoding: "
                f"{ACCEPT_ENCODING})"
            )
    return layers


class _Chain:
    """The layers of a body's encoding, each given at most what the cap still allows."""

    def __init__(self, layers: list[Any], limit: int) -> None:
        self.layers = layers
        self.limit = limit
        self.made = [0] * len(layers)  # the bytes each layer gave so far

    def _take(self, i: int, out: bytes, unconsumed: bytes = b"") -> bytes:
        self.made[i] += len(out)
        if unconsumed or self.made[i] > self.limit:
            raise BodyTooLarge(self.limit)
        return out

    def through(self, data: bytes, start: int = 0) -> bytes:
        """``data`` decoded by the layers from ``start`` on."""
        for i in range(start, len(self.layers)):
            layer = self.layers[i]
            room = self.limit + 1 - self.made[i]
            out = layer.decompress(data, room) if room > 0 else b""
            data = self._take(i, out, layer.unconsumed_tail)
        return data

    def flushed(self) -> list[bytes]:
        """What the layers still held at the end of the body, decoded."""
        pieces = []
        for i, layer in enumerate(self.layers):
            room = self.limit + 1 - self.made[i]
            out = self._take(i, layer.flush(room) if room > 0 else b"")
            pieces.append(self.through(out, i + 1))
        return pieces


async def decoded_bytes(response: httpx.Response, limit: int) -> AsyncIterator[bytes]:
    """The body of ``response`` decoded, a chunk at a time, raising :class:`BodyTooLarge`
    as soon as any layer of it would decode to more than ``limit`` bytes (and
    :class:`UnsupportedEncoding` for an encoding not asked for)."""
    if response.is_stream_consumed:  # read already (a response made in memory, say)
        if len(response.content) > limit:
            raise BodyTooLarge(limit)
        if response.content:
            yield response.content
        return
    chain = _Chain(_layers(response), limit)
    total = 0
    async with closing_stream(response.aiter_raw()) as raws:
        async for raw in raws:
            data = chain.through(raw)
            total += len(data)
            if total > limit:
                raise BodyTooLarge(limit)
            if data:
                yield data
    for data in chain.flushed():
        total += len(data)
        if total > limit:
            raise BodyTooLarge(limit)
        if data:
            yield data


async def decoded_text(response: httpx.Response, limit: int) -> AsyncIterator[str]:
    """:func:`decoded_bytes` as text (the response's charset, else UTF-8; bytes that do not
    decode become U+FFFD)."""
    decoder = codecs.getincrementaldecoder(response.charset_encoding or "utf-8")("replace")
    async with closing_stream(decoded_bytes(response, limit)) as chunks:
        async for chunk in chunks:
            text = decoder.decode(chunk)
            if text:
                yield text
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
