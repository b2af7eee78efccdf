"""drl.fuse over TensorDicts (issue 17): a fused step may take (nested) TensorDicts, alone or inside
its state; their leaves are the step's device arrays, as a dataclass's fields are."""

from dataclasses import dataclass, field

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.data import TensorDict, replay_buffer
from dispatchrl.errors import DeviceError, ShapeError
from dispatchrl.kernels.core.api import copy, fill, increment
from dispatchrl.kernels.offpolicy.api import concat_columns, replay_add, td_target
from dispatchrl.kernels.replay.api import replay_gather

ROWS, OBS, ACT, CAPACITY, GAMMA = 5, 3, 2, 8, 0.9


def host_data(seed=0) -> dict:
    g = np.random.default_rng(seed)
    return {
        "obs": g.normal(size=(CAPACITY, OBS)),
        "action": g.normal(size=(CAPACITY, ACT)),
        "reward": g.normal(size=CAPACITY),
        "next_obs": g.normal(size=(CAPACITY, OBS)),
        "terminated": g.random(CAPACITY) < 0.4,
        "truncated": g.random(CAPACITY) < 0.2,
        "index": np.array([7, 0, 3, 3, 5], np.int64),
        "q1": g.normal(size=(ROWS, 1)),
        "q2": g.normal(size=(ROWS, 1)),
    }


def filled_buffer(device, data):
    buffer = replay_buffer(device, CAPACITY, OBS, ACT)
    rows = [
        drl.asarray(device, data[k], np.bool_ if data[k].dtype == bool else np.float32)
        for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")
    ]
    replay_add(device, buffer, *rows)
    return buffer


def reference(data) -> dict:
    """The step in float64 numpy."""
    i = data["index"]
    target = data["reward"][i, None] + GAMMA * (1 - data["terminated"][i, None]) * np.minimum(data["q1"], data["q2"])
    return {
        "batch.obs": data["obs"][i],
        "batch.reward": data["reward"][i],
        "target": target,
        "critic_input": np.concatenate([data["obs"][i], data["action"][i]], axis=1),
    }


def step(device, buffer, s) -> None:
    """Written once over attribute reads: ``s`` is a TensorDict or a dataclass of the same fields."""
    replay_gather(device, buffer, s.index, s.batch)
    td_target(device, s.batch.reward, s.batch.terminated, s.q1, s.q2, GAMMA, s.target)
    concat_columns(device, s.batch.obs, s.batch.action, s.critic_input)


@dataclass
class Batch:
    obs: drl.Array
    action: drl.Array
    reward: drl.Array
    next_obs: drl.Array
    terminated: drl.Array
    truncated: drl.Array


@dataclass
class StepState:
    batch: Batch
    index: drl.Array
    q1: drl.Array
    q2: drl.Array
    target: drl.Array
    critic_input: drl.Array


def zero_batch(device) -> dict:
    return {
        "obs": drl.zeros(device, (ROWS, OBS)),
        "action": drl.zeros(device, (ROWS, ACT)),
        "reward": drl.zeros(device, ROWS),
        "next_obs": drl.zeros(device, (ROWS, OBS)),
        "terminated": drl.zeros(device, ROWS, np.bool_),
        "truncated": drl.zeros(device, ROWS, np.bool_),
    }


def step_arrays(device, data) -> dict:
    return {
        "index": drl.asarray(device, data["index"]),
        "q1": drl.asarray(device, data["q1"], np.float32),
        "q2": drl.asarray(device, data["q2"], np.float32),
        "target": drl.zeros(device, (ROWS, 1)),
        "critic_input": drl.zeros(device, (ROWS, OBS + ACT)),
    }


def results(s) -> dict:
    return {
        "batch.obs": drl.to_numpy(s.batch.obs),
        "batch.reward": drl.to_numpy(s.batch.reward),
        "target": drl.to_numpy(s.target),
        "critic_input": drl.to_numpy(s.critic_input),
    }


def test_fused_step_over_nested_tensordict_matches_dataclass_and_reference(device):
    data = host_data()
    want = reference(data)
    buffer = filled_buffer(device, data)
    # the nested TensorDict: batch size [ROWS] at both levels, numpy input copied onto the device
    td = TensorDict({"batch": {k: drl.to_numpy(v) for k, v in zero_batch(device).items()}}, [ROWS], device)
    td.update(step_arrays(device, data))
    assert isinstance(td["batch"], TensorDict) and td["batch", "obs"].device == device
    dc = StepState(batch=Batch(**zero_batch(device)), **step_arrays(device, data))
    for s in (td, dc):
        fused = drl.fuse(device, step, buffer, s)
        assert len(fused.kernel_calls) > 0
        fused()
    got_td, got_dc = results(td), results(dc)
    for name, expected in want.items():
        np.testing.assert_array_equal(got_td[name], got_dc[name], err_msg=name)  # same kernels, same bits
        np.testing.assert_allclose(got_td[name], expected, rtol=1e-6, atol=1e-6, err_msg=name)
    # the same kernels with the same argument shapes and dtypes
    shapes = [
        [
            [(a.shape, a.dtype) for a in args if isinstance(a, drl.Array)]
            for _, args in drl.fuse(device, step, buffer, s).kernel_calls
        ]
        for s in (td, dc)
    ]
    assert shapes[0] == shapes[1]


