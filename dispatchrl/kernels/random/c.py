"""C methods of the random-number generic functions, and the C stream helpers (``UNIFORM01``,
``STANDARD_NORMAL``) other families' C kernels list in their ``helpers``: the same counter-based
SplitMix64 stream as every other backend."""

from ...backends.c import CKernel, c_method
from ...devices import C
from ...staging import launch
from . import api
from .api import SPLITMIX_GOLDEN, SPLITMIX_MIX1, SPLITMIX_MIX2, UNIFORM01_SCALE

__all__ = ["NORMAL_HELPERS", "STANDARD_NORMAL", "STANDARD_NORMAL_ICDF", "UNIFORM01", "UNIFORM_HELPERS"]


def _hex(constant) -> str:
    return f"0x{int(constant):X}"


#: stream helper: the same numbers as generic.uniform01 and cpu.uniform01
UNIFORM01 = f"""\
/* stream position -> 64 bits: SplitMix64, the same numbers as kernels/random/generic.py */
static inline uint64_t dispatchrl_splitmix64(uint64_t key, uint64_t counter)
{{
    uint64_t z = key + (counter + 1) * UINT64_C({_hex(SPLITMIX_GOLDEN)});
    z = (z ^ (z >> 30)) * UINT64_C({_hex(SPLITMIX_MIX1)});
    z = (z ^ (z >> 27)) * UINT64_C({_hex(SPLITMIX_MIX2)});
    return z ^ (z >> 31);
}}

/* -> uniform in [0, 1): the top 53 bits, converted as signed (exact; x86's unsigned conversion branches) */
static inline double dispatchrl_uniform01(uint64_t key, uint64_t counter)
{{
    return (double)(int64_t)(dispatchrl_splitmix64(key, counter) >> 11) * {UNIFORM01_SCALE!r};
}}
"""

#: N(0, 1) from stream positions counter, counter + 1: Box–Muller as random_normal
STANDARD_NORMAL = """\
static inline double dispatchrl_standard_normal(uint64_t key, uint64_t counter)
{
    const double u1 = dispatchrl_uniform01(key, counter);
    const double u2 = dispatchrl_uniform01(key, counter + 1);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}
"""


def _doubles(name: str, values) -> str:
    return f"{name}[{len(values)}] = {{{', '.join(repr(float(v)) for v in values)}}}"


#: N(0, 1) from one stream position: the normal quantile of cpu.standard_normal_icdf
STANDARD_NORMAL_ICDF = f"""\
static inline double dispatchrl_quintic(const double c[6], double x)
{{
    return ((((c[0] * x + c[1]) * x + c[2]) * x + c[3]) * x + c[4]) * x + c[5];
}}

static inline double dispatchrl_normal_quantile(double p)
{{
    static const double {_doubles("a", api.NORMAL_QUANTILE_CENTRAL[0])};
    static const double {_doubles("b", api.NORMAL_QUANTILE_CENTRAL[1])};
    static const double {_doubles("c", api.NORMAL_QUANTILE_TAIL[0])};
    static const double {_doubles("d", api.NORMAL_QUANTILE_TAIL[1])};
    if (p >= {api.NORMAL_QUANTILE_LOW!r} && p <= 1.0 - {api.NORMAL_QUANTILE_LOW!r}) {{
        const double q = p - 0.5, r = q * q;
        return dispatchrl_quintic(a, r) * q / dispatchrl_quintic(b, r);
    }}
    const double t = sqrt(-2.0 * log(p < 1.0 - p ? p : 1.0 - p));
    const double x = dispatchrl_quintic(c, t) / dispatchrl_quintic(d, t);
    return p < 0.5 ? x : -x;
}}

static inline double dispatchrl_standard_normal_icdf(uint64_t key, uint64_t counter)
{{
    const double cell = (double)(int64_t)(dispatchrl_splitmix64(key, counter) >> 12); /* floor(uniform01 * 2**52) */
    return dispatchrl_normal_quantile(cell * {2.0 * UNIFORM01_SCALE!r} + {UNIFORM01_SCALE!r});
}}
"""
#: the helpers a kernel drawing uniforms, or normals, needs (CKernel.helpers)
UNIFORM_HELPERS = (UNIFORM01,)
NORMAL_HELPERS = (UNIFORM01, STANDARD_NORMAL)

RANDOM_UNIFORM = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < SIZE; i++) {
    const T v = (T)(low + (high - low) * dispatchrl_uniform01(key, base + (uint64_t)i));
    out[i] = v > (T)top ? (T)top : v; /* rounded up to high in T: api.uniform_top */
}
rng[1] = base + SIZE;
"""


@api.random_uniform.dispatch
def random_uniform(device: C, rng, out, low, high):
    launch(
        device,
        CKernel(
            "random_uniform",
            RANDOM_UNIFORM,
            ("rng", "out", "low", "high", "top"),
            ("rng", "out"),
            {"SIZE": out.size},
            out.dtype,
            UNIFORM_HELPERS,
            overwrites=("out",),
        ),
        rng,
        out,
        low,
        high,
        api.uniform_top(out.dtype, low, high),
    )


RANDOM_NORMAL = """
const uint64_t key = rng[0], base = rng[1];
for (int i = 0; i < SIZE; i++) {
    const double u1 = dispatchrl_uniform01(key, base + 2 * (uint64_t)i);
    const double u2 = dispatchrl_uniform01(key, base + 2 * (uint64_t)i + 1);
    out[i] = (T)(mean + std * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}
rng[1] = base + 2 * (uint64_t)SIZE;
"""


c_method(api.random_normal, RANDOM_NORMAL, lambda arg: {"SIZE": arg.out.size}, "out", helpers=UNIFORM_HELPERS)
