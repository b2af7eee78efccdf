"""The SB3-shaped facade (drl.TD3/SAC/PPO), env instances and vector envs, callbacks."""

import dataclasses
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import RescaleAction

import dispatchrl as drl
from dispatchrl.checkpoint import named_arrays
from dispatchrl.envs.batch import VectorBatch
from dispatchrl.training.envspec import resolve_env

SMALL = dict(warmup_steps=50, batch_size=16, hidden=(16, 16))


def state_arrays(model):
    return {name: drl.to_numpy(array) for name, array in named_arrays(model.state)}


def assert_same_state(a, b):
    left, right = state_arrays(a), state_arrays(b)
    assert left.keys() == right.keys()
    differing = [k for k in left if left[k].shape != right[k].shape or not np.array_equal(left[k], right[k])]
    assert differing == []


def test_wrapped_env_instance_trains_predicts_saves_and_loads(tmp_path):
    env = RescaleAction(gym.make("MountainCarContinuous-v0"), -1, 1)
    model = drl.TD3(env, device="cpu", seed=0, **SMALL)
    assert model.spec.name == "MountainCarContinuous-v0+RescaleAction"
    model.learn(150)
    assert model.num_timesteps == 150
    obs = np.random.default_rng(0).uniform([-1.2, -0.07], [0.6, 0.07], (4, 2)).astype(np.float32)
    actions, hidden = model.predict(obs)
    assert hidden is None and actions.shape == (4, 1) and np.all(np.abs(actions) <= 1)
    single, _ = model.predict(obs[0])
    np.testing.assert_array_equal(single, actions[0])
    model.save(tmp_path / "model")
    loaded = drl.TD3.load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict(obs)[0], actions)
    assert loaded.num_timesteps == 150
    with pytest.raises(drl.ConfigError, match="without its env"):
        loaded.learn(10)
    # with the env it continues the run
    again = drl.TD3.load(tmp_path / "model", env=RescaleAction(gym.make("MountainCarContinuous-v0"), -1, 1))
    again.learn(20)
    assert again.num_timesteps == 170
    model.close()


def test_wrapper_bounds_are_the_wrapped_envs():
    spec = resolve_env(RescaleAction(gym.make("MountainCarContinuous-v0"), np.float32(-2), np.float32(2)))
    np.testing.assert_array_equal(spec.action_low, [-2.0])
    assert spec.eval_id is None and spec.make_eval_env is not None  # the wrapper is rebuilt from the spec
    assert type(spec.make_eval_env()).__name__ == "RescaleAction"


def test_learn_twice_equals_one_learn_of_the_sum_bit_for_bit():
    twice = drl.TD3("pendulum", seed=3, **SMALL).learn(230)
    twice.learn(170)
    once = drl.TD3("pendulum", seed=3, **SMALL).learn(400)
    assert twice.num_timesteps == once.num_timesteps == 400
    assert_same_state(twice, once)
    np.testing.assert_array_equal(twice.history["returns"], once.history["returns"])
    assert len(once.history["returns"]) == 2


def test_learn_twice_continues_a_python_env_bit_for_bit():
    # the gymnasium env keeps its episode going between the calls, as in one longer run
    twice = drl.SAC("Pendulum-v1", seed=1, **SMALL).learn(120)
    twice.learn(130)
    once = drl.SAC("Pendulum-v1", seed=1, **SMALL).learn(250)
    assert_same_state(twice, once)
    np.testing.assert_array_equal(twice.history["returns"], once.history["returns"])


