"""Pendulum's RGB frame, gymnasium's classic-control drawing in numpy."""

import math

import numpy as np

from ..render import BLACK, FRAME_SIZE, canvas, capsule, disc

__all__ = ["pendulum_frame"]


def pendulum_frame(theta: float) -> np.ndarray:
    """Pendulum-v1 at angle ``theta`` (0 upright): gymnasium's red rod of length 1 in a 2.2-wide
    view, its black axle."""
    scale = FRAME_SIZE / 4.4
    centre = (FRAME_SIZE / 2, FRAME_SIZE / 2)
    tip = (centre[0] - scale * math.cos(theta), centre[1] - scale * math.sin(theta))
    frame = canvas()
    capsule(frame, centre, tip, 0.1 * scale, (204, 77, 77))
    disc(frame, centre, 0.05 * scale, BLACK)
    return frame
