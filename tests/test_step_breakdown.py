"""benchmarks/step_breakdown.py's accounting: the branch counts it replays are what a real fused
run executes, every kernel of the TD3/SAC steps has a category, and every dense kernel has a
products-only twin that computes its products."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.kernels.core.cpu import dense_backward_input_blas
from dispatchrl.staging import kernel_calls

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "step_breakdown.py"


@pytest.fixture(scope="module")
def breakdown():
    spec = importlib.util.spec_from_file_location("step_breakdown", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replayed_counts_match_a_real_fused_run(breakdown):
    # 1100 steps: 100 of warm-up, critic updates after, actor/target updates every 2nd step, one
    # divergence check (at step 1000)
    run, divergence = breakdown.build("td3", seed=3)
    loop = drl.training.driver._NativeLoop(run, divergence)
    nodes, calls = loop.env_step.calls, loop.env_step.kernel_calls
    steps = 1100
    counts, counters = breakdown.execution_counts(nodes, steps)
    loop.run(steps)
    state = run.state

    by_name = {}
    for (kernel, args), count in zip(calls, counts):
        by_name.setdefault(kernel.__name__, []).append((args, count))
    assert [c for _, c in by_name["accumulate_critic_stats_kernel"]] == [int(state.critic_stats.data[0])] == [1000]
    assert [c for _, c in by_name["accumulate_actor_stats_kernel"]] == [int(state.actor_stats.data[0])] == [500]
    assert [c for _, c in by_name["replay_add_kernel"]] == [int(state.replay.size.data[0])] == [steps]
    assert {c for _, c in by_name["nonfinite_flag_kernel"]} == {1}
    assert counters == {id(state.step.data): steps} and int(state.step.data[0]) == steps
    # Adam counts its own steps: each counter's real value is the replayed calls that advance it
    adam_steps = {}
    for args, count in by_name["adam_step_kernel"]:
        counter = args[4].data
        adam_steps[id(counter)] = (counter, adam_steps.get(id(counter), (counter, 0))[1] + count)
    assert sorted(n for _, n in adam_steps.values()) == sorted(int(c[0]) for c, _ in adam_steps.values())
    assert {n for _, n in adam_steps.values()} == {500, 1000}


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_every_kernel_has_a_category_and_dense_ones_a_products_twin(breakdown, algo):
    run, divergence = breakdown.build(algo)
    calls = list(kernel_calls(breakdown.traced_step(run, divergence)))
    names = {kernel.__name__ for kernel, _ in calls}
    assert names <= set(breakdown.CATEGORIES), names - set(breakdown.CATEGORIES)
    dense = {name for name in names if breakdown.CATEGORIES[name] == "dense"}
    assert dense and dense <= set(breakdown.GEMM_ONLY)
    assert {breakdown.category(kernel) for kernel, _ in calls} >= {"dense", "adam_polyak", "env", "replay"}


def test_products_twins_compute_the_dense_kernels_products(breakdown):
    g = np.random.default_rng(0)
    m, k, n = 20, 24, 16
    x, W, d_pre = (g.normal(size=s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    WT = np.ascontiguousarray(W.T)
    out, dW, d_x = np.zeros((m, n), np.float32), np.zeros((k, n), np.float32), np.zeros((m, k), np.float32)
    unused = np.zeros((m, n), np.float32)
    breakdown.GEMM_ONLY["dense_forward_inplace_blas"](x, W, np.zeros(n, np.float32), out, 1)
    np.testing.assert_allclose(out, x.astype(np.float64) @ W, rtol=1e-5, atol=1e-5)
    breakdown.GEMM_ONLY["dense_backward_input_blas"](
        x, W, WT, unused, unused, unused, d_pre, dW, np.zeros(n, np.float32), d_x, 1
    )
    np.testing.assert_allclose(dW, x.T.astype(np.float64) @ d_pre, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_x, d_pre.astype(np.float64) @ W.T, rtol=1e-5, atol=1e-5)
    cpu = drl.CPU()
    shapes = (drl.zeros(cpu, (m, k)), drl.zeros(cpu, (k, n)))
    assert breakdown.gemm_flops(dense_backward_input_blas, shapes) == 4 * m * k * n  # two products
