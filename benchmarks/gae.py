"""GAE over 1000 trajectories × 1000 steps (done probability 0.001): dispatchrl's CPU kernel vs
Tianshou's numba ``_gae`` and a NumPy reference, in the same run.

    python benchmarks/gae.py [--repeats 30]

dispatchrl is timed as a generic-function call (validation and dispatch included), inside a
one-call fused step (how PPO runs it), and computing advantages only (``returns=None``), which is
what Tianshou's ``_gae`` computes: the target is judged on that like-for-like pair. It runs on the (time, envs) = (1000, 1000) float32 layout it stores rollouts in, with
terminated/truncated flags and next values (partial-episode bootstrapping). Tianshou runs its core
recursion on its flat buffer layout (the 1000 trajectories one after another, 1M steps, end flags
= done or trajectory end, next values already masked), exactly what ``compute_episodic_return``
hands it; the masking is not timed, so Tianshou gets the benefit of the doubt. The NumPy
reference is the same recursion vectorised over envs. Timings alternate between the
implementations and report medians; results are checked against each other first. Without
tianshou installed its column is skipped and the line says so. Target: dispatchrl ≤ 0.2× Tianshou.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import dispatchrl as drl
from dispatchrl.kernels.onpolicy import gae

STEPS, ENVS, P_DONE = 1000, 1000, 0.001
GAMMA, LAM = 0.99, 0.95


def make_data(seed=0):
    g = np.random.default_rng(seed)
    f = lambda: g.normal(size=(STEPS, ENVS)).astype(np.float32)  # noqa: E731
    reward, value, next_value = f(), f(), f()
    done = g.random((STEPS, ENVS)) < P_DONE
    truncated_share = g.random((STEPS, ENVS)) < 0.5
    return reward, value, next_value, done & ~truncated_share, done & truncated_share


def numpy_gae(reward, value, next_value, terminated, truncated, advantage, returns):
    delta = reward + GAMMA * np.where(terminated, 0, next_value) - value
    carry = np.where(terminated | truncated, 0, GAMMA * LAM).astype(np.float32)
    running = np.zeros(ENVS, np.float32)
    for t in range(STEPS - 1, -1, -1):
        running = delta[t] + carry[t] * running
        advantage[t] = running
    np.add(advantage, value, out=returns)


def tianshou_inputs(reward, value, next_value, terminated, truncated):
    """Trajectory n's steps consecutive (Tianshou's buffer), next values masked by termination."""
    flat = lambda x: np.ascontiguousarray(x.T).reshape(-1)  # noqa: E731
    end = terminated | truncated
    end[-1] = True  # each trajectory's last step: an unfinished (cut) episode ends the segment
    v_s_ = flat(np.where(terminated, 0, next_value).astype(np.float32))
    return flat(value), v_s_, flat(reward), flat(end)


def timed(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    data = make_data()
    cpu = drl.CPU()
    arrays = [drl.asarray(cpu, x) for x in data]
    advantage, returns = drl.zeros(cpu, (STEPS, ENVS)), drl.zeros(cpu, (STEPS, ENVS))
    step = drl.fuse(cpu, lambda device: gae(device, *arrays, GAMMA, LAM, advantage, returns))
    step()
    np_adv, np_ret = np.zeros((STEPS, ENVS), np.float32), np.zeros((STEPS, ENVS), np.float32)
    numpy_gae(*data, np_adv, np_ret)
    np.testing.assert_allclose(drl.to_numpy(advantage), np_adv, rtol=1e-3, atol=1e-3)
    only_advantages = drl.fuse(cpu, lambda device: gae(device, *arrays, GAMMA, LAM, advantage))
    runners = {
        "dispatchrl_cpu": lambda: gae(cpu, *arrays, GAMMA, LAM, advantage, returns),
        "dispatchrl_cpu_fused": lambda: step(),
        # what Tianshou's _gae computes: advantages only (its returns are a later numpy add)
        "dispatchrl_cpu_advantages_fused": lambda: only_advantages(),
        "numpy": lambda: numpy_gae(*data, np_adv, np_ret),
    }
    skipped = None
    try:
        from tianshou.algorithm.algorithm_base import _gae as tianshou_gae
    except ImportError as error:
        skipped = f"tianshou not installed ({error}); its column is skipped"
    else:
        ts_in = tianshou_inputs(*data)
        ts_adv = tianshou_gae(*ts_in, GAMMA, LAM)
        np.testing.assert_allclose(ts_adv.reshape(ENVS, STEPS).T, np_adv, rtol=1e-3, atol=1e-3)
        runners["tianshou_numba"] = lambda: tianshou_gae(*ts_in, GAMMA, LAM)
    samples = {name: [] for name in runners}
    for _ in range(args.repeats):  # alternate, so machine noise hits every implementation alike
        for name, fn in runners.items():
            samples[name] += timed(fn, 1)
    ms = {name: statistics.median(s) * 1e3 for name, s in samples.items()}
    record = {
        "benchmark": "gae",
        "steps": STEPS,
        "trajectories": ENVS,
        "done_probability": P_DONE,
        "repeats": args.repeats,
        **{f"{name}_ms": round(v, 3) for name, v in ms.items()},
        "ratio_vs_numpy": round(ms["dispatchrl_cpu"] / ms["numpy"], 4),
    }
    if "tianshou_numba" in ms:
        like_for_like = ms["dispatchrl_cpu_advantages_fused"] / ms["tianshou_numba"]
        record.update(
            ratio_vs_tianshou=round(like_for_like, 4),
            ratio_vs_tianshou_with_returns=round(ms["dispatchrl_cpu"] / ms["tianshou_numba"], 4),
            target="dispatchrl advantages <= 0.2x tianshou _gae (advantages)",
            meets_target=bool(like_for_like <= 0.2),
        )
    else:
        record.update(tianshou="skipped", reason=skipped)
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
