"""Image embeddings: open-clip's two towers, so images and text about them land in one vector space (the dual code).

Weights are looked for on disk only. A pretrained tag is resolved to the file open-clip itself would load from the
Hugging Face cache, and that file is handed to open-clip as a path, so open-clip never sees a tag and has nothing
to download. The network is touched in one case only: the tag is not cached and image.allow_download is true.
open_clip, torch and PIL are imported inside the functions that need them: importing open_clip takes seconds.
"""

from __future__ import annotations

import asyncio
import io
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from agent_memory.config import ImageConfig
from agent_memory.errors import ClosedError, ImageMemoryUnavailable, InvalidImage, ModelError

if TYPE_CHECKING:
    from PIL.Image import Image

T = TypeVar("T")
OFF = "Image memory is off:"
HF_WEIGHTS_NAME = "open_clip_pytorch_model.bin"  # open_clip.constants: the file a tag's hub repo holds by default
HF_SAFE_WEIGHTS_NAME = "open_clip_model.safetensors"  # ... and its safetensors twin, which open-clip tries first


def availability(config: ImageConfig, *, hub_cache: Path | None = None) -> str | None:
    """None when the weights can be had without surprise; else one sentence naming what is missing and the fix.

    Decided from the configuration and the files on disk only, never the network. `hub_cache` overrides the
    Hugging Face hub cache directory (HF_HUB_CACHE, by default ~/.cache/huggingface/hub).
    """
    if not config.enabled:
        return f"{OFF} image.enabled is false; set image.enabled = true to turn it on"
    if not (config.random_weights or config.checkpoint_path or config.pretrained):
        return (
            f"{OFF} no weights are configured for {config.architecture}; set image.pretrained to an open-clip tag "
            "(e.g. 'laion2b_s34b_b79k') or image.checkpoint_path to a local checkpoint file"
        )
    if not config.random_weights and config.checkpoint_path and not _checkpoint(config).is_file():
        return (
            f"{OFF} image.checkpoint_path {config.checkpoint_path!r} is not a file; point it at a local open-clip "
            "checkpoint, or clear it and set image.pretrained to a cached tag"
        )
    import open_clip

    if config.architecture not in open_clip.list_models():
        return (
            f"{OFF} open-clip has no architecture {config.architecture!r}; set image.architecture to one of "
            "open_clip.list_models(), e.g. 'ViT-B-32'"
        )
    if config.random_weights or config.checkpoint_path:
        return None
    return _tag_availability(config, hub_cache)


def _tag_availability(config: ImageConfig, hub_cache: Path | None) -> str | None:
    import open_clip

    arch, tag = config.architecture, config.pretrained
    tag_cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not tag_cfg:
        known = ", ".join(open_clip.list_pretrained_tags_by_model(arch)) or "none"
        return (
            f"{OFF} {tag!r} is not an open-clip pretrained tag for {arch} (known: {known}); set image.pretrained "
            "to one of them, or image.checkpoint_path to a local checkpoint file"
        )
    if config.allow_download or cached_weights(tag_cfg, hub_cache):
        return None
    return (
        f"{OFF} no open-clip weights for {arch} {tag!r} in the local cache ({_hub_dir(hub_cache)}); set "
        "image.checkpoint_path to a local file, or image.allow_download = true to fetch them once"
    )


def cached_weights(tag_cfg: dict[str, Any], hub_cache: Path | None = None) -> str | None:
    """The cached file open-clip 3.x would load for a tag, or None: no download, no network.

    open_clip's download_pretrained prefers the tag's `hf_hub` entry ('org/repo/' or 'org/repo/file') whenever
    huggingface_hub is installed, and asks hf_hub_download for the safetensors twin before the named file.
    try_to_load_from_cache answers the same question from the cache's refs/ and snapshots/ alone.
    """
    from huggingface_hub import try_to_load_from_cache

    repo_id, filename = os.path.split(str(tag_cfg.get("hf_hub", "")))
    if not repo_id:
        return None  # a url-only tag; none exists in open-clip 3.3, and open-clip would fetch it with urllib
    filename = filename or HF_WEIGHTS_NAME
    for candidate in (*_safe_alternatives(filename), filename):
        found = try_to_load_from_cache(repo_id, candidate, cache_dir=hub_cache)
        if isinstance(found, str):
            return found
    return None