def test_async_vector_batch_equals_the_sequential_batch():
    """num_envs > 1 Python envs step in an AsyncVectorEnv: same resets, autoresets and final
    observations as stepping the envs one after another."""
    vector = VectorBatch(AsyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP))
    sequential = drl.from_gymnasium("Pendulum-v1", 2)
    try:
        np.testing.assert_array_equal(vector.reset(7), sequential.reset(7))
        rng = np.random.default_rng(0)
        for t in range(205):  # past the 200-step truncation
            actions = rng.uniform(-2, 2, (2, 1)).astype(np.float32)
            ours, theirs = vector.step(actions), sequential.step(actions)
            for mine, reference in zip(ours[:4], theirs[:4]):
                np.testing.assert_array_equal(mine, reference)
            np.testing.assert_array_equal(vector.final_obs, sequential.final_obs)
            if t == 199:  # truncated: obs is the next episode's first, final_obs the last of this one
                assert ours[3].all() and not np.array_equal(vector.final_obs, ours[0])
    finally:
        vector.close()
        sequential.close()


def test_vector_env_instance_and_callable():
    vec = SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    model = drl.TD3(vec, seed=0, **SMALL)
    assert model.config.num_envs == 2
    model.learn(120)
    assert model.num_timesteps == 120
    model.close()
    with pytest.raises(drl.ConfigError, match="SAME_STEP"):
        resolve_env(SyncVectorEnv([lambda: gym.make("Pendulum-v1")]), 1)
    from_callable = drl.PPO(lambda: gym.make("Pendulum-v1"), num_envs=1, steps_per_env=32, batch_size=16, hidden=(8,))
    from_callable.learn(64)
    assert from_callable.num_timesteps == 64


def test_unknown_config_field_and_bad_budget():
    with pytest.raises(drl.ConfigError, match="actor_learning_rate"):
        drl.TD3("pendulum", actor_learning_rate=1e-3)
    with pytest.raises(drl.ConfigError, match="total_timesteps"):
        drl.TD3("pendulum").learn(0)


def test_eval_callback_rows_best_checkpoint_and_stop(tmp_path):
    evaluation = drl.EvalCallback(every=100, episodes=2, best_path=tmp_path / "best")
    model = drl.TD3("pendulum", seed=0, **SMALL).learn(300, callback=evaluation)
    assert [row["steps"] for row in evaluation.rows] == [100, 200, 300]
    for row in evaluation.rows:
        assert len(row["eval_returns"]) == 2
        assert row["eval_return"] == pytest.approx(np.mean(row["eval_returns"]))
    # the rows are the deterministic policy's returns: the final one is reproduced by evaluate()
    mean, _ = drl.training.evaluate(model.policy, model.spec.eval_id, (10_000, 10_001))
    assert mean == evaluation.rows[-1]["eval_return"]
    best = drl.TD3.load(tmp_path / "best")
    assert best.num_timesteps == evaluation.best_steps
    # from the functional API too, with a clean stop
    evaluation = drl.EvalCallback(every=100, episodes=1)
    stop = drl.StopOnReward(-1e9, evaluation)
    result = drl.td3.train(drl.CPU(), "pendulum", drl.td3.Config(total_steps=400, **SMALL), hooks=(evaluation, stop))
    assert stop.stopped_at == 100 and result.steps == 100 and len(evaluation.rows) == 1


