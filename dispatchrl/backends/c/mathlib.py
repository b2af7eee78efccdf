"""The C device's own math: the sin, cos, exp, log, tanh, pow, fmod, erf (double) and their float
forms that generated C calls instead of libm, so a step gives the same bits on every target
(x86, ARM, RISC-V, Cortex-M, WebAssembly) and an exported trainer links no libm.

Every function is plain C99 arithmetic on doubles in a fixed order (with ``-ffp-contract=off``);
sqrt, fabs and copysign are the compiler builtins, which IEEE 754 defines exactly (correctly
rounded sqrt, bit operations) and which compile to instructions on every target with a double
FPU. The float forms compute in double and round once. Accuracy (max ulp error against float64
numpy, measured by tests/test_trainer.py::test_math_accuracy): see docs/guides/microcontrollers-wasm.md.

``MATH`` is C text; after it, function-like macros make ``sin(``, ``tanhf(``, ... in kernel
bodies call these functions, so no kernel source changes.
"""

__all__ = ["MATH", "MATH_FUNCTIONS"]

#: libm names the macros take over (double, and float with an f suffix)
MATH_FUNCTIONS = ("sin", "cos", "exp", "log", "tanh", "pow", "fmod", "erf", "sqrt", "fabs", "copysign", "fmin", "fmax")

