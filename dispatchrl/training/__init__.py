"""Training, above the algorithms: the driver that runs any :class:`~dispatchrl.algorithms.protocol.Algorithm`,
env specs, runs (results, checkpoints, resume), progress, callbacks and evaluation."""

__all__: list[str] = []
