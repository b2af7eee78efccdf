"""dispatchrl.files.atomic_write: the one atomic write (unique temporary, fsync, rename) that
checkpoints, TensorDict metadata, the cache and sweeps use."""

import os
import stat

import numpy as np
import pytest

from dispatchrl import checkpoint
from dispatchrl.files import atomic_write, atomic_write_text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "doc.json"
    atomic_write_text(target, "old")

    def fails(f):
        f.write(b"half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, fails)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["doc.json"]


def test_files_get_the_mode_open_gives_and_checkpoints_stay_private(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "plain.json", "{}")
        checkpoint.write(tmp_path / "run", {"x": np.zeros(2, np.float32)}, {"steps": 0})
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644  # as open(path, "w") makes it
    for name in ("run.npz", "run.json"):  # mkstemp's mode, as checkpoints always had
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