MATH = r"""
/* ---- dispatchrl math: no libm, the same bits on every target ---- */
#define NAN (__builtin_nan(""))
#define INFINITY (__builtin_inf())

static inline uint64_t drl_bits(double x) { union { double d; uint64_t u; } v; v.d = x; return v.u; }
static inline double drl_from_bits(uint64_t u) { union { double d; uint64_t u; } v; v.u = u; return v.d; }
static inline int drl_isnan(double x) { return x != x; }
static inline double drl_fabs(double x) { return __builtin_fabs(x); }
static inline double drl_copysign(double x, double y) { return __builtin_copysign(x, y); }
static inline double drl_sqrt(double x) { return __builtin_sqrt(x); }
static inline float drl_sqrtf(float x) { return __builtin_sqrtf(x); }
static inline double drl_fmin(double x, double y) { return drl_isnan(x) ? y : drl_isnan(y) ? x : (x < y ? x : y); }
static inline double drl_fmax(double x, double y) { return drl_isnan(x) ? y : drl_isnan(y) ? x : (x > y ? x : y); }
/* nearest integer (ties away from zero) as int64, for |x| < 2^62 */
static inline int64_t drl_round_int(double x) { return (int64_t)(x >= 0 ? x + 0.5 : x - 0.5); }

/* exp: k ln2 + r reduction (Cody-Waite), fdlibm's rational form of e^r */
static double drl_exp(double x)
{
    if (drl_isnan(x)) return x;
    if (x > 709.782712893384) return INFINITY;
    if (x < -745.1332191019412) return 0.0;
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const int64_t k = drl_round_int(x * 1.44269504088896338700e+00);
    const double hi = x - (double)k * ln2_hi, lo = (double)k * ln2_lo, r = hi - lo;
    const double t = r * r;
    const double c = r - t * (1.66666666666666019037e-01 + t * (-2.77777777770155933842e-03
                     + t * (6.61375632143793436117e-05 + t * (-1.65339022054652515390e-06
                     + t * 4.13813679705723846039e-08))));
    const double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    if (k >= -1021 && k <= 1023) return drl_from_bits(drl_bits(y) + ((uint64_t)(k + 0) << 52));
    if (k > 1023) return y * 2.0 * drl_from_bits((uint64_t)(k - 1 + 1023) << 52);
    return y * drl_from_bits((uint64_t)(k + 1000 + 1023) << 52) * 9.332636185032189e-302; /* 2^-1000 */
}

/* log: x = 2^k (1 + f), sqrt(2)/2 <= 1 + f < sqrt(2), fdlibm's series in s = f / (2 + f) */
static double drl_log(double x)
{
    if (drl_isnan(x) || x < 0) return NAN;
    if (x == 0) return -INFINITY;
    if (x == INFINITY) return x;
    int64_t k = 0;
    if (x < 2.2250738585072014e-308) { x *= 18014398509481984.0; k = -54; } /* subnormal: * 2^54 */
    uint64_t bits = drl_bits(x);
    uint32_t hx = (uint32_t)(bits >> 32);
    k += (int64_t)(hx >> 20) - 1023;
    hx &= 0x000fffffu;
    const uint32_t i = (hx + 0x95f64u) & 0x100000u;
    bits = ((uint64_t)(hx | (i ^ 0x3ff00000u)) << 32) | (bits & 0xffffffffu);
    k += (int64_t)(i >> 20);
    const double f = drl_from_bits(bits) - 1.0;
    const double s = f / (2.0 + f), dk = (double)k, z = s * s, w = z * z;
    const double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    const double t2 = z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01
                      + w * 1.479819860511658591e-01)));
    const double R = t2 + t1, hfsq = 0.5 * f * f;
    return dk * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + R) + dk * 1.90821492927058770002e-10)) - f);
}

/* sin and cos: r = x - k pi/2 (three-part pi/2), fdlibm's kernel polynomials on |r| <= pi/4 */
static inline double drl_sin_kernel(double r)
{
    const double z = r * r;
    return r + r * z * (-1.66666666666666324348e-01 + z * (8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04
               + z * (2.75573137070700676789e-06 + z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)))));
}
static inline double drl_cos_kernel(double r)
{
    const double z = r * r, hz = 0.5 * z, w = 1.0 - hz;
    const double p = z * z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * (2.48015872894767294178e-05
                     + z * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
    return w + (((1.0 - w) - hz) + p);
}
static double drl_sincos(double x, int want_cos)
{
    if (drl_isnan(x) || x == INFINITY || x == -INFINITY) return NAN;
    if (drl_fabs(x) > 1e9) return NAN; /* beyond the reduction's accuracy: no trainer goes there */
    const int64_t k = drl_round_int(x * 6.36619772367581382433e-01);
    const double dk = (double)k;
    const double r = ((x - dk * 1.57079632673412561417e+00) - dk * 6.07710050630396597660e-11)
                     - dk * 2.02226624871116645580e-21;
    const int quadrant = (int)((k + (want_cos ? 1 : 0)) & 3);
    switch (quadrant) {
    case 0: return drl_sin_kernel(r);
    case 1: return drl_cos_kernel(r);
    case 2: return -drl_sin_kernel(r);
    default: return -drl_cos_kernel(r);
    }
}
static inline double drl_sin(double x) { return drl_sincos(x, 0); }
static inline double drl_cos(double x) { return drl_sincos(x, 1); }

/* tanh: Cephes' rational form below 0.625, 1 - 2 / (e^2|x| + 1) above. On SIMD targets (x86-64,
   AArch64, WebAssembly SIMD128) both forms are computed and one is selected by bit masks, so a loop
   over tanh (an activation layer) vectorises: ~3x faster per element here (AVX2), same bits (every
   float input checked, signalling NaNs aside, which come out quiet). Elsewhere (Cortex-M: soft
   double on M4) the branches skip the unused form. */
#if (defined(__SSE2__) || defined(__aarch64__) || defined(__wasm_simd128__)) && !defined(DISPATCHRL_SCALAR_TANH)
/* c ? x : y by bit operations: no branch left for the compiler to rebuild */
static inline double drl_select(int c, double x, double y)
{
    const uint64_t m = -(uint64_t)(c != 0);
    return drl_from_bits((drl_bits(x) & m) | (drl_bits(y) & ~m));
}
/* drl_exp for 1.25 <= x <= 44 (tanh's range): the same operations without the range branches;
   2^k is built from k + 1.5 * 2^52, whose low bits hold k */
static inline double drl_exp_tanh_range(double x)
{
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double dk = (double)(int32_t)(x * 1.44269504088896338700e+00 + 0.5); /* drl_round_int, x > 0 */
    const double hi = x - dk * ln2_hi, lo = dk * ln2_lo, r = hi - lo;
    const double t = r * r;
    const double c = r - t * (1.66666666666666019037e-01 + t * (-2.77777777770155933842e-03
                     + t * (6.61375632143793436117e-05 + t * (-1.65339022054652515390e-06
                     + t * 4.13813679705723846039e-08))));
    const double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    return y * drl_from_bits((drl_bits(dk + 6755399441055744.0) + 1023) << 52);
}
static inline double drl_tanh(double x)
{
    const double a = drl_fabs(x), z = x * x;
    const double p = (-9.64399179425052238628e-01 * z + -9.92877231001918586564e+01) * z + -1.61468768441708447952e+03;
    const double q = ((z + 1.12811678491632931402e+02) * z + 2.23548839060100448583e+03) * z + 4.84406305325125486048e+03;
    const double small = x + x * z * (p / q);
    const double e = drl_select(2.0 * a < 44.0, drl_select(2.0 * a > 1.25, 2.0 * a, 1.25), 44.0);
    const double large = drl_copysign(1.0 - 2.0 / (drl_exp_tanh_range(e) + 1.0), x);
    const double y = drl_select(a > 22.0, drl_copysign(1.0, x), drl_select(a >= 0.625, large, small));
    return drl_select(drl_isnan(x), x, y);
}
#else
static double drl_tanh(double x)
{
    if (drl_isnan(x)) return x;
    const double a = drl_fabs(x);
    if (a > 22.0) return drl_copysign(1.0, x);
    if (a >= 0.625) return drl_copysign(1.0 - 2.0 / (drl_exp(2.0 * a) + 1.0), x);
    const double z = x * x;
    const double p = (-9.64399179425052238628e-01 * z + -9.92877231001918586564e+01) * z + -1.61468768441708447952e+03;
    const double q = ((z + 1.12811678491632931402e+02) * z + 2.23548839060100448583e+03) * z + 4.84406305325125486048e+03;
    return x + x * z * (p / q);
}
#endif

/* pow for x > 0 (Adam's bias corrections): exp(y log x) */
static double drl_pow(double x, double y)
{
    if (y == 0) return 1.0;
    if (x == 1) return 1.0;
    if (drl_isnan(x) || drl_isnan(y)) return NAN;
    if (x == 0) return y > 0 ? 0.0 : INFINITY;
    if (x < 0) {
        const int64_t n = (int64_t)y;
        if ((double)n != y) return NAN;
        const double m = drl_exp(y * drl_log(-x));
        return (n & 1) ? -m : m;
    }
    return drl_exp(y * drl_log(x));
}

/* fmod, exact: subtract the largest y 2^j <= |x| until |x| < |y| (each subtraction is exact) */
static double drl_fmod(double x, double y)
{
    if (drl_isnan(x) || drl_isnan(y) || x == INFINITY || x == -INFINITY || y == 0) return NAN;
    double ax = drl_fabs(x);
    const double ay = drl_fabs(y);
    if (ay == INFINITY) return x;
    while (ax >= ay) {
        double t = ay;
        while (t <= ax * 0.5) t *= 2.0;
        ax -= t;
    }
    return drl_copysign(ax, x);
}

/* erf: its Taylor series below 1.5 (within 6 ulp of 1 absolute), erfc's continued fraction
   (fixed depth 100, within 1 ulp relative) above. The series' terms grow like exp(x^2), so past 1.5
   it loses digits that 1 + erf(x) (GELU at negative x) exposes. */
static double drl_erf(double x)
{
    if (drl_isnan(x)) return x;
    const double a = drl_fabs(x);
    if (a >= 6.0) return drl_copysign(1.0, x);
    if (a < 1.5) {
        const double z = x * x;
        double term = x, sum = x;
        for (int n = 1; n < 120; n++) {
            term *= -z / (double)n;
            const double add = term / (double)(2 * n + 1);
            sum += add;
            if (drl_fabs(add) < 1e-17 * drl_fabs(sum)) break;
        }
        return 1.1283791670955125739 * sum;
    }
    /* erfc(a) = exp(-a^2) / sqrt(pi) * 1 / (a + (1/2) / (a + 1 / (a + (3/2) / (a + 2 / (a + ...))))) */
    double f = a;
    for (int n = 100; n >= 1; n--) f = a + (0.5 * (double)n) / f;
    const double erfc = drl_exp(-a * a) * 0.56418958354775628695 / f;
    return drl_copysign(1.0 - erfc, x);
}

static inline float drl_sinf(float x) { return (float)drl_sin(x); }
static inline float drl_cosf(float x) { return (float)drl_cos(x); }
static inline float drl_expf(float x) { return (float)drl_exp(x); }
static inline float drl_logf(float x) { return (float)drl_log(x); }
static inline float drl_tanhf(float x) { return (float)drl_tanh(x); }
static inline float drl_powf(float x, float y) { return (float)drl_pow(x, y); }
static inline float drl_fmodf(float x, float y) { return (float)drl_fmod(x, y); }
static inline float drl_erff(float x) { return (float)drl_erf(x); }
static inline float drl_fabsf(float x) { return __builtin_fabsf(x); }
static inline float drl_copysignf(float x, float y) { return __builtin_copysignf(x, y); }
static inline float drl_fminf(float x, float y) { return (float)drl_fmin(x, y); }
static inline float drl_fmaxf(float x, float y) { return (float)drl_fmax(x, y); }
"""

MATH += "".join(
    f"#define {name}(...) drl_{name}(__VA_ARGS__)\n#define {name}f(...) drl_{name}f(__VA_ARGS__)\n"
    for name in MATH_FUNCTIONS
)
MATH += "/* ---- end of dispatchrl math ---- */\n"
