"""Acrobot's RGB frame, gymnasium's classic-control drawing in numpy."""

import math

import numpy as np

from ..render import BLACK, FRAME_SIZE, canvas, capsule, disc

__all__ = ["acrobot_frame"]


def acrobot_frame(theta1: float, theta2: float) -> np.ndarray:
    """Acrobot at joint angles ``theta1``, ``theta2`` (0, 0 hanging down): gymnasium's goal line
    at height 1, two cyan links of length 1, yellow joints, in a 4.4-wide view."""
    scale = FRAME_SIZE / 4.4
    origin = (FRAME_SIZE / 2, FRAME_SIZE / 2)

    def pixel(x: float, y: float) -> tuple[float, float]:
        return origin[0] - scale * y, origin[1] + scale * x

    p1 = (math.sin(theta1), -math.cos(theta1))
    p2 = (p1[0] + math.sin(theta1 + theta2), p1[1] - math.cos(theta1 + theta2))
    frame = canvas()
    goal_row = round(pixel(0.0, 1.0)[0])
    frame[goal_row - 1 : goal_row + 1, int(origin[1] - 2.2 * scale) : int(origin[1] + 2.2 * scale)] = BLACK
    for start, end in ((pixel(0.0, 0.0), pixel(*p1)), (pixel(*p1), pixel(*p2))):
        capsule(frame, start, end, 0.1 * scale, (0, 204, 204))
    for joint in (pixel(0.0, 0.0), pixel(*p1)):
        disc(frame, joint, 0.1 * scale, (204, 204, 0))
    return frame
