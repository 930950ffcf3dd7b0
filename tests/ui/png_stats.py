"""The pixels of a screenshot, decoded with the stdlib alone (no Pillow in the venv): enough to tell
a rendered page from a blank one. Reads 8-bit, non-interlaced grey/RGB/RGBA PNGs, what headless
Chromium writes; anything else raises PNGError saying what it is."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path


class PNGError(ValueError):
    """Not a PNG this module reads (the message says why)."""


def png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, unfiltered rows) of an 8-bit non-interlaced RGB/RGBA/grey PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise PNGError("not a PNG file")
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if ihdr is None:
        raise PNGError("PNG without IHDR")
    width, height, depth, colour_type, _, _, interlace = ihdr
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour_type)
    if depth != 8 or bpp is None or interlace:
        raise PNGError(f"unsupported PNG (bit depth {depth}, colour type {colour_type}, interlace {interlace})")
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if ftype == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif ftype == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif ftype != 0:
            raise PNGError(f"bad PNG filter type {ftype} in row {y}")
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def image_stats(png: Path, step: int = 4) -> tuple[int, float]:
    """(distinct colours, share of pixels unlike the most common colour), sampled every `step` pixels."""
    width, height, bpp, rows = png_pixels(png.read_bytes())
    counts: Counter[bytes] = Counter()
    for y in range(0, height, step):
        row = rows[y]
        for x in range(0, width, step):
            counts[row[x * bpp:x * bpp + bpp]] += 1
    total = sum(counts.values())
    return len(counts), 1 - counts.most_common(1)[0][1] / total
