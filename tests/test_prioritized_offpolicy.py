"""Prioritized replay inside the fused TD3/SAC steps: device agreement, the trees' invariants,
the β schedule, resume, the CLI switch; the default stays uniform (no priorities in the state)."""

import dataclasses

import numpy as np
import pytest
from agreement import against_generic, run_arrays

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import sac, td3
from dispatchrl.cli import main
from dispatchrl.kernels.replay.api import tree_leaves

ALGOS = {"td3": td3, "sac": sac}


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_prioritized_first_updates_agree_across_devices(name, cuda_device):
    algo = ALGOS[name]
    config = algo.Config(total_steps=8, warmup_steps=4, batch_size=4, hidden=(8, 8), prioritized=True)
    # the simulator runs each CUDA thread in Python: CUDA trains 6 steps (2 updates, one with TD3's
    # actor, the second sampling by the priorities the first wrote; ~15 s, ~30 s for 8) against a
    # Generic run of those 6
    short = dataclasses.replace(config, total_steps=6)
    for device, got, reference in against_generic(algo, config, short, cuda_device):
        for key in ("priorities.index.", "priorities.beta."):
            np.testing.assert_array_equal(got[key], reference[key], err_msg=f"{device} {key}")
        for key, value in got.items():
            if ".weights." in key or key.startswith("priorities."):
                np.testing.assert_allclose(value, reference[key], rtol=1e-4, atol=1e-5, err_msg=f"{device} {key}")


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_prioritized_trees_hold_td_error_priorities(name):
    algo = ALGOS[name]
    config = algo.Config(
        total_steps=300,
        warmup_steps=100,
        batch_size=32,
        prioritized=True,
        priority_alpha=0.7,
        priority_beta=0.5,
        replay_capacity=256,
    )
    result = algo.train(drl.CPU(), "pendulum", config, seed=1, progress=False)
    p = result.state.priorities
    sum_tree, min_tree = drl.to_numpy(p.sum_tree), drl.to_numpy(p.min_tree)
    leaves = tree_leaves(256)
    stored = sum_tree[leaves : leaves + 256]
    assert sum_tree.shape == (2 * leaves,) and np.all(stored > 0)  # wrapped: every row stored
    assert sum_tree[1] == pytest.approx(stored.sum(), rel=1e-9)
    assert min_tree[1] == stored.min()
    # the last sampled rows hold (mean |TD error| + eps) ** alpha of the twin critics
    index, priority = drl.to_numpy(p.index), drl.to_numpy(p.priority).astype(np.float64)
    last = {}
    for i, pr in zip(index, priority):
        last[int(i)] = pr
    for i, pr in last.items():
        assert stored[i] == pytest.approx((pr + config.priority_eps) ** 0.7, rel=1e-12)
    assert drl.to_numpy(p.max_priority)[0] >= priority.max()
    # β annealed linearly from 0.5 towards 1 over the run (read at the last update, step 299)
    assert drl.to_numpy(p.beta)[0] == pytest.approx(0.5 + 0.5 * 299 / 300)
    weight = drl.to_numpy(p.weight)
    assert np.all(weight > 0) and np.all(weight <= 1.0 + 1e-6)


def test_default_is_uniform_without_priorities():
    result = td3.train(drl.CPU(), "pendulum", td3.Config(total_steps=150, warmup_steps=100), seed=0, progress=False)
    assert result.state.priorities is None
    assert not any(name.startswith("priorities") for name in run_arrays(result))


def test_prioritized_resume_is_bit_identical(tmp_path):
    # the β schedule and the ring's size must not depend on the run's length for a resume to match
    config = td3.Config(
        total_steps=600, warmup_steps=100, prioritized=True, replay_capacity=600, priority_beta_steps=600
    )
    half = td3.train(drl.CPU(), "pendulum", dataclasses.replace(config, total_steps=300), seed=1, progress=False)
    half.save(tmp_path / "half")
    resumed = td3.train(drl.CPU(), "pendulum", config, seed=1, progress=False, resume=tmp_path / "half")
    straight = td3.train(drl.CPU(), "pendulum", config, seed=1, progress=False)
    a, b = ({n: drl.to_numpy(x) for n, x in checkpoint.named_arrays(r.state)} for r in (resumed, straight))
    assert a.keys() == b.keys() and "priorities.sum_tree." in a
    assert [n for n in a if not np.array_equal(a[n], b[n])] == []


def test_cli_set_prioritized(capsys):
    assert (
        main(
            [
                "train",
                "td3",
                "--env",
                "pendulum",
                "--steps",
                "200",
                "--set",
                "prioritized=true",
                "--set",
                "priority_alpha=0.5",
                "--json",
            ]
        )
        == 0
    )
    with pytest.raises(drl.ConfigError, match="priority_beta"):
        td3.train(drl.CPU(), "pendulum", td3.Config(prioritized=True, priority_beta=1.5), progress=False)