def test_fused_step_reads_tensordict_by_key(device):
    """Key reads (``td["a", "b"]``) of a TensorDict held in a dataclass state, written by a fused step."""
    x = np.arange(12.0).reshape(4, 3)

    @dataclass
    class Holder:
        data: TensorDict
        count: drl.Array

    inner = {"y": np.zeros((4, 3)), "z": np.zeros((4, 1))}
    holder = Holder(TensorDict({"x": x, "inner": inner}, [4], device), drl.zeros(device, 1, np.int64))

    def fill_inner(device, holder):
        copy(device, holder.data["x"], holder.data["inner", "y"])
        fill(device, holder.data["inner"]["z"], 2.5)
        increment(device, holder.count)

    drl.fuse(device, fill_inner, holder)(3)
    np.testing.assert_array_equal(drl.to_numpy(holder.data["inner", "y"]), x)
    np.testing.assert_array_equal(drl.to_numpy(holder.data["inner", "z"]), np.full((4, 1), 2.5))
    assert drl.to_numpy(holder.count)[0] == 3


def _never_traced(device, *args):
    raise AssertionError("the step was traced: the bad argument was not refused first")


def test_fuse_refuses_a_tensordict_on_another_memory_space():
    host_td = TensorDict({"a": np.zeros((2, 3), np.float32)}, [2], drl.CPU())
    with pytest.raises(DeviceError, match=r"argument 'td' is a TensorDict on CPU\(\)"):
        drl.fuse(drl.CUDA(), lambda device, td: _never_traced(device), host_td)
    cuda_td = TensorDict({"a": np.zeros((2, 3), np.float32)}, [2], drl.CUDA())
    with pytest.raises(DeviceError, match="argument 'state.batch'"):
        drl.fuse(drl.C(), lambda device, state: _never_traced(device), StepStateLike(cuda_td))


@dataclass
class StepStateLike:
    batch: TensorDict
    extra: list = field(default_factory=list)


@pytest.mark.parametrize("device_name", ["generic", "cpu", "c", "cuda"])
def test_fuse_refuses_numpy_tensordicts_and_non_array_leaves(device_name):
    device = drl.devices.device_from_name(device_name)
    numpy_td = TensorDict({"a": np.zeros((2, 3), np.float32)}, [2])  # device None: numpy leaves
    with pytest.raises(DeviceError, match=r"argument 'state.batch' is a TensorDict on None"):
        drl.fuse(device, lambda device, state: _never_traced(device), StepStateLike(numpy_td))
    with pytest.raises(DeviceError, match=r"argument 'state.extra.0'"):
        drl.fuse(
            device,
            lambda device, state: _never_traced(device),
            StepStateLike(TensorDict({}, [2], device), [numpy_td]),
        )
    # a leaf that is not a dispatchrl Array (only private construction can make one)
    inner = TensorDict._raw({"b": np.zeros((2, 3), np.float32)}, (2,), device)
    bad = TensorDict._raw({"a": drl.zeros(device, (2, 3)), "inner": inner}, (2,), device)
    with pytest.raises(DeviceError, match=r"argument 'td' has leaf 'inner.b' that is a ndarray"):
        drl.fuse(device, lambda device, td: _never_traced(device), bad)
    with pytest.raises(DeviceError, match=r"argument 'rest.0' is a TensorDict"):
        drl.fuse(device, lambda device, *rest: _never_traced(device), numpy_td)


def test_generic_functions_check_aliasing_across_tensordict_leaves(device):
    """A TensorDict struct argument's leaves are checked for overlap like a dataclass's fields,
    eagerly and while fuse traces, before any kernel runs."""
    data = host_data()
    buffer = filled_buffer(device, data)
    fields = zero_batch(device)
    fields["next_obs"] = fields["obs"]  # two written leaves on the same memory
    batch = TensorDict(fields, [ROWS], device)
    index = drl.asarray(device, data["index"])
    with pytest.raises(ShapeError, match=r"'batch\.(next_)?obs' \(written\) overlaps argument 'batch\.(next_)?obs'"):
        replay_gather(device, buffer, index, batch)
    with pytest.raises(ShapeError, match=r"'batch\.(next_)?obs' \(written\) overlaps"):
        drl.fuse(device, lambda device: replay_gather(device, buffer, index, batch))


