"""A checkpoint is data (issue 40, items 1-5): its metadata never imports code nor chooses where
files are written, its zip entries are checked from the directory and the .npy headers before
any array is read, crafted metadata is a CheckpointError, and a reopened memmap replay folder's
counters are checked. The checkpoints here are built without training (no kernel compiles)."""

import io
import json
import os
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl import checkpoint
from dispatchrl.algorithms import ALGORITHMS, td3
from dispatchrl.cli import _run_config as run_config
from dispatchrl.cli import build_parser, main
from dispatchrl.data import MemmapStorage, ReplayBuffer, TensorDict
from dispatchrl.training import load_run
from dispatchrl.training.envspec import resolve_env
from dispatchrl.training.runs import build_state, save_run


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """A small, untrained TD3 checkpoint on pendulum (built on Generic: nothing compiles)."""
    path = tmp_path_factory.mktemp("honest") / "run"
    config = td3.Config(total_steps=200, hidden=(8,))
    spec = resolve_env("pendulum")
    save_run(path, "td3", spec, config, 0, 0, build_state(td3, drl.Generic(), spec, config, 0))
    return path


def craft(source, target, **changes):
    """``source`` rewritten to ``target`` with metadata ``changes`` (``config__network`` sets
    ``config.network``) and a valid digest: what anyone can do, the digest being unkeyed."""
    meta, arrays = checkpoint.load(source)
    for key, value in changes.items():
        holder, *path = [meta, *key.split("__")]
        for part in path[:-1]:
            holder = holder[part]
        holder[path[-1]] = value
    checkpoint.write(target, arrays, {k: v for k, v in meta.items() if k not in ("digest", "format", "version")})
    return target


