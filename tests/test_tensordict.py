"""TensorDict: the RFC's (seed 002) own examples, numpy indexing rules, errors naming the key."""

import json
import os

import numpy as np
import pytest

import dispatchrl as drl
from dispatchrl.data import TensorDict, cat, stack
from dispatchrl.errors import DeviceError, LockedError, MissingKeyError, ShapeError


def test_rfc_construction_from_mixed_sources():
    data = TensorDict(
        {
            "tensor": np.zeros(3, np.float32),
            "from_np": np.zeros((3,)),
            "from_int": 1,
            "from_list": [[1, 2, 3]],
            "from_dict": {"a": 1},
        },
        batch_size=[],
    )
    assert data["from_dict"].batch_size == () and data["from_dict", "a"].dtype == np.int64
    assert data["from_int"].shape == () and data["from_int"] == 1
    assert data["from_list"].shape == (1, 3) and data["from_list"].dtype == np.int64
    assert data["from_np"].dtype == np.float64 and data["tensor"].dtype == np.float32
    text = repr(data)
    assert "from_list: ndarray(shape=(1, 3), dtype=int64)" in text and "batch_size=()" in text
    assert text.index("from_dict") < text.index("from_int") < text.index("tensor")


def test_rfc_batch_size_is_required_and_checked_naming_the_key():
    with pytest.raises(ShapeError, match="required"):
        TensorDict({"a": np.zeros(3)}, None)
    with pytest.raises(ShapeError, match="'obs'"):
        TensorDict({"reward": np.zeros(4), "obs": np.zeros((3, 2))}, [4])
    with pytest.raises(ShapeError, match="'inner.x'"):
        TensorDict({"inner": {"x": np.zeros(5)}}, [4])


def test_rfc_nesting_pytree_example_shapes():
    td = TensorDict(
        {"a": TensorDict({"b": TensorDict({"c": np.ones((2, 3, 4))}, [2, 3]), "d": np.ones(2)}, [2]), "e": 1}, []
    )
    assert td.batch_size == ()
    assert td["a"].batch_size == (2,)
    assert td["a", "b"].batch_size == (2, 3)
    assert td["a", "b", "c"].shape == (2, 3, 4)
    # NestedKey: tuples of tuples of strings are flattened
    assert td[(("a",), ("b", "c"))] is td["a", "b", "c"]
    assert td.get(("a", "zzz"), "default") == "default"
    with pytest.raises(MissingKeyError, match="zzz"):
        td["zzz"]
    with pytest.raises(ShapeError, match="'b'"):
        TensorDict({"a": TensorDict({"b": TensorDict({}, [3])}, [2])}, [])
    assert td.keys() == ["a", "e"]
    assert sorted(map(str, td.keys(include_nested=True))) == sorted(
        map(str, ["a", ("a", "b"), ("a", "b", "c"), ("a", "d"), "e"])
    )
    assert sorted(map(str, td.keys(include_nested=True, leaves_only=True))) == sorted(
        map(str, [("a", "b", "c"), ("a", "d"), "e"])
    )


def test_rfc_masking_example_and_numpy_rules():
    rng = np.random.default_rng(0)
    key1 = np.arange(12).reshape(3, 4, 1)
    data = TensorDict({"key1": key1, "nested": {"z": np.arange(12.0).reshape(3, 4, 1, 1)}}, batch_size=[3, 4, 1])
    mask = rng.random((3, 4)) > 0.5
    masked = data[mask]
    assert masked.batch_size == (int(mask.sum()), 1)
    np.testing.assert_array_equal(masked["key1"], key1[mask])
    np.testing.assert_array_equal(masked["nested", "z"], key1[mask][..., None].astype(float))
    for index in (
        0,
        -1,
        slice(1, 3),
        (1, 2),
        (slice(None), [0, 3]),
        np.array([2, 0, 2]),
        (Ellipsis, 0),
        (0, Ellipsis),
        (None, 1),
        (slice(None, None, -1),),
    ):
        expected = key1[index]
        got = data[index]
        assert got.batch_size == np.broadcast_to(0, (3, 4, 1))[index].shape, index
        np.testing.assert_array_equal(got["key1"], expected)
    with pytest.raises(ShapeError):
        data[0, 0, 0, 0]
    with pytest.raises(IndexError):
        data[5]


