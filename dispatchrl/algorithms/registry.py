"""The algorithms dispatchrl ships, by name: the CLI's choices and checkpoints' ``algo`` field.
The annotation makes a type checker hold each module to :class:`.protocol.Algorithm`."""

from collections.abc import Mapping

from . import dqn, ppo, sac, td3
from .protocol import Algorithm

__all__ = ["ALGORITHMS"]

ALGORITHMS: Mapping[str, Algorithm] = {td3.NAME: td3, sac.NAME: sac, ppo.NAME: ppo, dqn.NAME: dqn}
