"""RGB frames of the native envs, drawn with numpy only (no pygame): the shapes of gymnasium's
classic-control renderings (Pendulum's rod and axle, Acrobot's two links, joints and goal line).

Shapes are rasterised from distance fields on the pixel grid: a pixel takes a shape's colour
when its centre lies within the shape. Frames are ``FRAME_SIZE`` square (a multiple of 16, so
video encoders need not resize them), uint8 (H, W, 3).
"""

import math

import numpy as np

__all__ = ["FRAME_SIZE", "acrobot_frame", "pendulum_frame"]

FRAME_SIZE = 400

_WHITE, _BLACK = (255, 255, 255), (0, 0, 0)


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = np.mgrid[0:size, 0:size]
    return rows + 0.5, cols + 0.5


_GRID = _grid(FRAME_SIZE)


def _canvas() -> np.ndarray:
    return np.full((FRAME_SIZE, FRAME_SIZE, 3), _WHITE, np.uint8)


def _capsule(frame: np.ndarray, a: tuple[float, float], b: tuple[float, float], radius: float, color: tuple) -> None:
    """The segment a → b ((row, col) pixels) thickened to ``radius``, with round ends."""
    rows, cols = _GRID
    dr, dc = b[0] - a[0], b[1] - a[1]
    length2 = max(dr * dr + dc * dc, 1e-12)
    t = np.clip(((rows - a[0]) * dr + (cols - a[1]) * dc) / length2, 0.0, 1.0)
    distance2 = (rows - a[0] - t * dr) ** 2 + (cols - a[1] - t * dc) ** 2
    frame[distance2 <= radius * radius] = color


def _disc(frame: np.ndarray, centre: tuple[float, float], radius: float, color: tuple) -> None:
    rows, cols = _GRID
    frame[(rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius * radius] = color


def pendulum_frame(theta: float) -> np.ndarray:
    """Pendulum-v1 at angle ``theta`` (0 upright): gymnasium's red rod of length 1 in a 2.2-wide
    view, its black axle."""
    scale = FRAME_SIZE / 4.4
    centre = (FRAME_SIZE / 2, FRAME_SIZE / 2)
    tip = (centre[0] - scale * math.cos(theta), centre[1] - scale * math.sin(theta))
    frame = _canvas()
    _capsule(frame, centre, tip, 0.1 * scale, (204, 77, 77))
    _disc(frame, centre, 0.05 * scale, _BLACK)
    return frame


def acrobot_frame(theta1: float, theta2: float) -> np.ndarray:
    """Acrobot at joint angles ``theta1``, ``theta2`` (0, 0 hanging down): gymnasium's goal line
    at height 1, two cyan links of length 1, yellow joints, in a 4.4-wide view."""
    scale = FRAME_SIZE / 4.4
    origin = (FRAME_SIZE / 2, FRAME_SIZE / 2)

    def pixel(x: float, y: float) -> tuple[float, float]:
        return origin[0] - scale * y, origin[1] + scale * x

    p1 = (math.sin(theta1), -math.cos(theta1))
    p2 = (p1[0] + math.sin(theta1 + theta2), p1[1] - math.cos(theta1 + theta2))
    frame = _canvas()
    goal_row = round(pixel(0.0, 1.0)[0])
    frame[goal_row - 1 : goal_row + 1, int(origin[1] - 2.2 * scale) : int(origin[1] + 2.2 * scale)] = _BLACK
    for start, end in ((pixel(0.0, 0.0), pixel(*p1)), (pixel(*p1), pixel(*p2))):
        _capsule(frame, start, end, 0.1 * scale, (0, 204, 204))
    for joint in (pixel(0.0, 0.0), pixel(*p1)):
        _disc(frame, joint, 0.1 * scale, (204, 204, 0))
    return frame