def test_setitem_by_index_writes_every_leaf():
    td = TensorDict({"a": np.zeros((5, 2)), "n": {"b": np.zeros(5, np.int64)}}, [5])
    td[[1, 3]] = TensorDict({"a": np.ones((2, 2)), "n": {"b": np.array([7, 9])}}, [2])
    np.testing.assert_array_equal(td["a"][:, 0], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(td["n", "b"], [0, 7, 0, 9, 0])


def test_stack_cat_split_reshape_unbind():
    a = TensorDict({"x": np.arange(6.0).reshape(3, 2), "n": {"y": np.arange(3)}}, [3])
    b = a.apply(lambda v: v + 10)
    s = stack([a, b], 1)
    assert s.batch_size == (3, 2) and s["n"].batch_size == (3, 2)
    np.testing.assert_array_equal(s["x"], np.stack([a["x"], b["x"]], 1))
    c = cat([a, b])
    assert c.batch_size == (6,)
    np.testing.assert_array_equal(c["n", "y"], [0, 1, 2, 10, 11, 12])
    parts = c.split([2, 4])
    assert [p.batch_size for p in parts] == [(2,), (4,)]
    assert [p.batch_size for p in c.split(4)] == [(4,), (2,)]
    np.testing.assert_array_equal(parts[1]["x"], c["x"][2:])
    r = s.reshape(-1)
    assert r.batch_size == (6,) and r["x"].shape == (6, 2) and r["n", "y"].shape == (6,)
    assert s.reshape(2, 3)["n", "y"].shape == (2, 3)
    assert [u.batch_size for u in s.unbind(1)] == [(3,), (3,)]
    with pytest.raises(ShapeError, match="do not add up"):
        c.split([1, 2])
    with pytest.raises(ShapeError):
        s.reshape(4)
    with pytest.raises(ShapeError, match="batch size"):
        stack([a, c])
    with pytest.raises(MissingKeyError):
        cat([a, TensorDict({"x": np.zeros((3, 2))}, [3])])


def test_apply_with_other_and_flatten_keys_round_trip():
    x = TensorDict({"a": np.ones(3), "n": {"b": np.full(3, 2.0)}}, [3])
    y = x.apply(lambda u, v: u + v, x)
    np.testing.assert_array_equal(y["n", "b"], [4.0, 4.0, 4.0])
    norms = x.apply(lambda u: np.array(np.linalg.norm(u)), batch_size=[])
    assert norms.batch_size == () and norms["a"] == pytest.approx(np.sqrt(3))
    flat = x.flatten_keys(".")
    assert sorted(flat.keys()) == ["a", "n.b"]
    back = flat.unflatten_keys(".")
    assert back["n"].batch_size == (3,) and back["n", "b"] is x["n", "b"]


def test_lock_refuses_new_keys_but_allows_in_place_writes():
    td = TensorDict({"a": np.zeros(2), "n": {"b": np.zeros(2)}}, [2]).lock_()
    with pytest.raises(LockedError, match="'c'"):
        td["c"] = np.zeros(2)
    with pytest.raises(LockedError):
        td.set(("n", "c"), np.zeros(2))
    with pytest.raises(LockedError):
        del td["a"]
    td[0] = TensorDict({"a": np.ones(1)[0], "n": {"b": np.array(5.0)}}, [])
    assert td["a"][0] == 1 and td["n", "b"][0] == 5
    td.unlock_()
    td["c"] = np.zeros(2)
    assert "c" in td


def test_device_leaves_are_dispatchrl_arrays(device):
    td = TensorDict(
        {"obs": np.arange(12, dtype=np.float32).reshape(4, 3), "n": {"done": np.zeros(4, bool)}}, [4], device=device
    )
    assert isinstance(td["obs"], drl.Array) and td["obs"].device == device
    assert isinstance(td["n", "done"], drl.Array)
    sub = td[np.array([3, 1])]
    np.testing.assert_array_equal(drl.to_numpy(sub["obs"]), np.arange(12).reshape(4, 3)[[3, 1]])
    host = td.to(None)
    assert isinstance(host["obs"], np.ndarray)
    with pytest.raises(DeviceError):
        td.to("cuda")


def test_memmap_round_trip_no_pickle(tmp_path):
    td = TensorDict(
        {
            "obs": np.random.default_rng(1).normal(size=(5, 3, 4)).astype(np.float32),
            "done": np.zeros(5, bool),
            "next": {"obs": np.ones((5, 3, 4), np.float32), "deep": {"r": np.arange(5, dtype=np.int32)}},
        },
        [5],
    )
    mm = td.memmap(tmp_path / "td")
    files = sorted(
        os.path.relpath(os.path.join(d, f), tmp_path / "td") for d, _, fs in os.walk(tmp_path / "td") for f in fs
    )
    assert files == sorted(
        [
            "done.npy",
            "obs.npy",
            os.path.join("next", "obs.npy"),
            os.path.join("next", "deep", "r.npy"),
            "tensordict.json",
        ]
    )
    meta = json.loads((tmp_path / "td" / "tensordict.json").read_text())
    assert meta["batch_size"] == [5]
    again = TensorDict.load_memmap(tmp_path / "td")
    assert isinstance(again["obs"], np.memmap) and again["next", "deep"].batch_size == (5,)
    for key in td.keys(include_nested=True, leaves_only=True):
        np.testing.assert_array_equal(again[key], td[key])
        assert again[key].dtype == td[key].dtype
    mm["obs"][0] = 7.0
    mm["obs"].flush()
    assert TensorDict.load_memmap(tmp_path / "td")["obs"][0, 0, 0] == 7.0
    with pytest.raises(ShapeError, match="safe file name"):
        TensorDict({"../x": np.zeros(2)}, [2]).memmap(tmp_path / "bad")
    with pytest.raises(MissingKeyError):
        TensorDict.load_memmap(tmp_path / "nothing")


def test_fuse_takes_a_tensordict_of_device_arrays(device):
    """A fused step can take a TensorDict: its leaves are the step's persistent arrays."""
    from dispatchrl.kernels.offpolicy.api import concat_columns
    from dispatchrl.kernels.replay import scale_rows

    def step(dev, td):
        scale_rows(dev, td["weight"], td["batch", "obs"])
        concat_columns(dev, td["batch", "obs"], td["batch", "action"], td["critic_input"])

    g = np.random.default_rng(0)
    source = {
        "weight": g.uniform(0.5, 1.5, 4).astype(np.float32),
        "batch": {"obs": g.normal(size=(4, 3)).astype(np.float32), "action": g.normal(size=(4, 2)).astype(np.float32)},
        "critic_input": np.zeros((4, 5), np.float32),
    }
    td = TensorDict(source, [4], device=device)
    fused = drl.fuse(device, step, td)
    fused(2)
    obs = source["batch"]["obs"] * source["weight"][:, None] * source["weight"][:, None]
    np.testing.assert_array_equal(drl.to_numpy(td["batch", "obs"]), obs)
    np.testing.assert_array_equal(drl.to_numpy(td["critic_input"]), np.concatenate([obs, source["batch"]["action"]], 1))


def test_attribute_writes_set_checked_entries():
    """``td.x = v`` is ``td.set("x", v)``: shape-checked, refused when locked, and read back by
    both ``td.x`` and ``td["x"]`` (not a plain attribute shadowing the entry)."""
    td = TensorDict({"a": np.zeros((4, 2))}, [4])
    assert td.a[0, 0] == 0.0  # cached by the read
    td.a = np.ones((4, 2))
    assert td.a[0, 0] == 1.0 and td["a"][0, 0] == 1.0
    td.b = np.arange(4.0)
    assert "b" in td.keys() and td["b"][3] == 3.0
    with pytest.raises(ShapeError):
        td.c = np.ones(3)
    td.lock_()
    with pytest.raises(LockedError, match="'d'"):
        td.d = np.ones(4)
    assert "d" not in td.keys()


def test_concurrent_metadata_writers_never_collide(tmp_path):
    """Two writers of one memmap folder's metadata (each its own temporary, renamed whole): no
    writer fails, the file is always one writer's whole document, no temporary is left."""
    import threading

    from dispatchrl.data import tensordict

    start, errors = threading.Barrier(2), []

    def writer(size):
        start.wait()
        try:
            for _ in range(100):
                tensordict._write_meta(tmp_path, (size,), {f"leaf{size}.npy": {"key": [f"leaf{size}"]}}, [])
        except Exception as e:  # the fixed-name temporary: one writer renames the other's file away
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(size,)) for size in (3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    meta = json.loads((tmp_path / tensordict.META_FILE).read_text())
    assert meta["batch_size"] in ([3], [4]) and list(meta["leaves"]) == [f"leaf{meta['batch_size'][0]}.npy"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [tensordict.META_FILE]