def _safe_alternatives(filename: str) -> tuple[str, ...]:
    if filename == HF_WEIGHTS_NAME:
        return (HF_SAFE_WEIGHTS_NAME,)
    if filename.endswith((".bin", ".pth")):
        return (filename[:-4] + ".safetensors",)
    return ()


def _hub_dir(hub_cache: Path | None) -> str:
    from huggingface_hub import constants

    return str(hub_cache or constants.HF_HUB_CACHE)


def _checkpoint(config: ImageConfig) -> Path:
    return Path(config.checkpoint_path).expanduser()


@contextmanager
def _hub_online() -> Iterator[None]:
    """The package sets HF_HUB_OFFLINE=1 on import; image.allow_download is the one opt-in that lifts it, for one fetch.

    huggingface_hub reads the variable once, into `constants.HF_HUB_OFFLINE`, which its `is_offline_mode()` returns.
    """
    from huggingface_hub import constants

    previous, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = previous


def _describe(config: ImageConfig) -> str:
    """The embedder's name: architecture plus where its weights came from, so stored vectors can say which model."""
    source = "random-seed0" if config.random_weights else (config.checkpoint_path or config.pretrained)
    return f"open-clip:{config.architecture}:{source}"


class ClipEmbedder:
    """open-clip image and text towers on one worker thread; vectors are float32, L2-normalised, in one space."""

    def __init__(
        self, config: ImageConfig, *, threads: int = 0, batch_size: int = 32, hub_cache: Path | None = None
    ) -> None:
        self.config = config
        self.threads = threads  # 0 leaves torch's own default (one per core)
        self.batch_size = batch_size
        self.hub_cache = hub_cache
        self.name = _describe(config)
        self.dimension = 0  # known after load(): the architecture's embed_dim (512 for ViT-B-32)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="clip")
        self._closed = False
        self._model: Any = None
        self._preprocess: Any = None
        self._tokenizer: Any = None

    async def _call(self, fn: Callable[..., T], /, *args: Any) -> T:
        if self._closed:
            raise ClosedError("ClipEmbedder")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def load(self) -> None:
        """Load the weights; ImageMemoryUnavailable (with availability()'s sentence) when there are none to load."""
        await self._call(self._load_sync)

    def _load_sync(self) -> Any:
        if self._model is not None:
            return self._model
        reason = availability(self.config, hub_cache=self.hub_cache)
        if reason:
            raise ImageMemoryUnavailable(reason)
        import open_clip
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)  # process-wide, as for the text embedder
        try:
            with torch.random.fork_rng(devices=[]):  # the fixed seed stays out of everyone else's random stream
                torch.manual_seed(0)
                model, _, preprocess = open_clip.create_model_and_transforms(
                    self.config.architecture, device="cpu", **self._weights()
                )
            self._tokenizer = open_clip.get_tokenizer(self.config.architecture)
        except Exception as exc:
            raise ModelError(f"Cannot load the image embedder {self.name}: {exc}") from exc
        self.dimension = int(open_clip.get_model_config(self.config.architecture)["embed_dim"])
        self._preprocess, self._model = preprocess, model.eval()
        return self._model

    def _weights(self) -> dict[str, Any]:
        """create_model keyword arguments: always a file path (or None for random weights), never a tag."""
        if self.config.random_weights:
            return {"pretrained": None}
        if self.config.checkpoint_path:
            return {"pretrained": str(_checkpoint(self.config))}
        import open_clip

        tag_cfg = open_clip.get_pretrained_cfg(self.config.architecture, self.config.pretrained)
        path = cached_weights(tag_cfg, self.hub_cache)
        if path is None:  # availability() passed, so allow_download is set
            with _hub_online():
                path = str(open_clip.download_pretrained(tag_cfg, cache_dir=self.hub_cache))
        return {  # what open-clip takes from the tag itself: its normalisation, resize and activation
            "pretrained": path,
            "image_mean": tag_cfg.get("mean"),
            "image_std": tag_cfg.get("std"),
            "image_interpolation": tag_cfg.get("interpolation"),
            "image_resize_mode": tag_cfg.get("resize_mode"),
            # open-clip only warns when a tag trained with QuickGELU meets an architecture built without it
            "force_quick_gelu": bool(tag_cfg.get("quick_gelu", False)),
        }

    async def embed_images(self, images: Sequence[bytes | Path]) -> np.ndarray:
        """One vector per image, in order. Every image is read and decoded before any is embedded, so one bad
        image raises InvalidImage (naming it) and nothing else is computed."""
        return await self._call(self._embed_images_sync, list(images))

    def _embed_images_sync(self, images: list[bytes | Path]) -> np.ndarray:
        self._load_sync()
        pixels = [self._preprocess(_decode(index, item)) for index, item in enumerate(images)]
        return self._encode(pixels, "images", self._model.encode_image)

    async def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """CLIP's text tower: vectors comparable with embed_images' (not with the text embedder's)."""
        return await self._call(self._embed_texts_sync, list(texts))

    def _embed_texts_sync(self, texts: list[str]) -> np.ndarray:
        self._load_sync()
        tokens = list(self._tokenizer(texts)) if texts else []
        return self._encode(tokens, "texts", self._model.encode_text)

    def _encode(self, rows: list[Any], what: str, tower: Callable[..., Any]) -> np.ndarray:
        import torch

        result = np.zeros((len(rows), self.dimension), dtype=np.float32)
        try:
            with torch.inference_mode():
                for start in range(0, len(rows), self.batch_size):
                    batch = torch.stack(rows[start : start + self.batch_size])
                    result[start : start + len(batch)] = tower(batch, normalize=True).float().numpy()
        except Exception as exc:
            raise ModelError(f"The image embedder {self.name} failed on {len(rows)} {what}: {exc}") from exc
        if not np.isfinite(result).all():
            raise ModelError(f"The image embedder {self.name} returned non-finite values for {what}")
        return result

    async def aclose(self) -> None:
        """Stop the worker thread; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown)
        self._model = self._preprocess = self._tokenizer = None


def _decode(index: int, item: bytes | Path) -> Image:
    what, data = _read(index, item)
    if not data:
        raise InvalidImage(what, "it is empty: 0 bytes")
    from PIL import Image as PILImage

    with warnings.catch_warnings():  # PIL only warns between its pixel limit and twice it: refuse both
        warnings.simplefilter("error", PILImage.DecompressionBombWarning)
        try:
            with PILImage.open(io.BytesIO(data)) as image:
                return image.convert("RGB")
        except (PILImage.DecompressionBombWarning, PILImage.DecompressionBombError) as exc:
            raise InvalidImage(what, f"too large, a possible decompression bomb: {exc}") from exc
        except Exception as exc:  # PIL's plugins raise OSError, ValueError, SyntaxError, struct.error...
            raise InvalidImage(what, f"not a decodable image: {exc}") from exc


def _read(index: int, item: bytes | Path) -> tuple[str, bytes]:
    if isinstance(item, Path):
        what = f"#{index} at {item}"
        try:
            return what, item.read_bytes()
        except OSError as exc:
            raise InvalidImage(what, exc.strerror or type(exc).__name__) from exc
    if isinstance(item, bytes | bytearray):
        return f"#{index}", bytes(item)
    raise InvalidImage(f"#{index}", f"expected bytes or a pathlib.Path, got {type(item).__name__}")
