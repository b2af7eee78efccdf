"""n-step targets and the memmapped replay ring inside the fused TD3/SAC steps: windows against a
float64 numpy reference, device agreement, memmap runs bit-identical to in-memory ones (and
reopened by MemmapStorage), resume, the CLI switches; the defaults keep neither in the state."""

import dataclasses

import numpy as np
import pytest
from agreement import against_generic, run_arrays
from testkit import n_step_windows

import dispatchrl as drl
from dispatchrl.algorithms import sac, td3
from dispatchrl.cli import main
from dispatchrl.data import MemmapStorage, ReplayBuffer, TensorDict

ALGOS = {"td3": td3, "sac": sac}
SMALL = dict(total_steps=40, warmup_steps=10, batch_size=16, hidden=(8, 8), num_envs=2)


def windows(ring, index, num_envs, n, gamma):
    """Float64 numpy: each sampled row's window of its env's next transitions in the ring."""
    obs, reward, next_obs = (ring[k] for k in ("replay.obs.", "replay.reward.", "replay.next_obs."))
    terminated, truncated = ring["replay.terminated."], ring["replay.truncated."]
    newest = (int(ring["replay.position."][0]) - 1) % len(reward)
    total, discount, steps, last = n_step_windows(reward, terminated, truncated, newest, index, num_envs, n, gamma)
    return {
        "obs": obs[index],
        "reward": total,
        "next_obs": next_obs[last],
        "terminated": terminated[last],
        "truncated": truncated[last],
        "discount": discount,
        "steps": steps,
    }


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("name", ["td3", "sac"])
def test_n_step_batch_matches_float64_windows(name, prioritized):
    algo = ALGOS[name]
    # 230 steps per env pass Pendulum's 200-step time limit (truncations inside windows) and a
    # 500-row ring wraps (windows across its end); terminations: tests/test_replay_kernels.py
    config = algo.Config(
        total_steps=690,
        warmup_steps=60,
        batch_size=128,
        replay_capacity=500,
        n_step=4,
        gamma=0.9,
        num_envs=3,
        prioritized=prioritized,
    )
    result = algo.train(drl.CPU(), "pendulum", config, seed=2, progress=False)
    got = run_arrays(result)
    index = got["priorities.index." if prioritized else "n_step.index."]
    # the last update sampled after the last write: the final ring is the one it read
    ref = windows(got, index, 3, 4, 0.9)
    assert (ref["truncated"] & (ref["steps"] < 4)).any() and ref["steps"].max() == 4  # cut windows, full ones
    np.testing.assert_array_equal(got["batch.obs."], ref["obs"])
    np.testing.assert_array_equal(got["batch.next_obs."], ref["next_obs"])
    np.testing.assert_array_equal(got["batch.terminated."], ref["terminated"])
    np.testing.assert_array_equal(got["batch.truncated."], ref["truncated"])
    np.testing.assert_allclose(got["batch.reward."], ref["reward"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["n_step.discount."], ref["discount"], rtol=1e-14)


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_n_step_runs_agree_across_devices(name, cuda_device):
    algo = ALGOS[name]
    config = algo.Config(**SMALL, n_step=3)
    # the simulator runs each CUDA thread in Python: CUDA trains 24 steps (~15 s, ~50 s for 40; every
    # network and target updated, windows of 1 to 3 steps) against a Generic run of those 24
    short = dataclasses.replace(config, total_steps=24)
    for device, got, reference in against_generic(algo, config, short, cuda_device):
        # rows and windows do not depend on the float results (rewards drift by ulps with the policy)
        for key in ("n_step.index.", "n_step.discount.", "batch.terminated.", "batch.truncated."):
            np.testing.assert_array_equal(got[key], reference[key], err_msg=f"{device} {key}")
        for key, value in got.items():
            if ".weights." in key or key.startswith(("batch.", "q_target", "replay.reward")):
                np.testing.assert_allclose(value, reference[key], rtol=1e-4, atol=1e-5, err_msg=f"{device} {key}")


def test_n_step_one_is_the_default_path():
    base = td3.train(drl.CPU(), "pendulum", td3.Config(**SMALL), seed=1, progress=False)
    one = td3.train(drl.CPU(), "pendulum", td3.Config(**SMALL, n_step=1), seed=1, progress=False)
    assert base.state.n_step is None and one.state.n_step is None
    assert not any(name.startswith("n_step") for name in run_arrays(base))


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_memmap_ring_trains_bit_identically(name, tmp_path, device):
    algo = ALGOS[name]
    # the simulator runs each CUDA thread in Python: 24 steps there, the fewest that update every
    # network (the first update comes past step 21), same check
    config = algo.Config(**{**SMALL, "total_steps": 24} if isinstance(device, drl.CUDA) else SMALL)
    memory = algo.train(device, "pendulum", config, seed=3, progress=False)
    try:
        mapped = algo.train(
            device, "pendulum", dataclasses.replace(config, memmap_path=str(tmp_path / "ring")), seed=3, progress=False
        )
    except drl.DeviceError as error:
        # some drivers (a Firecracker VM's, Nov 2026) refuse to pin file-backed pages: refused clearly
        if isinstance(device, drl.CUDA) and "cannot map the memory-mapped replay files" in str(error):
            pytest.skip(f"this CUDA driver cannot map file-backed memory: {error}")
        raise
    a, b = run_arrays(memory), run_arrays(mapped)
    assert a.keys() == b.keys() and a["critic_stats."][0] > 0  # the critics were updated
    assert [k for k in a if not np.array_equal(a[k], b[k])] == []
    np.testing.assert_array_equal(
        memory.policy(np.ones((2, 3), np.float32)), mapped.policy(np.ones((2, 3), np.float32))
    )
    # the folder is a MemmapStorage / TensorDict: another reader sees the ring, length and cursor
    storage = MemmapStorage(config.capacity, tmp_path / "ring")
    assert (len(storage), storage.cursor) == (int(a["replay.size."][0]), int(a["replay.position."][0]))
    assert isinstance(storage.data, TensorDict)
    np.testing.assert_array_equal(storage.data["next_obs"], a["replay.next_obs."])
    np.testing.assert_array_equal(storage.data["terminated"], a["replay.terminated."])
    sample = ReplayBuffer(storage, batch_size=8).sample()
    np.testing.assert_array_equal(sample["obs"], a["replay.obs."][sample["index"]])


def test_memmap_n_step_resume_is_bit_identical(tmp_path):
    config = td3.Config(total_steps=300, warmup_steps=100, replay_capacity=300, n_step=3, num_envs=2)
    half = dataclasses.replace(config, total_steps=150, memmap_path=str(tmp_path / "half"))
    td3.train(drl.CPU(), "pendulum", half, seed=1, progress=False).save(tmp_path / "ckpt")
    resumed = td3.train(
        drl.CPU(),
        "pendulum",
        dataclasses.replace(config, memmap_path=str(tmp_path / "resumed")),
        seed=1,
        progress=False,
        resume=tmp_path / "ckpt",
    )
    straight = td3.train(drl.CPU(), "pendulum", config, seed=1, progress=False)
    a, b = run_arrays(resumed), run_arrays(straight)
    assert a.keys() == b.keys() and "n_step.discount." in a
    assert [n for n in a if not np.array_equal(a[n], b[n])] == []
    assert np.array_equal(np.load(tmp_path / "resumed" / "obs.npy"), b["replay.obs."])


def test_cli_set_n_step_and_memmap(tmp_path, capsys):
    ring = tmp_path / "ring"
    args = ["train", "sac", "--env", "pendulum", "--steps", "200", "--set", "n_step=3"]
    assert main([*args, "--set", f"memmap_path={ring}", "--json"]) == 0
    assert MemmapStorage(200, ring).cursor == 0 and len(MemmapStorage(200, ring)) == 200
    with pytest.raises(drl.ConfigError, match="n_step"):
        td3.train(drl.CPU(), "pendulum", td3.Config(n_step=0), progress=False)
    with pytest.raises(drl.ConfigError, match="memmap_path"):
        td3.train(drl.CPU(), "pendulum", td3.Config(memmap_path=3), progress=False)


def test_memmap_ring_is_checked_against_disk_not_memory(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from dispatchrl.training import driver

    spec = SimpleNamespace(obs_dim=3, action_dim=1, action_outputs=1)
    config = td3.Config(total_steps=100_000, memmap_path=str(tmp_path / "new" / "ring"))
    # 2 MiB: the networks and batch buffers (~0.8 MiB) fit, the 3.4 MB ring would not
    monkeypatch.setattr(driver, "available_memory", lambda: 2**21)
    driver.check_memory(td3, spec, config)
    monkeypatch.setattr(driver, "free_disk", lambda path: 1000)
    with pytest.raises(drl.ConfigError, match="free on the disk of memmap_path"):
        driver.check_memory(td3, spec, config)
    with pytest.raises(drl.ConfigError, match="of memory available"):
        driver.check_memory(td3, spec, dataclasses.replace(config, memmap_path=None))
    monkeypatch.undo()
    assert driver.free_disk(tmp_path / "new" / "ring") > 0  # not made yet: its nearest parent's disk
