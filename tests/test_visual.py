"""The open-clip image embedder, on the real ViT-B-32 with seeded random weights (no weights on this machine).

Random weights cannot say that a dog looks like "a dog", so these tests check the plumbing that trained weights
rely on: order, normalisation, determinism, decoding and refusal, and how availability reads the disk.
"""

from __future__ import annotations

import asyncio
import re
import struct
import subprocess
import sys
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pictures import drawn, encoded, gradient, noise
from PIL import Image

from agent_memory.config import ImageConfig
from agent_memory.embeddings.visual import ClipEmbedder, availability
from agent_memory.errors import ClosedError, ImageMemoryUnavailable, InvalidImage

RANDOM = ImageConfig(random_weights=True)
TAG = "laion2b_s34b_b79k"
TAG_REPO = "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K"


IMAGES = [
    drawn("white", "circle", "red"),
    drawn("black", "square", "yellow"),
    drawn("navy", "stripes", "white"),
    drawn("white", "checks", "black"),
    drawn("green", "plain", "green"),
    drawn("orange", "circle", "blue"),
    gradient(),
    noise(7),
]


@pytest.fixture(scope="module")
def clip() -> Iterator[ClipEmbedder]:
    """One loaded ViT-B-32 for the module: loading costs seconds. Each test drives it from its own event loop.

    One torch thread: on a busy 2-core runner two OpenMP threads took 2.5x longer per image. The setting is
    process-wide, so it is put back for the modules that run after this one.
    """
    import torch

    threads = torch.get_num_threads()
    embedder = ClipEmbedder(RANDOM, threads=1)
    asyncio.run(embedder.load())
    yield embedder
    asyncio.run(embedder.aclose())
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def vectors(clip: ClipEmbedder) -> np.ndarray:
    return asyncio.run(clip.embed_images(IMAGES))


async def test_each_image_finds_itself_first(clip: ClipEmbedder, vectors: np.ndarray) -> None:
    queries = await clip.embed_images(IMAGES[::-1])  # another batch, another order
    best = (queries @ vectors.T).argmax(axis=1)
    assert best.tolist() == list(range(len(IMAGES)))[::-1]


async def test_vectors_are_unit_float32_rows(clip: ClipEmbedder, vectors: np.ndarray) -> None:
    assert clip.dimension == 512
    assert clip.name == "open-clip:ViT-B-32:random-seed0"
    assert vectors.shape == (len(IMAGES), 512)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (await clip.embed_images([])).shape == (0, 512)


async def test_same_seed_gives_same_vectors(vectors: np.ndarray) -> None:
    again = ClipEmbedder(RANDOM, threads=1)
    try:
        await again.load()
        np.testing.assert_allclose(await again.embed_images(IMAGES[:3]), vectors[:3], atol=1e-5)
    finally:
        await again.aclose()


async def test_text_tower_gives_distinct_unit_vectors_in_the_image_space(clip: ClipEmbedder) -> None:
    texts = ["a red circle on white", "yellow square", "a photo of a dog", ""]
    got = await clip.embed_texts(texts)
    assert got.shape == (len(texts), clip.dimension) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    similarity = got @ got.T
    assert (similarity[~np.eye(len(texts), dtype=bool)] < 0.9999).all()
    np.testing.assert_allclose(await clip.embed_texts(texts[2:3]), got[2:3], atol=1e-5)
    assert (await clip.embed_texts([])).shape == (0, clip.dimension)


async def test_a_path_embeds_like_its_bytes(clip: ClipEmbedder, vectors: np.ndarray, tmp_path: Path) -> None:
    path = tmp_path / "checks.png"
    path.write_bytes(IMAGES[3])
    got = await clip.embed_images([IMAGES[0], path])
    np.testing.assert_allclose(got, vectors[[0, 3]], atol=1e-5)


@pytest.mark.parametrize(
    ("bad", "detail"),
    [
        (b"GIF89a but not really an image", "not a decodable image"),
        (b"", "empty"),
        (encoded(Image.new("RGB", (64, 64), "red"))[:60], "not a decodable image"),  # truncated
        ("missing.png", "No such file"),
    ],
)
async def test_a_bad_image_is_refused_by_name(
    clip: ClipEmbedder, tmp_path: Path, bad: bytes | str, detail: str
) -> None:
    item = tmp_path / bad if isinstance(bad, str) else bad
    with pytest.raises(InvalidImage, match=detail) as caught:
        await clip.embed_images([IMAGES[0], IMAGES[1], item, IMAGES[2]])
    assert "#2" in str(caught.value)
    if isinstance(item, Path):
        assert str(item) in str(caught.value)