def test_deploy_best_keeps_the_best_evaluated_policy_on_held_out_seeds(tmp_path):
    evaluation = drl.EvalCallback(every=100, episodes=2, deploy_best=True)
    config = drl.td3.Config(total_steps=400, **SMALL)
    result = drl.td3.train(drl.CPU(), "pendulum", config, hooks=(evaluation,))
    returns = [row["eval_return"] for row in evaluation.rows]
    assert [row["steps"] for row in evaluation.rows] == [100, 200, 300, 400]
    best = int(np.argmax(returns))  # the first of equal ones
    assert result.policy_steps == evaluation.best_steps == 100 * (best + 1)
    assert result.summary()["policy_steps"] == result.policy_steps
    # the deployed policy is the one evaluated then, on the selection seeds (not the reported ones)
    seeds = drl.training.SELECTION_SEEDS[:2]
    lockstep = drl.training.evaluate_lockstep  # its episodes stepped together
    assert lockstep(result.policy, [gym.make("Pendulum-v1") for _ in seeds], seeds)[0] == returns[best]
    final = result.spec.deployed_policy(drl.td3, result.state)
    assert lockstep(final, [gym.make("Pendulum-v1") for _ in seeds], seeds)[0] == returns[-1]
    # the same episodes as one at a time, up to the batched products' rounding
    assert drl.training.evaluate(final, "Pendulum-v1", seeds)[0] == pytest.approx(returns[-1], rel=1e-4)
    obs = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    assert (best == 3) == np.array_equal(result.policy(obs), final(obs))
    # without it the final policy is deployed
    plain = drl.td3.train(drl.CPU(), "pendulum", config)
    assert plain.policy_steps == 400 and np.array_equal(plain.policy(obs), final(obs))
    with pytest.raises(drl.ConfigError, match="deploy_best"):
        drl.EvalCallback(every=100, deploy_best="yes")
    # the facade predicts with it too
    evaluation = drl.EvalCallback(every=100, episodes=2, deploy_best=True)
    model = drl.TD3("pendulum", seed=0, **SMALL).learn(300, callback=evaluation)
    assert model.policy is model.result.policy and model.result.policy_steps == evaluation.best_steps
    np.testing.assert_array_equal(model.predict(obs)[0], evaluation.best_policy(obs))


def test_evaluations_run_beside_training_and_a_stopped_run_records_the_last():
    threads = []

    def make_env():  # the thread each evaluation runs on
        threads.append(threading.current_thread().name)
        return gym.make("Pendulum-v1")

    def stop_at_300(run):  # a hook after the evaluation's: its evaluation at 300 is still running
        run.stop = run.steps >= 300

    evaluation = drl.EvalCallback(every=100, episodes=1, env=make_env)
    config = drl.td3.Config(total_steps=500, **SMALL)
    result = drl.td3.train(drl.CPU(), "pendulum", config, hooks=(evaluation, stop_at_300))
    assert result.steps == 300 and [row["steps"] for row in evaluation.rows] == [100, 200, 300]
    assert len(threads) == 3 and all(name.startswith("dispatchrl-evaluation") for name in threads)
    # the row is the evaluation of the policy at its steps, as one made after training
    assert evaluation.rows[-1]["eval_return"] == drl.training.evaluate(result.policy, "Pendulum-v1", (10_000,))[0]
    # a run that ends by itself evaluates its last step before it returns
    threads.clear()
    drl.td3.train(drl.CPU(), "pendulum", drl.td3.Config(total_steps=200, **SMALL), hooks=(evaluation,))
    assert threads[-1] == threading.current_thread().name and evaluation.rows[-1]["steps"] == 200

    def fail_at_200(run):
        if run.steps >= 200:
            raise RuntimeError("a hook failed")

    # a run that raises leaves its evaluation behind on a daemon thread: nothing waits for it at exit
    with pytest.raises(RuntimeError, match="a hook failed"):
        drl.td3.train(drl.CPU(), "pendulum", config, hooks=(drl.EvalCallback(every=100, episodes=1), fail_at_200))
    assert all(t.daemon for t in threading.enumerate() if t.name == "dispatchrl-evaluation")


def test_training_through_async_vector_env_equals_sequential_stepping():
    config = drl.td3.Config(total_steps=440, num_envs=2, **SMALL)  # past the 200-step truncation
    spec = resolve_env("Pendulum-v1", 2)
    sequential = dataclasses.replace(spec, make_batch=lambda: drl.from_gymnasium("Pendulum-v1", 2))
    vectorized = drl.td3.train(drl.CPU(), spec, config, seed=0)
    reference = drl.td3.train(drl.CPU(), sequential, config, seed=0)
    assert len(reference.history["returns"]) == 2
    np.testing.assert_array_equal(vectorized.history["returns"], reference.history["returns"])
    for (name, ours), (_, theirs) in zip(named_arrays(vectorized.state), named_arrays(reference.state)):
        np.testing.assert_array_equal(drl.to_numpy(ours), drl.to_numpy(theirs), err_msg=name)
