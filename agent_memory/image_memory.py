"""Image memory (the dual code): whether it is on, images read and CLIP-embedded before anything is written,
their files stored, `remember`, and the images of turns recovered after a crash.

A component the manager builds in `open()` and delegates to; it sees what it touches in its constructor. See
docs/images.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.config import Config
from agent_memory.embeddings.text import Embedder
from agent_memory.embeddings.visual import ClipEmbedder, availability
from agent_memory.errors import ImageMemoryUnavailable, InvalidInput
from agent_memory.models import Extraction, LogRecord, Memory
from agent_memory.storage.image_files import read_for_store, write_files
from agent_memory.storage.records import SqliteRecords
from agent_memory.storage.rows import ImagePlace, StoredImage, image_commit
from agent_memory.validation import check_content, check_identifier, check_images, check_time

log = logging.getLogger(__name__)


class ImageMemory:
    """`clip` is the image embedder (None when image memory is not configured); `notify` wakes the projector."""

    def __init__(
        self,
        config: Config,
        clip: ClipEmbedder | None,
        *,
        embedder: Embedder,
        extractor: SimpleExtractor,
        records: SqliteRecords,
        notify: Callable[[], None],
        clock: Callable[[], datetime],
    ) -> None:
        self.config, self.clip, self.embedder, self.extractor = config, clip, embedder, extractor
        self.records, self.notify, self.clock = records, notify, clock
        self._check: asyncio.Task[str | None] | None = None

    def start(self) -> None:
        """Begin deciding whether image memory is on, in the background (see `_decide`)."""
        self._check = asyncio.create_task(self._decide(), name="image-memory-check")

    async def _decide(self) -> str | None:
        """Decide once, from the configuration and the disk (never the network), whether image memory is on, and
        say why once when it is off. It runs in the background from the start: deciding may import open-clip and
        torch (seconds here), and text memory need not wait for that. The model itself loads on first use."""
        clip = self.clip
        try:
            if clip is None or not self.config.image.enabled:
                reason = availability(self.config.image)
                log.info("%s", reason)
                return reason
            reason = await asyncio.to_thread(availability, clip.config, hub_cache=clip.hub_cache)
        except Exception as exc:  # open-clip missing or broken: image memory is off, text memory is not
            reason = f"Image memory is off: open-clip cannot be used ({type(exc).__name__}: {exc})"
        if reason:
            log.warning("%s", reason)
        return reason

    async def stop(self) -> None:
        if self._check is not None and not self._check.done():
            self._check.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._check

    async def off(self) -> str | None:
        """Why image memory is off (the one message logged at start), or None when it is on; usable while the
        manager opens too (crash recovery may restore images)."""
        assert self._check is not None, "ImageMemory.start() was not called"
        return await asyncio.shield(self._check)

    async def on(self) -> ClipEmbedder | None:
        """The image embedder, once image memory is known to be on; None when it is off."""
        return None if await self.off() else self.clip

    async def require(self) -> ClipEmbedder:
        clip = await self.on()
        if clip is None:
            raise ImageMemoryUnavailable(await self.off() or "Image memory is off")
        return clip

    async def recovered(self, records: Sequence[LogRecord]) -> list[list[StoredImage]]:
        """The images a recovered turn named, read back from data_dir/images (written before its log line).
        With image memory off, or a file gone, the turn is recovered without them, and the log says so."""
        paths = [[self.config.data_dir / path for path in record.images] for record in records]
        if not any(paths):
            return [[] for _ in records]
        try:
            return await self.prepare(paths)
        except (ImageMemoryUnavailable, InvalidInput) as exc:
            log.warning("recovery: the turns' images cannot be restored (%s); their text is", exc)
            return [[] for _ in records]

    async def remember(
        self,
        image: bytes | Path,
        caption: str | None = None,
        *,
        session_id: str | None = None,
        namespace: str = "default",
        at: datetime | None = None,
    ) -> Memory:
        """Remember an image (encoded bytes or a file) as a memory of its own: its CLIP vector for image and
        text-tower search, its caption (if any) for the text layers. The store keeps a copy of the bytes."""
        await self.require()
        now = self.clock()
        check_identifier("namespace", namespace)
        if session_id is not None:
            check_identifier("session_id", session_id)
        text = check_content(caption, max_bytes=self.config.max_content_bytes) if caption else None
        where = ImagePlace(namespace, session_id, check_time(at, default=now))
        prepared, (embedding, extraction) = await asyncio.gather(
            self.prepare([check_images([image])]), self._caption(text)
        )
        commit = image_commit(
            prepared[0][0],
            where,
            now,
            caption=text,
            extraction=extraction,
            embedding=embedding,
        )
        await self.store(prepared)
        await self.records.commit_images([commit], now=now)
        self.notify()
        return commit.memory

    async def _caption(self, text: str | None) -> tuple[tuple[bytes, str] | None, Extraction | None]:
        """A caption's text vector (with the model's name) and its keywords and entities."""
        if not text:
            return None, None
        vectors, extraction = await asyncio.gather(
            self.embedder.embed([text]), asyncio.to_thread(self.extractor.extract, text)
        )
        return (vectors[0].astype("<f4").tobytes(), self.embedder.name), extraction

    async def prepare(self, groups: Sequence[Sequence[bytes | Path]]) -> list[list[StoredImage]]:
        """Read, decode and CLIP-embed every image of a batch before anything is written: one bad image raises
        InvalidImage (naming it), and with image memory off any image raises ImageMemoryUnavailable."""
        flat = [item for group in groups for item in group]
        if not flat:
            return [[] for _ in groups]
        clip = await self.require()
        read = await asyncio.to_thread(lambda: [read_for_store(index, item) for index, item in enumerate(flat)])
        vectors = await clip.embed_images([data for data, *_ in read])
        stored = iter(
            [StoredImage(*found, v.astype("<f4").tobytes(), clip.name) for found, v in zip(read, vectors, strict=True)]
        )
        return [[next(stored) for _ in group] for group in groups]

    async def store(self, groups: Sequence[Sequence[StoredImage]]) -> None:
        """Copy the images into data_dir/images, fsynced, before the transaction that names them commits."""
        files = {image.media_path: image.data for group in groups for image in group}
        if files:
            await asyncio.to_thread(write_files, self.config.data_dir, files)
