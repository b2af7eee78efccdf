"""Shared by the cross-device agreement tests of the fused off-policy steps."""

import dispatchrl as drl
from dispatchrl import checkpoint


def run_arrays(result):
    """Every array of the run's state, the scratch buffers (the last sampled batch) included."""
    leaves = [*checkpoint.named_arrays(result.state), *checkpoint.scratch_arrays(result.state)]
    return {name: drl.to_numpy(a) for name, a in leaves}


def against_generic(algo, config, short, cuda_device):
    """[(device, its arrays, Generic's arrays of the same config)]: CPU and C train ``config`` on
    Pendulum, CUDA the shorter ``short`` (the simulator runs each CUDA thread in Python), each
    beside a Generic run of its own config, from seed 0."""

    def train(device, c):
        return run_arrays(algo.train(device, "pendulum", c, seed=0, progress=False))

    references = {c.total_steps: train(drl.Generic(), c) for c in (config, short)}
    compared = []
    for device, c in ((drl.CPU(), config), (drl.C(), config), (cuda_device, short)):
        got, reference = train(device, c), references[c.total_steps]
        assert got.keys() == reference.keys(), device
        compared.append((device, got, reference))
    return compared