def _png_header(width: int, height: int) -> bytes:
    """A PNG that claims a huge size in 60 bytes: what a decompression bomb looks like to Image.open."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


@pytest.mark.parametrize("side", [10_000, 20_000])  # PIL warns above ~89 Mpixels, raises above twice that
async def test_a_decompression_bomb_is_refused(clip: ClipEmbedder, side: int) -> None:
    with warnings.catch_warnings(), pytest.raises(InvalidImage, match="too large") as caught:
        warnings.simplefilter("ignore")  # as a daemon would run: PIL's warning alone stops nothing
        await clip.embed_images([IMAGES[0], _png_header(side, side)])
    assert "#1" in str(caught.value)


def _cache(root: Path, filename: str) -> Path:
    """A Hugging Face hub cache holding one file of the tag's repo, laid out as huggingface_hub writes it."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / TAG_REPO
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / filename).write_bytes(b"weights")
    return root


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"enabled": False, "random_weights": True}, "image.enabled is false"),
        ({}, "set image.pretrained to an open-clip tag"),
        ({"checkpoint_path": "/nonexistent/clip.pt"}, "'/nonexistent/clip.pt' is not a file"),
        ({"pretrained": "no_such_tag"}, f"'no_such_tag' is not an open-clip pretrained tag for ViT-B-32 .*{TAG}"),
        ({"pretrained": TAG}, "no open-clip weights for ViT-B-32 'laion2b_s34b_b79k' in the local cache"),
        ({"architecture": "ViT-Q-99", "random_weights": True}, "no architecture 'ViT-Q-99'; set image.architecture"),
    ],
)
async def test_unavailable_configs_name_the_fix(tmp_path: Path, settings: dict[str, object], expected: str) -> None:
    config = ImageConfig.model_validate(settings)
    reason = availability(config, hub_cache=tmp_path)
    assert reason is not None
    assert reason.startswith("Image memory is off:")
    assert re.search(expected, reason), reason
    embedder = ClipEmbedder(config, hub_cache=tmp_path)
    try:
        with pytest.raises(ImageMemoryUnavailable) as caught:
            await embedder.load()
        assert str(caught.value) == reason
    finally:
        await embedder.aclose()


def test_the_not_cached_message_names_the_cache_and_both_fixes(tmp_path: Path) -> None:
    reason = availability(ImageConfig(pretrained=TAG), hub_cache=tmp_path)
    assert reason is not None
    assert str(tmp_path) in reason
    assert "image.checkpoint_path" in reason and "image.allow_download = true" in reason


@pytest.mark.parametrize("filename", ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"])
def test_a_cached_tag_is_available(tmp_path: Path, filename: str) -> None:
    assert availability(ImageConfig(pretrained=TAG), hub_cache=_cache(tmp_path, filename)) is None


def test_a_file_of_another_repo_does_not_count(tmp_path: Path) -> None:
    cache = _cache(tmp_path, "open_clip_model.safetensors")
    assert availability(ImageConfig(pretrained="laion2b_e16"), hub_cache=cache) is not None


def test_available_without_a_cache(tmp_path: Path) -> None:
    checkpoint = tmp_path / "clip.pt"
    checkpoint.write_bytes(b"weights")
    assert availability(RANDOM) is None
    assert availability(ImageConfig(checkpoint_path=str(checkpoint))) is None
    hub = tmp_path / "hub"
    hub.mkdir()
    assert availability(ImageConfig(pretrained=TAG, allow_download=True), hub_cache=hub) is None
    assert list(hub.iterdir()) == []  # deciding fetched nothing


async def test_closing_is_idempotent_and_final() -> None:
    embedder = ClipEmbedder(RANDOM)
    await embedder.aclose()
    await embedder.aclose()
    with pytest.raises(ClosedError):
        await embedder.embed_texts(["hello"])


def test_importing_the_module_loads_no_engine() -> None:
    code = (
        "import sys\n"
        "from agent_memory.config import ImageConfig\n"
        "from agent_memory.embeddings.visual import availability\n"
        "assert availability(ImageConfig(enabled=False)) is not None\n"
        "print(sorted(m for m in ('open_clip', 'torch', 'PIL') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"
