"""A `dispatchrl train` run for tests/test_reliability.py that reports what it is doing on stdout
(``STEP n`` after each chunk, ``SAVING`` while a checkpoint file is half written, ``SAVED``), so
the test can kill it at chosen moments. ``SLOW_SAVE=1`` holds each save open for a moment.

    python kill_resume_worker.py ARG...   (the arguments of `dispatchrl train`)
"""

import os
import sys
import time

from dispatchrl import checkpoint, cli
from dispatchrl.training import driver

_atomic_write = checkpoint.atomic_write


def _reporting_write(target, write, mode=0o666):
    def slow_write(f):
        write(f)
        f.flush()
        print("SAVING", flush=True)  # the temporary file is written, not yet renamed into place
        if os.environ.get("SLOW_SAVE"):
            time.sleep(0.5)

    _atomic_write(target, slow_write, mode)
    print("SAVED", flush=True)


_call = driver.PeriodicCheckpoint.__call__


def _reporting_call(self, run):
    print(f"STEP {run.steps}", flush=True)
    _call(self, run)


checkpoint.atomic_write = _reporting_write  # the checkpoint's .npz and its .json copy, as checkpoint writes them
checkpoint.atomic_write_text = lambda target, text, mode=0o666: _reporting_write(
    target, lambda f: f.write(text.encode()), mode
)
driver.PeriodicCheckpoint.__call__ = _reporting_call

if __name__ == "__main__":
    sys.exit(cli.main(["train", *sys.argv[1:]]))
