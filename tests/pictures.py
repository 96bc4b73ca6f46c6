"""Small generated images for the image tests: distinct shapes and colours, drawn with Pillow in memory."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw


def encoded(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def drawn(background: str, shape: str, colour: str) -> bytes:
    """A 96x96 PNG: a circle, square, stripes, cross or checks of `colour` on `background` ("plain": nothing)."""
    image = Image.new("RGB", (96, 96), background)
    draw = ImageDraw.Draw(image)
    if shape == "circle":
        draw.ellipse((16, 16, 80, 80), fill=colour)
    elif shape == "square":
        draw.rectangle((24, 24, 72, 72), fill=colour)
    elif shape == "stripes":
        for x in range(0, 96, 16):
            draw.rectangle((x, 0, x + 7, 95), fill=colour)
    elif shape == "cross":
        draw.rectangle((40, 0, 55, 95), fill=colour)
        draw.rectangle((0, 40, 95, 55), fill=colour)
    elif shape == "checks":
        for x in range(0, 96, 24):
            for y in range(x % 48, 96 + 24, 48):
                draw.rectangle((x, y - 24, x + 23, y - 1), fill=colour)
    return encoded(image)


def gradient() -> bytes:
    ramp = np.linspace(0, 255, 96, dtype=np.uint8)
    pixels = np.stack([np.tile(ramp, (96, 1)), np.tile(ramp[:, None], (1, 96)), np.full((96, 96), 128, np.uint8)], -1)
    return encoded(Image.fromarray(pixels))


def noise(seed: int, fmt: str = "PNG") -> bytes:
    return encoded(Image.fromarray(np.random.default_rng(seed).integers(0, 256, (96, 96, 3), dtype=np.uint8)), fmt)
