"""What travels through Temporal, and where large values go instead of its history.

Everything the workflow and its activities exchange (the plan, the outputs a task needs, the
results) is JSON through pydantic's converter. Every payload larger than
:data:`DEFAULT_INLINE_BYTES` is written to a **payload store** and the history keeps a
reference of about a hundred bytes in its place (Temporal's own external storage, with a
driver of ours): a 100-call run with long outputs keeps a history of a few hundred kilobytes
where it would otherwise grow by every output, every plan copy and every result it carries.

:class:`DirectoryPayloads` stores each payload once, by the SHA-256 of its bytes, as a file
under a directory that every worker and the driver can read (one machine: the default under
the user's cache directory; several: a shared file system). Any other
:class:`temporalio.converter.StorageDriver` (Temporal ships drivers for S3 and Google Cloud
Storage) may be given instead.

A value many activities of a run need (a wide map's reuse: its elements' earlier outputs)
goes to the store once, by the driver (:func:`stored`), and the workflow hands each
activity the reference alone, which its worker reads (:func:`fetched`): the workflow never
writes the value out again, however many activities need it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from ...errors import ConfigError

__all__ = [
    "DEFAULT_INLINE_BYTES",
    "DirectoryPayloads",
    "data_converter",
    "default_payload_dir",
    "fetched",
    "payload_driver",
    "stored",
]

#: Payloads up to this size stay in the workflow's history; larger ones go to the store.
DEFAULT_INLINE_BYTES = 2048


def default_payload_dir() -> Path:
    """``$DAGAGENT_PAYLOADS``, else ``dagagent/payloads`` under the user's cache directory
    (``$XDG_CACHE_HOME``, else ``~/.cache``): the same for every process of one user on one
    machine."""
    given = os.environ.get("DAGAGENT_PAYLOADS")
    if given:
        return Path(given).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dagagent" / "payloads"


class DirectoryPayloads(StorageDriver):
    """Payloads as files under ``root``, each stored once by the SHA-256 of its bytes (a
    payload already there is not written again: a value many tasks read is stored once).

    A payload never changes once stored (its name is its hash), so the driver remembers
    which it has written or read and keeps the most recent ones (up to ``cache_bytes``) in
    memory: a value many activities read (an output several tasks depend on, a turn's
    conversation) costs one write and one read per process, not one per activity."""

    def __init__(self, root: str | Path, *, cache_bytes: int = 32 * 1024 * 1024) -> None:
        self.root = Path(root).expanduser()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"the payload store {self.root} cannot be created: {exc.strerror or exc}"
            ) from None
        self.cache_bytes = cache_bytes
        self._stored: set[str] = set()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0

    def name(self) -> str:
        return "dagagent-directory"

    def __repr__(self) -> str:
        return f"DirectoryPayloads({str(self.root)!r})"

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _remember(self, digest: str, blob: bytes) -> None:
        self._stored.add(digest)
        if len(blob) > self.cache_bytes or digest in self._cache:
            return
        self._cache[digest] = blob
        self._cached += len(blob)
        while self._cached > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cached -= len(old)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        blobs = [p.SerializeToString(deterministic=True) for p in payloads]
        digests = [hashlib.sha256(b).hexdigest() for b in blobs]
        new = [(d, b) for d, b in zip(digests, blobs, strict=True) if d not in self._stored]
        if new:
            await anyio.to_thread.run_sync(self._write, new)
            for digest, blob in new:
                self._remember(digest, blob)
        return [StorageDriverClaim({"sha256": d}) for d in digests]

    def _write(self, blobs: list[tuple[str, bytes]]) -> None:
        for digest, blob in blobs:
            path = self._path(digest)
            if path.exists():
                continue
            path.parent.mkdir(exist_ok=True)
            # written whole under another name, then renamed: a reader never sees a part
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        digests = [c.claim_data["sha256"] for c in claims]
        blobs: dict[str, bytes] = {}
        for digest in digests:
            if digest in self._cache:
                blobs[digest] = self._cache[digest]
                self._cache.move_to_end(digest)  # recently used: kept longest
        missing = [d for d in dict.fromkeys(digests) if d not in blobs]
        if missing:
            read = await anyio.to_thread.run_sync(self._load, missing)
            for digest, blob in zip(missing, read, strict=True):
                blobs[digest] = blob
                self._remember(digest, blob)
        return [Payload.FromString(blobs[d]) for d in digests]

    def _load(self, digests: list[str]) -> list[bytes]:
        out = []
        for digest in digests:
            path = self._path(digest)
            try:
                out.append(path.read_bytes())
            except FileNotFoundError:
                raise ConfigError(
                    f"payload {digest[:12]}... is not in the payload store {self.root}: every "
                    "worker and the driver must share one payload store (--payload-store)"
                ) from None
        return out


def payload_driver(payloads: StorageDriver | str | Path | None) -> StorageDriver:
    """The driver for ``payloads``: a driver as given, a directory, or the default one."""
    if isinstance(payloads, StorageDriver):
        return payloads
    return DirectoryPayloads(payloads if payloads is not None else default_payload_dir())


# One for the process: it keeps the type adapters it builds (one per type it reads).
_JSON = PydanticJSONPlainPayloadConverter()


class _PayloadConverter(CompositePayloadConverter):
    """Pydantic's payload converter, whose JSON part is one for the process. Temporal makes a
    payload converter anew for every activity and workflow task once payloads may go to a
    store (each gets the context of its store); each would otherwise build its type
    adapters again."""

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)


# Temporal's default encodings, pydantic's JSON in the place of its own: chosen once.
_CONVERTERS = tuple(
    _JSON if isinstance(c, JSONPlainPayloadConverter) else c
    for c in DefaultPayloadConverter.default_encoding_payload_converters
)


def data_converter(
    driver: StorageDriver, inline_bytes: int = DEFAULT_INLINE_BYTES
) -> DataConverter:
    """Pydantic's JSON converter, with payloads over ``inline_bytes`` in ``driver``."""
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=_PayloadConverter,
        external_storage=ExternalStorage(drivers=[driver], payload_size_threshold=inline_bytes),
    )


async def stored(converter: DataConverter, value: Any) -> str:
    """A reference to ``value``, put in ``converter``'s payload store whatever its size (the
    payload itself, inline, when the converter has no store): text a workflow passes on as
    it is, which :func:`fetched` reads back."""
    storage = converter.external_storage
    if storage is not None and storage.payload_size_threshold > 0:
        storage = dataclasses.replace(storage, payload_size_threshold=0)
        converter = dataclasses.replace(converter, external_storage=storage)
    [payload] = await converter.encode([value])
    return base64.b64encode(payload.SerializeToString(deterministic=True)).decode("ascii")


async def fetched(converter: DataConverter, ref: str) -> Any:
    """The value a reference of :func:`stored` stands for, read from the payload store."""
    [value] = await converter.decode([Payload.FromString(base64.b64decode(ref))])
    return value
