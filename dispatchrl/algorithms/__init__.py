"""Algorithms written once over generic functions: no device code in here.

``td3``, ``sac`` and ``ppo`` each satisfy :class:`.protocol.Algorithm`; :mod:`.driver` trains any
of them, :mod:`.runs` saves and loads their runs, :mod:`.evaluation` evaluates their policies.
"""

from ..training.callbacks import EvalCallback, StopOnReward
from ..training.driver import Hook, TrainingRun
from ..training.evaluation import EVAL_SEEDS, evaluate
from ..training.runs import TrainResult, load_run
from . import ppo, sac, td3
from .protocol import Algorithm
from .registry import ALGORITHMS

__all__ = [
    "ALGORITHMS",
    "EVAL_SEEDS",
    "Algorithm",
    "EvalCallback",
    "Hook",
    "StopOnReward",
    "TrainResult",
    "TrainingRun",
    "evaluate",
    "load_run",
    "ppo",
    "sac",
    "td3",
]
