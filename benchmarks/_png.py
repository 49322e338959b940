"""A grouped bar chart written as a PNG with the standard library only (zlib), for benchmarks
on machines without a plotting library. Text uses a 3x5 pixel font, drawn scaled up."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["bar_chart"]

Color = tuple[int, int, int]
PALETTE: list[Color] = [(214, 96, 77), (244, 165, 130), (146, 197, 222), (33, 102, 172)]

_FONT = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001010010010",
    "8": "111101111101111",
    "9": "111101111001111",
    ".": "000000000000010",
    "=": "000111000111000",
    "-": "000000111000000",
    ":": "000010000010000",
    "(": "010100100100010",
    ")": "010001001001010",
    "/": "001001010100100",
    " ": "000000000000000",
    "a": "000011101101011",
    "b": "100110101101110",
    "c": "000011100100011",
    "d": "001011101101011",
    "e": "000111111100011",
    "f": "011100110100100",
    "g": "011101011001110",
    "h": "100110101101101",
    "i": "010000010010010",
    "j": "001000001101010",
    "k": "100101110101101",
    "l": "110010010010011",
    "m": "000111111101101",
    "n": "000110101101101",
    "o": "000010101101010",
    "p": "000110101110100",
    "q": "000011101011001",
    "r": "000011100100100",
    "s": "000011110011110",
    "t": "010111010010011",
    "u": "000101101101011",
    "v": "000101101101010",
    "w": "000101101111111",
    "x": "000101010101101",
    "y": "000101011001110",
    "z": "000111011110111",
}


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def rect(self, x: int, y: int, w: int, h: int, color: Color) -> None:
        for yy in range(max(0, y), min(self.height, y + h)):
            start = (yy * self.width + max(0, x)) * 3
            n = max(0, min(self.width, x + w) - max(0, x))
            self.pixels[start : start + 3 * n] = bytes(color) * n

    def text(self, x: int, y: int, text: str, size: int = 2, color: Color = (0, 0, 0)) -> None:
        for ch in text.lower():
            bits = _FONT.get(ch, _FONT[" "])
            for i, bit in enumerate(bits):
                if bit == "1":
                    self.rect(x + (i % 3) * size, y + (i // 3) * size, size, size, color)
            x += 4 * size

    def save(self, path: Path) -> None:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[r * self.width * 3 : (r + 1) * self.width * 3])
            for r in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
        png += chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
        path.write_bytes(png)


def text_width(text: str, size: int = 2) -> int:
    return 4 * size * len(text)


def bar_chart(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float]],
    *,
    unit: str = "s",
) -> None:
    """``series`` maps a name to one value per group; bars of a group stand side by side."""
    width, height = 900, 420
    left, right, top, bottom = 70, 190, 50, 50
    canvas = _Canvas(width, height)
    canvas.text(left, 15, title, size=3)
    top_value = max((v for vs in series.values() for v in vs), default=1.0) or 1.0
    step = _nice_step(top_value / 5)
    ymax = step * (int(top_value / step) + 1)
    plot_h = height - top - bottom
    plot_w = width - left - right
    for i in range(int(ymax / step) + 1):
        value = i * step
        y = top + plot_h - round(plot_h * value / ymax)
        canvas.rect(left, y, plot_w, 1, (220, 220, 220))
        label = f"{value:g}"
        canvas.text(left - 8 - text_width(label), y - 5, label)
    canvas.text(8, top - 20, unit)
    group_w = plot_w / max(1, len(groups))
    bar_w = max(2, int(group_w * 0.8 / max(1, len(series))))
    for g, name in enumerate(groups):
        x0 = left + round(g * group_w + group_w * 0.1)
        for s, values in enumerate(series.values()):
            h = round(plot_h * values[g] / ymax)
            color = PALETTE[s % len(PALETTE)]
            canvas.rect(x0 + s * bar_w, top + plot_h - h, bar_w - 2, h, color)
        canvas.text(
            left + round(g * group_w + group_w / 2) - text_width(name) // 2, top + plot_h + 12, name
        )
    canvas.rect(left, top + plot_h, plot_w, 2, (0, 0, 0))
    for s, name in enumerate(series):
        y = top + 10 + s * 26
        canvas.rect(width - right + 20, y, 16, 16, PALETTE[s % len(PALETTE)])
        canvas.text(width - right + 44, y + 3, name)
    canvas.save(path)


def _nice_step(raw: float) -> float:
    magnitude = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 0.1
    while magnitude > raw and magnitude > 0.01:
        magnitude /= 10
    for factor in (1, 2, 5, 10):
        if magnitude * factor >= raw:
            return magnitude * factor
    return magnitude * 10
