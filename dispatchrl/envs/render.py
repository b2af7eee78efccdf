"""Drawing for the native envs' RGB frames, with numpy only (no pygame): each env's ``render.py``
draws the shapes of gymnasium's classic-control rendering with these primitives.

Shapes are rasterised from distance fields on the pixel grid: a pixel takes a shape's colour
when its centre lies within the shape (tested only around the shape, on a frame of any size). The
envs' frames are ``FRAME_SIZE`` square (a multiple of 16, so video encoders need not resize them),
uint8 (H, W, 3).
"""

import math

import numpy as np

__all__ = ["BLACK", "FRAME_SIZE", "WHITE", "canvas", "capsule", "disc"]

FRAME_SIZE = 400

WHITE, BLACK = (255, 255, 255), (0, 0, 0)


def _box(frame: np.ndarray, rows: tuple[float, ...], cols: tuple[float, ...], radius: float) -> tuple:
    """The slices of ``frame`` holding every pixel whose centre lies within ``radius`` of the
    points' bounding box, and those pixels' centres (a column and a row, to broadcast): a shape
    is tested only where it can be (a few ms per frame instead of the whole grid per shape)."""
    height, width = frame.shape[:2]
    if not all(math.isfinite(v) for v in (*rows, *cols, radius)):  # nothing to draw (as NaN distances)
        return (slice(0, 0), slice(0, 0)), np.zeros((0, 1)), np.zeros((1, 0))
    top, bottom = max(math.floor(min(rows) - radius), 0), min(math.ceil(max(rows) + radius) + 1, height)
    left, right = max(math.floor(min(cols) - radius), 0), min(math.ceil(max(cols) + radius) + 1, width)
    top, left = min(top, bottom), min(left, right)
    window = (slice(top, bottom), slice(left, right))
    return window, np.arange(top, bottom)[:, None] + 0.5, np.arange(left, right)[None, :] + 0.5


def canvas() -> np.ndarray:
    """A white FRAME_SIZE square frame."""
    return np.full((FRAME_SIZE, FRAME_SIZE, 3), WHITE, np.uint8)


def capsule(frame: np.ndarray, a: tuple[float, float], b: tuple[float, float], radius: float, color: tuple) -> None:
    """The segment a → b ((row, col) pixels) thickened to ``radius``, with round ends."""
    window, rows, cols = _box(frame, (a[0], b[0]), (a[1], b[1]), radius)
    dr, dc = b[0] - a[0], b[1] - a[1]
    length2 = max(dr * dr + dc * dc, 1e-12)
    t = np.clip(((rows - a[0]) * dr + (cols - a[1]) * dc) / length2, 0.0, 1.0)
    distance2 = (rows - a[0] - t * dr) ** 2 + (cols - a[1] - t * dc) ** 2
    frame[window][distance2 <= radius * radius] = color


def disc(frame: np.ndarray, centre: tuple[float, float], radius: float, color: tuple) -> None:
    """The disc of ``radius`` around ``centre`` ((row, col) pixels)."""
    window, rows, cols = _box(frame, (centre[0],), (centre[1],), radius)
    frame[window][(rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius * radius] = color
