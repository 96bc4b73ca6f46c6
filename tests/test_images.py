"""Image memories (issue #4, the dual code), end to end on real engines and the real open-clip ViT-B-32.

There are no CLIP weights on this machine, so the model runs with seeded random weights (image.random_weights):
it cannot know that a red circle looks like "a red circle", but an image is still nearest to itself, and the
plumbing trained weights rely on is the same: stored bytes, vectors, outbox, graph links, the layers, doctor.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pictures import drawn, noise

from agent_memory import ImageMemoryUnavailable, InvalidImage, InvalidInput, MemoryManager
from agent_memory.config import Config, ImageConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.embeddings.visual import ClipEmbedder
from agent_memory.models import Media, MemoryId, Role
from agent_memory.storage.outbox import IMAGE

RANDOM = ImageConfig(random_weights=True)


IMAGES = [
    drawn("white", "circle", "red"),
    drawn("black", "square", "yellow"),
    drawn("navy", "stripes", "white"),
    drawn("green", "cross", "black"),
    drawn("orange", "circle", "blue"),
    noise(7, "JPEG"),
]


@pytest.fixture(scope="module")
def clip() -> Iterator[ClipEmbedder]:
    """One loaded ViT-B-32 for the module (loading costs seconds), shared by every manager through the
    image_embedder seam. One torch thread, put back afterwards: the setting is process-wide."""
    import torch

    threads = torch.get_num_threads()
    embedder = ClipEmbedder(RANDOM, threads=1)
    asyncio.run(embedder.load())
    yield embedder
    asyncio.run(embedder.aclose())
    torch.set_num_threads(threads)


@pytest.fixture
def image_config(config: Config) -> Config:
    return config.model_copy(update={"image": RANDOM})


@pytest.fixture
async def manager(image_config: Config, embedder: Embedder, clip: ClipEmbedder) -> AsyncIterator[MemoryManager]:
    async with MemoryManager.open(image_config, embedder=embedder, image_embedder=clip) as m:
        yield m


async def test_an_image_query_finds_each_image_first(manager: MemoryManager, tmp_path: Path) -> None:
    path = tmp_path / "beach.png"
    path.write_bytes(IMAGES[0])
    first = await manager.remember_image(path)
    rest = [await manager.remember_image(data, caption=f"picture number {i}") for i, data in enumerate(IMAGES[1:], 1)]
    memories = [first, *rest]
    assert first.media is Media.IMAGE and first.content == "[image] beach.png"
    assert first.media_sha256 == hashlib.sha256(IMAGES[0]).hexdigest()
    assert rest[0].content == "picture number 1"
    got = await manager.get(first.memory_id)  # what remember_image returned is what SQLite holds
    assert dataclasses.replace(got, history_length=None) == first
    for index in (0, 3, 5):
        results = await manager.retrieve(image=IMAGES[index], k=len(IMAGES))
        assert results[0].memory.memory_id == memories[index].memory_id, [r.explain() for r in results]
        assert results[0].layers["image"].rank == 1
        assert results[0].layers["image"].score == pytest.approx(1.0, abs=1e-4)
    await manager.flush()  # stats() reports the projections as of the projector's last batch
    stats = await manager.stats()
    assert stats["vectors"][IMAGE] == len(IMAGES) and stats["records"]["images"] == len(IMAGES)
    assert stats["vectors"]["text"] == len(IMAGES) - 1  # the uncaptioned image has no text vector
    assert stats["image_memory"] == "on"


async def test_a_text_query_runs_through_the_text_tower(manager: MemoryManager) -> None:
    await manager.process_turn("s1", 0, "The train to Porto leaves at nine from platform four.")
    plain = await manager.recall("when does the train leave")
    assert "image" not in plain.timings and "image_embed" not in plain.timings  # no image: no CLIP call
    for data in IMAGES[:3]:
        await manager.remember_image(data)
    recalled = await manager.recall("a red circle on a white background")
    assert "image_embed" in recalled.timings
    found = [r for r in recalled.ranked.results if "image" in r.layers]
    assert len(found) == 3 and {r.layers["image"].rank for r in found} == {1, 2, 3}
    assert all(r.memory.media is Media.IMAGE for r in found)
    assert "image #1" in " ".join(r.explain() for r in found)
    elsewhere = await manager.recall("a red circle", namespace="other")  # a namespace without images
    assert "image_embed" not in elsewhere.timings


async def test_a_caption_is_found_by_the_text_layers(manager: MemoryManager) -> None:
    memory = await manager.remember_image(IMAGES[1], caption="Biscuit asleep on the yellow sofa", session_id="s9")
    results = await manager.retrieve("where was Biscuit asleep")
    assert results[0].memory.memory_id == memory.memory_id
    assert {"keyword", "semantic"} <= set(results[0].layers)
    assert "biscuit" in memory.entities


async def test_images_shared_in_a_turn_link_to_it(manager: MemoryManager) -> None:
    before = await manager.process_turn("trip", 0, "We walked the cliff path to the old lighthouse at dawn.")
    shared = await manager.process_turn(
        "trip", 1, "Here is the view from the top of the lighthouse!", images=[IMAGES[2], IMAGES[3]]
    )
    phatic = await manager.process_turn("trip", 2, "ok", images=[IMAGES[4]])
    assert shared.saved and len(shared.image_memory_ids) == 2
    assert not phatic.saved and len(phatic.image_memory_ids) == 1  # a shared image is kept whatever the text
    await manager.flush()
    picture = await manager.get(shared.image_memory_ids[0])
    assert picture.source_turn_id == shared.turn_id and picture.session_id == "trip" and picture.role is Role.USER
    assert picture.turn_number is None and picture.content.startswith("[image] ")

    neighbours = dict(await manager.graph.neighbours(MemoryId(picture.memory_id)))
    assert neighbours[shared.memory_id] == "RELATED_TO"
    assert neighbours[before.memory_id] == "IN_SESSION"
    alone = dict(await manager.graph.neighbours(phatic.image_memory_ids[0]))
    assert alone[before.memory_id] == "IN_SESSION" and "RELATED_TO" not in alone.values()
    counts = await manager.graph.counts()
    assert counts["RELATED_TO"] == 2 and counts["IN_SESSION"] == 5 and counts["NEXT"] == 1
    for _ in range(2):  # projecting the images again replaces their edges: still one each
        await manager.graph.upsert_memories(await manager.records.graph_memories(list(shared.image_memory_ids)))
    assert await manager.graph.counts() == counts
    assert await manager.graph.expand([picture.memory_id], depth=2) == []  # the records answer this hop, not Kuzu

    results = await manager.retrieve(image=IMAGES[2], k=10)
    assert results[0].memory.memory_id == picture.memory_id
    turns = [r for r in results if r.memory.memory_id == shared.memory_id]
    assert turns, [r.explain() for r in results]
    turn = turns[0]
    assert turn.layers["graph"].layer == "graph:RELATED_TO", turn.explain()
    assert "image" not in turn.layers  # reached through the graph walk, not through a vector


async def test_the_store_keeps_the_bytes_and_the_log_keeps_none(
    manager: MemoryManager, image_config: Config, tmp_path: Path
) -> None:
    path = tmp_path / "noise.jpg"
    path.write_bytes(IMAGES[5])
    result = await manager.process_turn("s1", 0, "Two pictures from the trip.", images=[IMAGES[0], path])
    sha = [hashlib.sha256(data).hexdigest() for data in (IMAGES[0], IMAGES[5])]
    pictures = [await manager.get(i) for i in result.image_memory_ids]
    assert [p.media_path for p in pictures] == [f"images/{sha[0]}.png", f"images/{sha[1]}.jpg"]
    assert pictures[1].content == "[image] noise.jpg"
    folder = image_config.data_dir / "images"
    assert (folder / f"{sha[0]}.png").read_bytes() == IMAGES[0]
    assert (folder / f"{sha[1]}.jpg").read_bytes() == IMAGES[5]
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{sha[0]}.png", f"{sha[1]}.jpg"])
    assert (folder / f"{sha[0]}.png").stat().st_mode & 0o077 == 0
    log = b"".join(p.read_bytes() for p in (image_config.data_dir / "logs").iterdir())
    assert b"Two pictures from the trip." in log
    for data in (IMAGES[0], IMAGES[5]):
        assert data[:64] not in log and base64.b64encode(data)[:64] not in log
    again = await manager.remember_image(IMAGES[0])  # the same image again: one file, two memories
    assert again.media_path == pictures[0].media_path and len(list(folder.iterdir())) == 2


async def test_a_bad_image_writes_nothing(manager: MemoryManager, image_config: Config, tmp_path: Path) -> None:
    with pytest.raises(InvalidImage, match="#1 cannot be read .*not a decodable image"):
        await manager.process_turn("s1", 0, "A picture and some garbage.", images=[IMAGES[0], b"not an image"])
    with pytest.raises(InvalidImage, match="No such file"):
        await manager.remember_image(tmp_path / "missing.png")
    with pytest.raises(InvalidImage, match="expected bytes or a pathlib.Path"):
        await manager.remember_image("photo.png")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="images must be a list"):
        await manager.process_turn("s1", 0, "One picture.", images=IMAGES[0])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="The query is empty"):
        await manager.retrieve("")
    with pytest.raises(InvalidImage, match="not a decodable image"):
        await manager.retrieve(image=b"GIF89a and then nothing")
    stats = await manager.stats()
    assert stats["records"]["turns"] == 0 and stats["records"]["memories"] == 0 and stats["log_bytes"] == 0
    assert not (image_config.data_dir / "images").exists()
    result = await manager.process_turn("s1", 0, "A picture, this time a good one.", images=[IMAGES[0]])
    assert len(result.image_memory_ids) == 1  # the refused turn's number was not taken


async def test_without_weights_image_memory_is_off_and_text_works(
    config: Config, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    assert config.image.enabled and not (config.image.pretrained or config.image.checkpoint_path)
    with caplog.at_level(logging.INFO, logger="agent_memory"):
        async with MemoryManager.open(config, embedder=embedder) as manager:
            reason = await manager.image_memory_off()
            assert reason is not None and reason.startswith("Image memory is off: no weights are configured")
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert [r.getMessage() for r in warnings] == [reason]
            result = await manager.process_turn("s1", 0, "The dentist moved my appointment to Friday.")
            assert result.saved
            assert (await manager.retrieve("dentist appointment"))[0].memory.memory_id == result.memory_id
            with pytest.raises(ImageMemoryUnavailable) as caught:
                await manager.remember_image(IMAGES[0])
            assert str(caught.value) == reason
            with pytest.raises(ImageMemoryUnavailable, match="image.pretrained"):
                await manager.process_turn("s1", 1, "And a photo of the receipt.", images=[IMAGES[1]])
            with pytest.raises(ImageMemoryUnavailable):
                await manager.retrieve(image=IMAGES[0])
            stats = await manager.stats()
            assert stats["records"]["turns"] == 1 and stats["image_memory"] == reason
    assert not (config.data_dir / "images").exists()


async def test_image_memory_turned_off_in_the_config_stays_off_quietly(
    image_config: Config, embedder: Embedder, clip: ClipEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    config = image_config.model_copy(update={"image": RANDOM.model_copy(update={"enabled": False})})
    with caplog.at_level(logging.INFO, logger="agent_memory"):
        async with MemoryManager.open(config, embedder=embedder, image_embedder=clip) as manager:
            reason = await manager.image_memory_off()
            assert reason is not None and "image.enabled is false" in reason
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            with pytest.raises(ImageMemoryUnavailable, match="image.enabled is false"):
                await manager.remember_image(IMAGES[0])
            await manager.process_turn("s1", 0, "A red circle, drawn on white paper.")
            recalled = await manager.recall("a red circle")
            assert "image" not in recalled.timings and "image_embed" not in recalled.timings


async def test_images_survive_a_reopen_and_doctor_rebuilds_their_collection(
    image_config: Config, embedder: Embedder, clip: ClipEmbedder
) -> None:
    async with MemoryManager.open(image_config, embedder=embedder, image_embedder=clip) as manager:
        shared = await manager.process_turn(
            "s1", 0, "The bakery on Rua Augusta sells pastel de nata.", images=IMAGES[:2]
        )
        kept = [await manager.remember_image(data) for data in IMAGES[2:5]]
    async with MemoryManager.open(image_config, embedder=embedder, image_embedder=clip) as manager:
        assert (await manager.retrieve(image=IMAGES[3]))[0].memory.memory_id == kept[1].memory_id
        await manager.vectors.delete(IMAGE, [kept[0].memory_id])
        report = await manager.doctor()
        assert [(d.store, d.kind, d.ids) for d in report.disagreements] == [
            ("vectors", "missing image vectors", (kept[0].memory_id,))
        ]
        assert (await manager.doctor(repair=True)).consistent
    shutil.rmtree(image_config.data_dir / "vectors")
    shutil.rmtree(image_config.data_dir / "graph")
    async with MemoryManager.open(image_config, embedder=embedder, image_embedder=clip) as manager:
        assert (await manager.doctor()).consistent  # both projections were gone: rebuilt from SQLite on open
        stats = await manager.stats()
        assert stats["vectors"][IMAGE] == stats["records"]["images"] == 5 and stats["vectors"]["text"] == 1
        assert stats["graph"]["RELATED_TO"] == 2 and stats["graph"]["IN_SESSION"] == 3  # rebuilt from SQLite
        assert dict(await manager.graph.neighbours(shared.image_memory_ids[1]))[shared.memory_id] == "RELATED_TO"
        results = await manager.retrieve(image=IMAGES[0], k=10)
        assert results[0].memory.memory_id == shared.image_memory_ids[0]
        assert any(r.memory.memory_id == shared.memory_id and "graph" in r.layers for r in results)


async def test_doctor_removes_image_files_no_memory_names_and_reports_missing_ones(manager: MemoryManager) -> None:
    kept = await manager.remember_image(IMAGES[0])
    folder = manager.config.data_dir / "images"
    stale, partial, fresh = folder / ("f" * 64 + ".png"), folder / ".x.png.1a2b.partial", folder / ("e" * 64 + ".png")
    for path in (stale, partial, fresh):
        path.write_bytes(IMAGES[1])
    hour_ago = time.time() - 3600
    for path in (stale, partial):
        os.utime(path, (hour_ago, hour_ago))  # a crashed write long ago; `fresh` may be a turn being written now
    report = await manager.doctor()
    assert [(d.store, d.kind, d.ids) for d in report.disagreements] == [
        ("images", "image files no memory names", (f"images/{partial.name}", f"images/{stale.name}"))
    ]
    repaired = await manager.doctor(repair=True)
    assert repaired.consistent and repaired.repaired == ("2 image files no memory names removed",)
    assert not stale.exists() and not partial.exists() and fresh.exists()
    assert (manager.config.data_dir / (kept.media_path or "")).exists()
    (manager.config.data_dir / (kept.media_path or "")).unlink()
    gone = await manager.doctor(repair=True)
    assert not gone.consistent and [d.kind for d in gone.disagreements] == ["image files missing (cannot be repaired)"]
    assert gone.disagreements[0].ids == (kept.media_path,)


async def test_a_turn_logged_with_images_but_not_committed_gets_them_back(
    image_config: Config, embedder: Embedder, clip: ClipEmbedder
) -> None:
    from agent_memory.models import LogRecord, Role, TurnId, new_id, utc_now

    sha = hashlib.sha256(IMAGES[2]).hexdigest()
    async with MemoryManager.open(image_config, embedder=embedder, image_embedder=clip) as manager:
        shown = await manager.process_turn("s1", 0, "The view from the castle.", images=[IMAGES[1]])
        logged = await manager.read_turn(shown.turn_id)
        assert logged.images == (f"images/{hashlib.sha256(IMAGES[1]).hexdigest()}.png",)
        folder = image_config.data_dir / "images"
        (folder / f"{sha}.png").write_bytes(IMAGES[2])  # what a crash after the file and the log line leaves
        orphan = LogRecord(
            TurnId(new_id()),
            "default",
            "s1",
            1,
            Role.USER,
            "And the tram we took up the hill.",
            utc_now(),
            None,
            images=(f"images/{sha}.png",),
        )
        await manager.journal.append(orphan)
    async with MemoryManager.open(image_config, embedder=embedder, image_embedder=clip) as manager:
        assert manager.recovered_turns == 1
        best = (await manager.retrieve(image=IMAGES[2], k=3))[0].memory
        assert best.media_path == f"images/{sha}.png" and best.source_turn_id == orphan.turn_id
        assert (await manager.doctor()).consistent
