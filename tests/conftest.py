"""CUDA kernels are tested in numba's CUDA simulator unless NUMBA_ENABLE_CUDASIM is set
explicitly (set it to 0 on a machine with a GPU to test the real thing)."""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest
from hypothesis import settings

import dispatchrl


@pytest.fixture(scope="session")
def cuda_device():
    return dispatchrl.CUDA()


@pytest.fixture(params=["generic", "cpu", "cuda", "c"])
def device(request):
    """Every backend in turn (CUDA under the simulator unless a GPU is configured; C with the host
    compiler)."""
    return dispatchrl.devices.device_from_name(request.param)


# Hypothesis profiles (select with --hypothesis-profile=NAME). deadline=None: the first example of
# a kernel compiles it (Numba, the C compiler), which no per-example deadline should count.
#: CI: a few examples per property (tests/test_fuzz.py runs in well under two minutes); registering
#: the active profile's name replaces hypothesis's built-in default
settings.register_profile("default", max_examples=8, deadline=None, print_blob=True)
#: ≥ 200 examples per kernel family and device
settings.register_profile("thorough", max_examples=200, deadline=None, print_blob=True)
#: .ci/run: the default profile with a fixed seed per test, so a merge is judged on the same examples
#: every time; exploration happens in local and thorough runs
settings.register_profile("ci", max_examples=8, deadline=None, print_blob=True, derandomize=True)
if os.environ.get("DISPATCHRL_HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["DISPATCHRL_HYPOTHESIS_PROFILE"])
