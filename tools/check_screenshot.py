#!/usr/bin/env python3
"""Checks that a PNG screenshot is not blank: decodes it (standard library only: zlib and
the PNG filters) and requires at least MIN_COLOURS distinct pixel values and a share of
non-background pixels. Used by CI on chromium's headless screenshot of `jpower
characterize`'s report.html.

Usage: check_screenshot.py SHOT.png
"""
import struct
import sys
import zlib

MIN_COLOURS = 8
MIN_INK = 0.01  # share of pixels that differ from the most common one


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, width, height, depth, colour = 8, b"", 0, 0, 0, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
    if depth != 8 or colour not in (2, 6):
        sys.exit(f"{path}: expected 8-bit RGB or RGBA, got depth {depth} colour type {colour}")
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, rows = bytearray(stride), []
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [r[i : i + 3] for r in rows for i in range(0, stride, bpp)]


def main():
    path = sys.argv[1]
    width, height, px = pixels(path)
    counts = {}
    for p in px:
        counts[p] = counts.get(p, 0) + 1
    ink = 1 - max(counts.values()) / len(px)
    print(f"{path}: {width}x{height}, {len(counts)} colours, {ink:.1%} non-background")
    if len(counts) < MIN_COLOURS or ink < MIN_INK:
        sys.exit(f"{path}: the screenshot is blank")


if __name__ == "__main__":
    main()
