"""The multirotor's RGB frame, drawn with numpy: a top view and a side view of the vehicle's pose."""

import numpy as np

from ...errors import ShapeError
from ..render import FRAME_SIZE, capsule, disc
from .env import CRAZYFLIE, MultirotorParameters
from .generic import rotation_matrices
from .layout import INTEGRATED, POS, QUAT, RPM

__all__ = ["ENLARGE", "multirotor_frame"]

#: how many times the vehicle is drawn larger than it is (the Crazyflie's 28 mm arms would be 11
#: pixels across in a 0.75 m half-width view); positions are drawn to scale
ENLARGE = 5.0

BOX, TARGET, FRONT_ARM, REAR_ARM, BODY, THRUST = (
    (170, 170, 170),
    (0, 160, 0),
    (204, 60, 60),
    (70, 70, 70),
    (0, 0, 0),
    (230, 150, 0),
)
IDLE_ROTOR, FULL_ROTOR = np.array([190, 215, 255.0]), np.array([10, 50, 190.0])

#: per panel: the world axes drawn rightwards and upwards, the depth axis and its sign towards the
#: viewer (x right and z up: y points into the screen)
_TOP, _SIDE = (0, 1, 2, 1.0), (0, 2, 1, -1.0)


def _rotor_shape(n: np.ndarray, towards_viewer: int, radius: float) -> tuple[np.ndarray, float]:
    """A rotor disc of ``radius`` with normal ``n`` as the view sees it: an ellipse, drawn as the
    stadium of its major semi-axis (the disc's direction across the viewing axis) and its minor
    semi-axis ``radius |n · e|``. Returns the stadium's half-segment (3-vector) and its radius."""
    e = np.zeros(3)
    e[towards_viewer] = 1.0
    across = np.cross(e, n)
    norm = float(np.linalg.norm(across))
    minor = radius * abs(float(n[towards_viewer]))
    if norm < 1e-9:  # seen face on: a disc
        return np.zeros(3), radius
    return across / norm * (radius - minor), minor


def multirotor_frame(
    physics_row: np.ndarray, parameters: MultirotorParameters = CRAZYFLIE, box: float = 0.6
) -> np.ndarray:
    """The vehicle of ``physics_row`` (a physics row of :class:`Multirotor`: position, quaternion
    w x y z, ..., rotor RPM) as two FRAME_SIZE square panels side by side, uint8
    (FRAME_SIZE, 2 FRAME_SIZE, 3): left, the top view (x right, y up); right, the side view (x
    right, z up). Each shows the termination box (half-width ``box``, m) in grey and the target
    (the origin) as a green cross, to scale; the vehicle at its position but drawn ``ENLARGE``
    (5) times larger than it is: its arms from the centre to ``parameters.rotor_positions``
    rotated by the quaternion (the front ones, body x > 0, red), its thrust axis (body z) in
    orange and its rotors as discs seen in perspective (nearer over farther), from light
    (``rpm_min``) to dark blue (``rpm_max``), under the arms."""
    row = np.asarray(physics_row, np.float64)
    if row.ndim != 1 or row.shape[0] < INTEGRATED:
        raise ShapeError(
            f"multirotor_frame: argument 'physics_row' must be one physics row of at least {INTEGRATED} "
            f"entries (position, quaternion, velocities, rotor RPM), got shape {row.shape}"
        )
    half = FRAME_SIZE / 2
    scale = half / (1.25 * box)  # pixels per m
    position = row[POS : POS + 3]
    rotation = rotation_matrices(row[None, QUAT : QUAT + 4])[0].reshape(3, 3)  # body → world
    body = np.asarray(parameters.rotor_positions, np.float64)
    rotors = position + ENLARGE * body @ rotation.T  # world positions of the drawn rotor centres
    offsets = body[:, None, :] - body[None, :, :]
    spacing = np.linalg.norm(offsets, axis=2)[~np.eye(4, dtype=bool)].min()
    rotor_radius = ENLARGE * 0.3 * spacing  # apart, leaving the arms visible
    normal = rotation[:, 2]
    fraction = np.clip((row[RPM : RPM + 4] - parameters.rpm_min) / (parameters.rpm_max - parameters.rpm_min), 0, 1)
    fraction = np.nan_to_num(fraction)

    frame = np.full((FRAME_SIZE, 2 * FRAME_SIZE, 3), 255, np.uint8)  # white (a fill by bytes: fast)
    for panel, (right, up, depth, sign) in enumerate((_TOP, _SIDE)):
        view = frame[:, panel * FRAME_SIZE : (panel + 1) * FRAME_SIZE]

        def pixel(point: np.ndarray) -> tuple[float, float]:
            return half - scale * float(point[up]), half + scale * float(point[right])  # noqa: B023

        edge = round(scale * box)
        lo, hi = round(half) - edge, round(half) + edge
        view[lo : hi + 1, [lo, hi]] = BOX
        view[[lo, hi], lo : hi + 1] = BOX
        centre = pixel(position)
        along, radius = _rotor_shape(normal, depth, rotor_radius)
        for i in np.argsort(sign * rotors[:, depth], kind="stable"):  # far to near
            color = tuple(int(c) for c in IDLE_ROTOR + fraction[i] * (FULL_ROTOR - IDLE_ROTOR))
            capsule(view, pixel(rotors[i] - along), pixel(rotors[i] + along), max(scale * radius, 1.5), color)
        for i in range(len(body)):  # over the rotors, so the pose reads at any attitude
            capsule(view, centre, pixel(rotors[i]), 3.0, FRONT_ARM if body[i, 0] > 0 else REAR_ARM)
        disc(view, centre, 5.0, BODY)
        capsule(view, centre, pixel(position + ENLARGE * 0.03 * normal), 2.0, THRUST)
        capsule(view, (half - 6, half), (half + 6, half), 1.5, TARGET)  # last: never hidden
        capsule(view, (half, half - 6), (half, half + 6), 1.5, TARGET)
    frame[:, FRAME_SIZE - 1 : FRAME_SIZE + 1] = BOX  # the panels' border
    return frame