def test_checkpoints_name_tensordict_leaves_as_fields():
    device = drl.CPU()

    @dataclass
    class State:
        saved: TensorDict
        step: drl.Array
        scratch: TensorDict = field(metadata=checkpoint.SCRATCH)

    state = State(
        TensorDict({"a": np.ones((2, 3)), "n": {"b": np.zeros(2, np.int64)}}, [2], device),
        drl.zeros(device, 1, np.int64),
        TensorDict({"c": np.ones((2, 1))}, [2], device),
    )
    assert [name for name, _ in checkpoint.named_arrays(state)] == ["saved.a.", "saved.n.b.", "step."]
    assert [name for name, _ in checkpoint.scratch_arrays(state)] == ["scratch.c."]


def test_entries_read_as_attributes_follow_set_and_delete():
    td = TensorDict({"a": np.zeros(2), "keys": np.zeros(2), "n": {"b": np.zeros((2, 1))}}, [2])
    assert td.a is td["a"] and td.n.b is td["n", "b"]
    td.set("a", np.ones(2))
    td.set(("n", "b"), np.full((2, 1), 3.0))
    np.testing.assert_array_equal(td.a, np.ones(2))  # not the cached old leaf
    np.testing.assert_array_equal(td.n.b, np.full((2, 1), 3.0))
    td["a"] = np.full(2, 2.0)
    np.testing.assert_array_equal(td.a, np.full(2, 2.0))
    del td["a"]
    with pytest.raises(AttributeError, match="no entry or attribute 'a'"):
        td.a  # noqa: B018
    assert callable(td.keys) and "keys" in td.keys()  # methods win over entries of the same name
    td.pop(("n", "b"))
    with pytest.raises(AttributeError):
        td.n.b  # noqa: B018


@pytest.mark.parametrize("device_name", ["generic", "cpu"])
@pytest.mark.parametrize("algo_name", ["td3", "sac", "ppo"])
def test_algorithm_steps_trace_the_same_kernel_calls_as_with_dataclasses(algo_name, device_name):
    """The TD3/SAC/PPO states hold their sampled batch (minibatch) and current transition in
    TensorDicts: swapping in dataclasses over the same Arrays traces the very same calls."""
    from dispatchrl.algorithms import ppo, sac, td3
    from dispatchrl.data import Minibatch, Transitions
    from dispatchrl.staging import Branch, trace
    from dispatchrl.training.envspec import resolve_env
    from dispatchrl.training.runs import build_state

    algo = {"td3": td3, "sac": sac, "ppo": ppo}[algo_name]
    device = drl.devices.device_from_name(device_name)
    if algo is ppo:
        config = ppo.Config(num_envs=2, steps_per_env=8, batch_size=8, hidden=(8,))
    else:
        config = algo.Config(num_envs=2, batch_size=8, hidden=(8,), replay_capacity=64, prioritized=True, n_step=2)
    spec = resolve_env("pendulum", config.num_envs)
    state = build_state(algo, device, spec, config, 0)
    assert isinstance(state.batch, TensorDict) and isinstance(state.transition, TensorDict)

    def traced() -> list:
        calls: list = []
        with trace(calls):
            algo.native_step(device, config, spec.native, state)
            algo.store(device, config, state)
            algo.update(device, config, state)
        return calls

    # the state's arrays by identity; scratch a method makes when its call is staged (fresh in
    # every trace) by shape and dtype
    in_state = {id(a) for tree in (checkpoint.named_arrays(state), checkpoint.scratch_arrays(state)) for _, a in tree}

    def arg(a) -> object:
        if not isinstance(a, drl.Array):
            return repr(a)
        return id(a) if id(a) in in_state else ("staged scratch", a.shape, str(a.dtype))

    def flat(nodes) -> list:
        out = []
        for node in nodes:
            if isinstance(node, Branch):
                out.append(("branch", node.condition.expression("c"), flat(node.then), flat(node.otherwise)))
            else:
                kernel, args = node
                out.append((kernel, [arg(a) for a in args]))
        return out

    with_tensordicts = flat(traced())
    batch_class = Minibatch if algo is ppo else Transitions
    state.batch = batch_class(**{key: state.batch[key] for key in state.batch.keys()})
    state.transition = Transitions(**{key: state.transition[key] for key in state.transition.keys()})
    assert with_tensordicts == flat(traced())
    assert len(with_tensordicts) > 10