@pytest.fixture()
def hostile_folder(tmp_path, monkeypatch):
    """The current directory holds ``evilnet_<id>.py``, which records its import in ``ran``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # a trusted load may add the cwd: not beyond this test
    module = f"evilnet_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    ran = tmp_path / "ran"
    (tmp_path / f"{module}.py").write_text(
        f"open({str(ran)!r}, 'w').write('imported')\nfrom dispatchrl.nn import mlp as make\n"
        "from dispatchrl.envs import Pendulum as Env\n"
    )
    yield module, ran
    sys.modules.pop(module, None)


# ---------------------------------------------------------------- 1: metadata never runs code


def test_eval_refuses_a_network_only_the_checkpoint_names(honest, hostile_folder, capsys):
    module, ran = hostile_folder
    craft(honest, "model", config__network=f"{module}:make")
    cwd_on_path = os.getcwd() in sys.path
    assert main(["eval", "--checkpoint", "model", "--episodes", "1"]) == 2
    assert not ran.exists()  # the module in the current directory was never imported
    assert (os.getcwd() in sys.path) == cwd_on_path
    err = capsys.readouterr().err
    assert "CheckpointError" in err and f"config.network='{module}:make'" in err and "--trust-code" in err
    # an explicit trust flag imports it (the user's own checkpoint and module)
    assert main(["eval", "--checkpoint", "model", "--episodes", "1", "--trust-code"]) == 0
    assert ran.read_text() == "imported"


@pytest.mark.parametrize("field", ["network", "actor_network", "critic_network"])
def test_load_run_refuses_any_network_field_naming_a_module(honest, tmp_path, field):
    path = craft(honest, tmp_path / "m", **{f"config__{field}": "os:system"})
    with pytest.raises(drl.CheckpointError, match=rf"config\.{field}='os:system'.*trust_code=True"):
        load_run(path, ALGORITHMS)


def test_a_module_env_is_refused_unless_named_again(honest, hostile_folder):
    module, ran = hostile_folder
    path = craft(honest, "model", env=f"{module}:Env", eval_id=None)
    with pytest.raises(drl.CheckpointError, match=rf"env='{module}:Env'"):
        load_run(path, ALGORITHMS)
    with pytest.raises(drl.CheckpointError, match="env="):
        drl.TD3.load(path)
    for gym_id in (f"{module}:Pendulum-v1", f"{module}:Anything"):  # gymnasium.make imports the module
        with pytest.raises(drl.CheckpointError, match="names code"):
            load_run(craft(honest, "gym", env=gym_id, eval_id=gym_id), ALGORITHMS)
    assert not ran.exists()
    # CLI resume: the same --env given again is the user's own choice
    parser = build_parser()
    with pytest.raises(drl.CheckpointError, match="--trust-code"):
        run_config(parser.parse_args(["train", "td3", "--resume", "model"]))
    assert not ran.exists()
    _, env, _, _ = run_config(parser.parse_args(["train", "td3", "--resume", "model", "--env", f"{module}:Env"]))
    assert env == f"{module}:Env"


def test_cli_resume_needs_the_network_named_again_or_trusted(honest, hostile_folder):
    module, ran = hostile_folder
    craft(honest, "model", config__actor_network=f"{module}:make")
    parser = build_parser()
    with pytest.raises(drl.CheckpointError, match=rf"config\.actor_network='{module}:make'"):
        run_config(parser.parse_args(["train", "td3", "--resume", "model"]))
    for extra in (["--actor-network", f"{module}:make"], ["--trust-code"]):
        config = run_config(parser.parse_args(["train", "td3", "--resume", "model", *extra]))[2]
        assert config.actor_network == f"{module}:make"
    assert not ran.exists()  # naming it is allowed; nothing is imported until the run is built


def test_builtin_names_still_load(honest, tmp_path):
    for fields in ({}, {"config__network": "mlp", "config__critic_network": "mlp"}):
        path = craft(honest, tmp_path / "b", **fields)
        _, name, spec, config, _ = load_run(path, ALGORITHMS)
        assert (name, spec.name, config.network) == ("td3", "pendulum", "mlp")
    assert drl.TD3.load(path).spec.name == "pendulum"


# ---------------------------------------------------------------- 2: metadata never chooses files


def test_eval_never_writes_the_memmap_folder_a_checkpoint_names(honest, tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "obs.npy").write_bytes(b"precious")
    (victim / "tensordict.json").write_text("precious")
    path = craft(honest, tmp_path / "m", config__memmap_path=str(victim))
    assert main(["eval", "--checkpoint", str(path), "--episodes", "1", "--json"]) == 0
    assert sorted(os.listdir(victim)) == ["obs.npy", "tensordict.json"]
    assert (victim / "obs.npy").read_bytes() == b"precious"
    assert (victim / "tensordict.json").read_text() == "precious"
    _, _, _, config, state = load_run(path, ALGORITHMS)
    assert config.memmap_path is None and not isinstance(state.replay.obs, np.memmap)
    assert drl.TD3.load(path).config.memmap_path is None
    assert sorted(os.listdir(victim)) == ["obs.npy", "tensordict.json"]


def test_cli_resume_maps_the_ring_only_where_the_user_says(honest, tmp_path):
    ring = str(tmp_path / "ring")
    path = craft(honest, tmp_path / "m", config__memmap_path=ring)
    parser = build_parser()
    for extra in ([], ["--trust-code"]):  # trusting code is not choosing files
        with pytest.raises(drl.CheckpointError, match="memmap_path"):
            run_config(parser.parse_args(["train", "td3", "--resume", str(path), *extra]))
    named = run_config(parser.parse_args(["train", "td3", "--resume", str(path), "--memmap-path", ring]))[2]
    assert named.memmap_path == ring
    args = ["train", "td3", "--resume", str(path), "--set", "memmap_path=null", "--override"]
    assert run_config(parser.parse_args(args))[2].memmap_path is None
    assert not os.path.exists(ring)


# ---------------------------------------------------------------- 3: a replay folder's counters


def test_a_reopened_memmap_folder_checks_its_counters(tmp_path):
    path = tmp_path / "rb"
    rb = ReplayBuffer(MemmapStorage(50, path), batch_size=4)
    rb.extend(TensorDict({"obs": np.arange(30, dtype=np.float32)[:, None]}, [30]))
    rb.storage.flush()
    counters = path / MemmapStorage.COUNTERS
    assert len(MemmapStorage(50, path)) == 30
    for bad in ([10**12, 0], [30, 50], [-1, 0], [30, -5]):
        np.save(counters, np.array(bad, np.int64))
        with pytest.raises(drl.ShapeError, match=r"counters\.npy.*max_size 50"):
            MemmapStorage(50, path)
    for bad in (np.zeros(3, np.int64), np.zeros(2, np.float64)):
        np.save(counters, bad)
        with pytest.raises(drl.ShapeError, match=r"counters\.npy.*expected int64 \(2,\)"):
            MemmapStorage(50, path)
    counters.write_bytes(b"not an npy")
    with pytest.raises(drl.ShapeError, match="counters"):
        MemmapStorage(50, path)


# ---------------------------------------------------------------- 4: bounded reads


def _append_entry(path, name, data, compress_type):
    with zipfile.ZipFile(path, "a", compression=compress_type) as z:
        z.writestr(name, data)


def _npy_header(shape, descr="<f8"):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def test_a_deflated_entry_is_refused_before_it_is_decompressed(honest, tmp_path):
    path = craft(honest, tmp_path / "bomb")
    npz = checkpoint.paths(path)[0]
    size = 128 << 20
    _append_entry(npz, "extra.npy", _npy_header((size // 8,)) + bytes(size), zipfile.ZIP_DEFLATED)
    assert os.path.getsize(npz) < size // 100  # ~1000x amplification
    tracemalloc.start()
    try:
        with pytest.raises(drl.CheckpointError, match="'extra.npy' is compressed"):
            checkpoint.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes allocated reading a {os.path.getsize(npz)}-byte file"


def test_an_entry_whose_header_overstates_its_size_is_refused(honest, tmp_path):
    path = craft(honest, tmp_path / "huge")
    _append_entry(checkpoint.paths(path)[0], "extra.npy", _npy_header((10**11,)) + bytes(64), zipfile.ZIP_STORED)
    with pytest.raises(drl.CheckpointError, match=r"'extra.npy'.*declares shape \(100000000000,\)"):
        checkpoint.load(path)


def test_load_run_refuses_entries_the_run_has_no_array_for_unread(honest, tmp_path, capsys):
    path = craft(honest, tmp_path / "extra")
    size = 64 << 20  # stored: the file really is this large, but the run has no such array
    _append_entry(checkpoint.paths(path)[0], "extra.npy", _npy_header((size // 8,)) + bytes(size), zipfile.ZIP_STORED)
    tracemalloc.start()
    try:
        with pytest.raises(drl.CheckpointError, match=r"unexpected entry 'extra' \(\(8388608,\) float64\)"):
            load_run(path, ALGORITHMS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak} bytes allocated refusing a 64 MiB entry"
    # a leaf of the run with another shape in its header: refused the same way
    meta, arrays = checkpoint.load(honest)
    arrays["actor.weights.0.m"] = np.zeros((9, 9), arrays["actor.weights.0.m"].dtype)
    checkpoint.write(tmp_path / "shape", arrays, {k: v for k, v in meta.items() if k not in ("digest", "format")})
    with pytest.raises(drl.CheckpointError, match=r"entry 'actor.weights.0.m' has shape \(9, 9\)"):
        load_run(tmp_path / "shape", ALGORITHMS)
    assert main(["eval", "--checkpoint", str(path)]) == 2
    assert "unexpected entry 'extra'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "header", "match"),
    [
        ("obj.npy", _npy_header((1,), "|O"), "dtype object"),
        ("../escape.npy", _npy_header((0,)), "not an array entry"),
        ("notes.txt", b"hello", "not an array entry"),
        ("bad.npy", b"\x93NUMPY garbage", "no valid .npy header"),
    ],
)
def test_entries_dispatchrl_never_writes_are_refused(honest, tmp_path, name, header, match):
    path = craft(honest, tmp_path / "e")
    _append_entry(checkpoint.paths(path)[0], name, header + bytes(8), zipfile.ZIP_STORED)
    with pytest.raises(drl.CheckpointError, match=match):
        checkpoint.load(path)


# ---------------------------------------------------------------- 5: crafted metadata


def _with_metadata(honest, path, text):
    _, arrays = checkpoint.load(honest)
    entry = np.frombuffer(text.encode(), np.uint8)
    np.savez(checkpoint.paths(path)[0], **arrays, **{checkpoint.METADATA_ENTRY: entry})
    return path


def test_deeply_nested_metadata_is_a_checkpoint_error(honest, tmp_path, capsys):
    depth = 100_000
    text = '{"format": "dispatchrl-checkpoint", "version": 5, "x": ' + "[" * depth + "]" * depth + "}"
    path = _with_metadata(honest, tmp_path / "deep", text)
    with pytest.raises(drl.CheckpointError, match="nests deeper"):
        checkpoint.load(path)
    assert main(["eval", "--checkpoint", str(path)]) == 2
    assert "CheckpointError" in capsys.readouterr().err
    shallow = '{"format": "dispatchrl-checkpoint", "version": 5, "x": ' + "[" * 40 + "]" * 40 + "}"
    with pytest.raises(drl.CheckpointError, match="deeper than 32"):
        checkpoint.load(_with_metadata(honest, tmp_path / "d40", shallow))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"seed": "abc"}, "'seed' must be int"),
        ({"seed": -1}, "'seed' must be in"),
        ({"num_envs": "1"}, "'num_envs' must be int"),
        ({"env": ["pendulum"]}, "'env' must be str"),
        ({"config": [1, 2]}, "'config' must be dict"),
        ({"config__network": "os:system"}, "names code"),
    ],
)
def test_crafted_metadata_is_a_checkpoint_error_everywhere(honest, tmp_path, capsys, changes, match):
    path = craft(honest, tmp_path / "c", **changes)
    assert main(["train", "td3", "--resume", str(path), "--json", "--no-eval"]) == 2
    assert json.loads(capsys.readouterr().out)["error"].startswith("CheckpointError")
    with pytest.raises(drl.CheckpointError, match=match):
        drl.TD3.load(path)
    with pytest.raises(drl.CheckpointError, match=match):
        load_run(path, ALGORITHMS)
