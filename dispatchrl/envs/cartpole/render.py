"""CartPole's RGB frame, gymnasium's classic-control drawing in numpy."""

import math

import numpy as np

from ..render import BLACK, FRAME_SIZE, canvas, capsule, disc
from .env import LENGTH, X_THRESHOLD

__all__ = ["cartpole_frame"]


def cartpole_frame(x: float, theta: float) -> np.ndarray:
    """CartPole with the cart at ``x`` and the pole at angle ``theta`` (0 upright, positive
    leaning right): gymnasium's black track and cart, brown pole, blue axle, in the
    ``2 * x_threshold``-wide view."""
    scale = FRAME_SIZE / (2 * X_THRESHOLD)
    track = round(0.7 * FRAME_SIZE)
    cart_half_width, cart_height = 25 / 125 * scale, 30 / 125 * scale  # gymnasium's pixels at its scale
    centre = FRAME_SIZE / 2 + x * scale
    frame = canvas()
    frame[track, :] = BLACK
    left, right = max(round(centre - cart_half_width), 0), min(round(centre + cart_half_width), FRAME_SIZE)
    top = round(track - cart_height / 2)
    frame[top : round(track + cart_height / 2), left:right] = BLACK
    axle = (track - cart_height / 4, centre)
    pole_length = 2 * LENGTH * scale
    tip = (axle[0] - pole_length * math.cos(theta), axle[1] + pole_length * math.sin(theta))
    capsule(frame, axle, tip, 5 / 125 * scale, (202, 152, 101))
    disc(frame, axle, 5 / 125 * scale, (129, 132, 203))
    return frame
