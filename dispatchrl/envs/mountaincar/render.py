"""MountainCar's RGB frame, gymnasium's classic-control drawing in numpy."""

import math
from typing import Any

import numpy as np

from ..render import BLACK, FRAME_SIZE, canvas, capsule, disc
from .env import GOAL_POSITION, MAX_POSITION, MIN_POSITION

__all__ = ["mountaincar_frame"]


def _height(x: Any) -> Any:
    """gymnasium's hill: sin(3 x) * 0.45 + 0.55."""
    return np.sin(3 * x) * 0.45 + 0.55


def mountaincar_frame(position: float) -> np.ndarray:
    """MountainCar with the car at ``position``: gymnasium's black hill over [-1.2, 0.6], the car
    along the slope, the goal flag at 0.5."""
    scale = FRAME_SIZE / (MAX_POSITION - MIN_POSITION)
    ground = FRAME_SIZE - 60

    def pixel(x: float, y: float) -> tuple[float, float]:
        return ground - y * scale, (x - MIN_POSITION) * scale

    frame = canvas()
    cols = np.arange(FRAME_SIZE)
    rows = np.round(ground - _height(MIN_POSITION + (cols + 0.5) / scale) * scale).astype(int)
    frame[rows, cols] = BLACK
    frame[rows + 1, cols] = BLACK
    flag_row, flag_col = pixel(GOAL_POSITION, float(_height(GOAL_POSITION)))
    frame[round(flag_row) - 50 : round(flag_row), round(flag_col)] = BLACK
    frame[round(flag_row) - 50 : round(flag_row) - 40, round(flag_col) : round(flag_col) + 25] = (204, 204, 0)
    slope = math.atan(1.35 * math.cos(3 * position))  # d height / dx, the car's tilt
    base = pixel(position, float(_height(position)))
    up = (-math.cos(slope), -math.sin(slope))  # (row, col) normal, away from the hill
    along = (-math.sin(slope), math.cos(slope))  # (row, col) tangent, rightwards
    half, lift, wheel = 20 / 333 * scale, 10 / 333 * scale, 8 / 333 * scale  # gymnasium's pixels at its scale
    centre = (base[0] + up[0] * (lift + wheel), base[1] + up[1] * (lift + wheel))
    capsule(
        frame,
        (centre[0] - along[0] * half, centre[1] - along[1] * half),
        (centre[0] + along[0] * half, centre[1] + along[1] * half),
        wheel,
        BLACK,
    )
    for side in (-0.5, 0.5):
        hub = (base[0] + up[0] * wheel + along[0] * half * side, base[1] + up[1] * wheel + along[1] * half * side)
        disc(frame, hub, wheel * 0.8, (128, 128, 128))
    return frame
