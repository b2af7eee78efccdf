"""Drawing for the native envs' RGB frames, with numpy only (no pygame): each env's ``render.py``
draws the shapes of gymnasium's classic-control rendering with these primitives.

Shapes are rasterised from distance fields on the pixel grid: a pixel takes a shape's colour
when its centre lies within the shape. Frames are ``FRAME_SIZE`` square (a multiple of 16, so
video encoders need not resize them), uint8 (H, W, 3).
"""

import numpy as np

__all__ = ["BLACK", "FRAME_SIZE", "WHITE", "canvas", "capsule", "disc"]

FRAME_SIZE = 400

WHITE, BLACK = (255, 255, 255), (0, 0, 0)


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = np.mgrid[0:size, 0:size]
    return rows + 0.5, cols + 0.5


_GRID = _grid(FRAME_SIZE)


def canvas() -> np.ndarray:
    """A white FRAME_SIZE square frame."""
    return np.full((FRAME_SIZE, FRAME_SIZE, 3), WHITE, np.uint8)


def capsule(frame: np.ndarray, a: tuple[float, float], b: tuple[float, float], radius: float, color: tuple) -> None:
    """The segment a → b ((row, col) pixels) thickened to ``radius``, with round ends."""
    rows, cols = _GRID
    dr, dc = b[0] - a[0], b[1] - a[1]
    length2 = max(dr * dr + dc * dc, 1e-12)
    t = np.clip(((rows - a[0]) * dr + (cols - a[1]) * dc) / length2, 0.0, 1.0)
    distance2 = (rows - a[0] - t * dr) ** 2 + (cols - a[1] - t * dc) ** 2
    frame[distance2 <= radius * radius] = color


def disc(frame: np.ndarray, centre: tuple[float, float], radius: float, color: tuple) -> None:
    """The disc of ``radius`` around ``centre`` ((row, col) pixels)."""
    rows, cols = _GRID
    frame[(rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius * radius] = color
