"""Transcendental functions as polynomials the vectoriser keeps in vectors.

TVM lowers exp, erf, tanh, sigmoid, log, sin and cos on CPU to LLVM intrinsics that LLVM, given no vector math
library, turns into one scalar call into libm per element: a vectorised loop over them runs at scalar speed.
In real models they sit in every activation (SiLU and sigmoid in YOLO-style detectors, GELU's erf in
transformers, Mish's log, a vocoder's sin, softmax over a recogniser's 18710 classes): a softmax over
[40, 18710] took 4.4 ms (0.7 GFLOP/s), and a 1x1 conv with a GELU epilogue ran at 5.9 GFLOP/s where plain
convs run at 50-70. Here each is a range reduction and a polynomial, as onnxruntime's MLAS does:
- erf and tanh are TVM's fast_erf and fast_tanh: 4.2e-7 and 3.6e-7 absolute at worst against float64, over
  their whole range; GELU (ONNX's Gelu from opset 20) uses them;
- exp (so sigmoid, and the long-row softmax) is `exp_element`, not TVM's fast_exp: 4e-7 relative at worst
  over [-87, 88] where fast_exp was 4.1e-6 (one float32 ln 2 in its range reduction), with a degree-5
  polynomial (XNNPACK's) for fast_exp's degree 7: EfficientNet-B0's int8 library, whose SiLU epilogues follow
  cheap int8 convs, 6% faster; NaN stays NaN and exp is inf past float32's range (a sigmoid's and a
  softmax's exponential leave that select out: `sigmoid_element`, `nonpositive_exp_element`);
- log (so Softplus and Mish, which the importer writes with it) is `log_element`, from the float's bits and
  Cephes' polynomial: 2e-7; sin and cos are `sin_element`, reduced by pi / 2 in float64: 2e-7 up to 4e8;
  atan is `atan_element`, Cephes' reduction to [0, tan(pi / 8)] and polynomial; Round (no polynomial, but
  TVM's nearbyint stayed scalar) is round_half_even_element; sinh and cosh, which TVM cannot compile for a
  CPU, are exp_element's and Cephes' small-argument polynomial; asin and acos Cephes' (`asin_element`);
- a softmax over long rows, and log softmax, are kernels/softmax.py's row-by-row kernel; others TVM's
  fast_softmax, or x - max - log(sum(exp)) for log softmax;
- pow is a product where its exponent is a small whole constant (GPT-2's tanh GELU cubes its input) and a
  square root where it is 0.5; a division by a constant (hardswish's / 6) a product by its reciprocal.
Other dtypes than float32 keep TVM's own legalisation.
"""

from __future__ import annotations

import math

import numpy as np

FAST_DTYPES = ("float32",)


def _f32(value: float):
    """A float32 constant of TIR, as the element functions below compute in."""
    from tvm import tirx

    return tirx.const(value, "float32")


def _horner(coefficients, x):
    """c0 x^n + c1 x^(n-1) + ... + cn of float32 TIR expressions, coefficients from the highest power's down."""
    polynomial = _f32(coefficients[0])
    for coefficient in coefficients[1:]:
        polynomial = polynomial * x + _f32(coefficient)
    return polynomial


def _per_element(element, name: str):
    """A TE compute applying `element`, a function of one float32 TIR value, to every element of its input."""

    def compute(x):
        from tvm import te

        return te.compute(x.shape, lambda *i: element(x(*i)), name=name)

    return compute


def legalizations() -> dict:
    """LegalizeOps overrides: relax operator name -> its fast legalisation."""
    from tvm import topi

    return {
        "relax.erf": _fast(topi.fast_erf, "erf"),
        "relax.tanh": _fast(topi.fast_tanh, "tanh"),
        "relax.nn.gelu": _fast(_gelu, "gelu"),
        "relax.nn.gelu_tanh": _fast(_gelu_tanh, "gelu_tanh"),
        "relax.nn.softmax": _fast(_softmax, "softmax", with_axis=True),
        "relax.nn.log_softmax": _fast(_log_softmax, "log_softmax", with_axis=True),
        "relax.power": _power,
        "relax.divide": _divide,
        **{f"relax.{name}": _fast(_per_element(element, name), name) for name, element in ELEMENTS.items()},
    }


LOG2E = 1.4426950408889634
# ln 2 in two parts (Cody and Waite): n * LN2_HIGH is exact in float32 for |n| < 2^9, so t loses nothing where
# one float32 ln 2 left t 4e-6 off at |v| ~ 88 (n ln 2's rounding)
LN2_HIGH, LN2_LOW = float.fromhex("0x1.62E400p-1"), float.fromhex("0x1.7F7D1Cp-20")
# exp(t) - 1 ~ t (c1 + t (c2 + t (c3 + t (c4 + t c5)))) on [-ln2 / 2, ln2 / 2]: XNNPACK's minimax
# coefficients (its f32 vexp "rr2-p5"), as float32 bit patterns
EXP_POLYNOMIAL = ("0x1.FFFFF6p-1", "0x1.FFFDC6p-2", "0x1.555A80p-3", "0x1.573A1Ap-5", "0x1.0F9F9Cp-7")
# the range computed: below it 2^n's exponent field is zero, so exp is 0; from EXP_HIGHEST up to where float32
# overflows exp stays exp(EXP_HIGHEST) ~ 2.4e38 (fast_exp: inf, both within a factor of 1.4 of the truth's
# 2.4e38..3.4e38), and from there it is inf
EXP_LOWEST, EXP_HIGHEST, EXP_OVERFLOW = -88.0, 88.3762626647949, 88.72283935546875


def exp_element(v):
    """exp(v) = 2^n exp(t), n = round(v / ln2), t = v - n ln2, as 2^n + (t 2^n) p(t): 17 vector instructions.
    2^n is n's bits shifted into a float's exponent. The clamps are selects whose NaN compares false, so NaN
    comes through as NaN."""
    from tvm import tirx

    overflows = v > _f32(EXP_OVERFLOW)
    return tirx.Select(overflows, _f32(float("inf")), _clamped_exp(v, EXP_HIGHEST))


# a sigmoid's exponential is clamped here: 1 / (1 + exp(87)) = 1.6e-38 is still a normal float32 (from
# EXP_HIGHEST it was 4e-39, a denormal), within 1.7e-38 of the truth for any argument past it
SIGMOID_EXP_HIGHEST = 87.0


def sigmoid_element(v):
    """1 / (1 + exp(-v)) with exp's argument clamped at SIGMOID_EXP_HIGHEST and no select for its overflow to
    inf, which changes nothing a float32 sigmoid shows: two vector instructions of the ~32 an int8 conv's
    SiLU epilogue runs per vector (EfficientNet-B0's 16 -> 96 expansion at 112x112: 319 -> 308 us)."""
    return 1.0 / (1.0 + _clamped_exp(-v, SIGMOID_EXP_HIGHEST))


def nonpositive_exp_element(v):
    """exp(v) of a v known to be at most 0 (a softmax's x - max): no upper clamp and no overflow select."""
    return _clamped_exp(v, None)


def _clamped_exp(v, highest: float | None):
    """exp_element's range reduction and polynomial, its argument clamped to [EXP_LOWEST, highest]."""
    from tvm import tirx

    if highest is not None:
        v = tirx.Select(v > _f32(highest), _f32(highest), v)
    v = tirx.Select(v < _f32(EXP_LOWEST), _f32(EXP_LOWEST), v)
    n = tirx.round(v * _f32(LOG2E))
    t = (v - n * _f32(LN2_HIGH)) - n * _f32(LN2_LOW)
    power = tirx.reinterpret("float32", tirx.shift_left(tirx.Cast("int32", n) + 127, 23))
    polynomial = _horner([float.fromhex(c) for c in reversed(EXP_POLYNOMIAL)], t)
    return power + (t * power) * polynomial


POWERS_BY_MULTIPLYING = (2.0, 3.0, 4.0)  # x ** n as n - 1 multiplications, within an ulp or two of powf


def _power(bb, call):
    """x ** c by a constant c of 2, 3 or 4 as multiplications, of 0.5 as a square root: TVM's pow is a scalar
    call into libm per element (the cube in GPT-2's tanh GELU, 0.044715 * x ** 3, held its whole element-wise
    kernel to 19 GFLOP/s: 2.6 ms of a 5.5 ms decoder). Any other exponent or dtype keeps TVM's legalisation."""
    from tvm import ir, te, topi

    exponent = _scalar_constant(call.args[1])
    # an exponent of more dimensions than x broadcasts x to its rank: TVM's pow makes that shape
    same_shape = int(call.args[1].ty.ndim) <= int(call.args[0].ty.ndim)
    if str(call.args[0].ty.dtype) not in FAST_DTYPES or exponent not in (*POWERS_BY_MULTIPLYING, 0.5) or not same_shape:
        return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
    if exponent == 0.5:
        return bb.call_te(topi.sqrt, call.args[0], primfunc_name_hint="power")

    def multiplied(x):
        def element(*i):
            product = x(*i)
            for _ in range(int(exponent) - 1):
                product = product * x(*i)
            return product

        return te.compute(x.shape, element, name="power")

    return bb.call_te(multiplied, call.args[0], primfunc_name_hint="power")


def _divide(bb, call):
    """x / c by a float32 constant c as x times 1 / c: a vector division has a throughput of one per 10-16
    cycles on Intel's cores, where the rest of a conv's epilogue (hardswish's x * relu6(x + 3) / 6 in
    MobileNetV3's blocks) runs two instructions a cycle: the DB detector's int8 library ran 0.94x. The product
    is within an ulp of the quotient, and exact where 1 / c is a power of two. (The product corrected by its
    exact remainder, q + (x - q c) / c in fused multiply-adds, gave the division's bits but ran the bundled
    classifier 1.03x: its padded convs' epilogues are scalar loops LLVM vectorises again at 8 lanes, where a
    division is cheap and the longer chain is not.) A c whose reciprocal is not a normal float32, another dtype
    or a divisor of more elements keeps TVM's division."""
    from tvm import ir, te

    divisor = _scalar_constant(call.args[1])
    with np.errstate(divide="ignore", over="ignore"):
        reciprocal = None if divisor is None else float(np.float32(1.0) / np.float32(divisor))
    same_shape = int(call.args[1].ty.ndim) <= int(call.args[0].ty.ndim)
    if (
        str(call.args[0].ty.dtype) not in FAST_DTYPES
        or reciprocal is None
        or not same_shape
        or not np.finfo(np.float32).tiny <= abs(reciprocal) <= np.finfo(np.float32).max
    ):
        return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)

    def divided(x):
        return te.compute(x.shape, lambda *i: x(*i) * _f32(reciprocal), name="divide")

    return bb.call_te(divided, call.args[0], primfunc_name_hint="divide")


def _scalar_constant(expr) -> float | None:
    """The value of a constant of one element, else None."""
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    value = expr.value.numpy() if isinstance(expr, Constant) else None
    return float(value.reshape(())) if value is not None and value.size == 1 else None


# sin and cos on [-pi / 4, pi / 4] (Cephes' sinf and cosf): sin r = r + r^3 (s1 + r^2 (s2 + r^2 s3)),
# cos r = 1 - r^2 / 2 + r^4 (c1 + r^2 (c2 + r^2 c3))
SIN_POLYNOMIAL = (-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4)
COS_POLYNOMIAL = (4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5)
# beyond this |v| one float64 pi / 2 leaves the remainder off by more than float32's resolution near 1, and
# sin and cos are NaN, loudly, where libm would give a value (a float32 that large is a whole number of
# radians give or take 32: the value means little, and validation against onnxruntime would flag it)
SIN_LIMIT = 5e8


def sin_element(v, quarter_turns: int):
    """sin(v + quarter_turns * pi / 2) of a float32 v: v less its nearest multiple k of pi / 2, taken in
    float64 (to 3e-8 up to SIN_LIMIT, where float32's three-part reduction held to 8192), then sin or cos of
    the remainder by (k + quarter_turns) mod 4, and its sign. TVM's sin and cos are libm calls, one per
    element: 1.8x onnxruntime's time over a million elements (SIREN and vocoder models take sin of every
    activation)."""
    from tvm import tirx

    wide = tirx.Cast("float64", v)
    k = tirx.round(wide * tirx.const(2.0 / math.pi, "float64"))
    r = tirx.Cast("float32", wide - k * tirx.const(math.pi / 2, "float64"))
    quadrant = tirx.Cast("int32", tirx.Cast("int64", k)) + quarter_turns
    square = r * r
    s1, s2, s3 = (_f32(c) for c in SIN_POLYNOMIAL)
    c1, c2, c3 = (_f32(c) for c in COS_POLYNOMIAL)
    sine = r + r * square * (s1 + square * (s2 + square * s3))
    cosine = _f32(1.0) - _f32(0.5) * square + square * square * (c1 + square * (c2 + square * c3))
    value = tirx.Select(tirx.bitwise_and(quadrant, 1) == 1, cosine, sine)
    value = tirx.Select(tirx.bitwise_and(quadrant, 2) == 2, -value, value)
    return tirx.Select(tirx.abs(v) > _f32(SIN_LIMIT), _f32(float("nan")), value)


# log(1 + f) - f + f^2 / 2 ~ f^3 p(f) on [sqrt(1/2) - 1, sqrt(2) - 1] (Cephes' logf), p's coefficients from
# f^8's down; and ln 2 in two parts, as LN2_HIGH
LOG_POLYNOMIAL = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
LOG_LN2_HIGH, LOG_LN2_LOW = 0.693359375, -2.12194440e-4
FLOAT32_TINIEST_NORMAL = 1.1754943508222875e-38


def log_element(v):
    """log(v) of a float32: v = m 2^e with m in [sqrt(1/2), sqrt(2)) read from its bits (a subnormal v scaled
    by 2^23 first), log v = e ln 2 + log m, log m by Cephes' polynomial in m - 1; log 0 = -inf, log inf = inf,
    NaN for NaN and below zero. TVM's log is a libm call per element, and so were Softplus and Mish, which
    the importer writes as log(1 + exp(..)): 2.5 ms over a million elements for Mish."""
    from tvm import tirx

    def i32(value: int):
        return tirx.const(value, "int32")

    subnormal = v < _f32(FLOAT32_TINIEST_NORMAL)
    scaled = tirx.Select(subnormal, v * _f32(2.0**23), v)
    bits = tirx.reinterpret("int32", scaled)
    exponent = tirx.shift_right(bits, i32(23)) - tirx.Select(subnormal, i32(127 + 23), i32(127))
    mantissa = tirx.reinterpret("float32", tirx.bitwise_or(tirx.bitwise_and(bits, i32(0x007FFFFF)), i32(0x3F800000)))
    above = mantissa > _f32(math.sqrt(2.0))
    f = tirx.Select(above, mantissa * _f32(0.5), mantissa) - _f32(1.0)
    e = tirx.Cast("float32", exponent + tirx.Select(above, i32(1), i32(0)))
    polynomial = _horner(LOG_POLYNOMIAL, f)
    square = f * f
    result = f + (f * square * polynomial + e * _f32(LOG_LN2_LOW) - _f32(0.5) * square) + e * _f32(LOG_LN2_HIGH)
    special = tirx.Select(
        v == _f32(0.0), _f32(float("-inf")), tirx.Select(v == _f32(float("inf")), v, _f32(float("nan")))
    )
    return tirx.Select(tirx.all(v > _f32(0.0), v < _f32(float("inf"))), result, special)


# atan(x) - x ~ x^3 p(x^2) on [-tan(pi / 8), tan(pi / 8)] (Cephes' atanf), p's coefficients from x^6's down
ATAN_POLYNOMIAL = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950


def atan_element(v):
    """atan(v) of a float32: |v| reduced to [0, tan(pi / 8)] by atan(a) = pi / 2 + atan(-1 / a) above tan(3 pi / 8)
    and pi / 4 + atan((a - 1) / (a + 1)) above tan(pi / 8), Cephes' polynomial, the sign put back; pi / 2 at
    infinity, NaN for NaN. TVM's atan is a libm call per element: 6.4x onnxruntime's time over a million."""
    from tvm import tirx

    a = tirx.abs(v)
    far, near = a > _f32(TAN_3PI_8), a > _f32(TAN_PI_8)
    reduced = tirx.Select(far, _f32(-1.0) / a, tirx.Select(near, (a - _f32(1.0)) / (a + _f32(1.0)), a))
    offset = tirx.Select(far, _f32(math.pi / 2), tirx.Select(near, _f32(math.pi / 4), _f32(0.0)))
    square = reduced * reduced
    polynomial = _horner(ATAN_POLYNOMIAL, square)
    value = offset + (reduced + reduced * square * polynomial)
    return tirx.Select(v < _f32(0.0), -value, value)


# asin(x) - x ~ x^3 p(x^2) for |x| <= 1/2 (Cephes' asinf), p's coefficients from x^8's down
ASIN_POLYNOMIAL = (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1)


def _asin_reduced(v):
    """(asin(r), whether |v| > 1/2) for r = v up to |v| = 1/2 and r = sqrt((1 - |v|) / 2) above it, where
    asin(|v|) = pi / 2 - 2 asin(r): Cephes' asinf, whose polynomial holds on [0, 1/2]. Past |v| = 1 r is NaN."""
    from tvm import tirx

    far = tirx.abs(v) > _f32(0.5)
    square = tirx.Select(far, _f32(0.5) * (_f32(1.0) - tirx.abs(v)), v * v)
    r = tirx.Select(far, tirx.sqrt(square), v)
    polynomial = _horner(ASIN_POLYNOMIAL, square)
    return r + r * square * polynomial, far


def asin_element(v):
    """asin(v) of a float32 (_asin_reduced), NaN past |v| = 1 and for NaN: TVM's asin is a libm call per
    element, 3.2x onnxruntime's time over a million."""
    from tvm import tirx

    small, far = _asin_reduced(v)
    value = _f32(math.pi / 2) - (small + small)
    return tirx.Select(far, tirx.Select(v < _f32(0.0), -value, value), small)


def acos_element(v):
    """acos(v) of a float32: pi / 2 - asin(v) up to |v| = 1/2, 2 asin(r) above (pi - 2 asin(r) below -1/2),
    as Cephes' acosf (_asin_reduced): TVM's acos is a libm call per element, 6.4x onnxruntime's time."""
    from tvm import tirx

    small, far = _asin_reduced(v)
    twice = small + small
    return tirx.Select(far, tirx.Select(v < _f32(0.0), _f32(math.pi) - twice, twice), _f32(math.pi / 2) - small)


# sinh(x) - x ~ x^3 p(x^2) for |x| <= 1 (Cephes' sinhf), p's coefficients from x^4's down
SINH_POLYNOMIAL = (2.03721912945e-4, 8.33028376239e-3, 1.66667160211e-1)


def _half_exponentials(a):
    """(e^a / 2, e^-a / 2) of a float32 a >= 0, from z = e^(a / 2): e^a / 2 = (z / 2) z stays finite as far as
    sinh and cosh do (e^a itself overflows at 88.7, they at 89.4)."""
    z = exp_element(a * _f32(0.5))
    return (z * _f32(0.5)) * z, _f32(0.5) / (z * z)


def sinh_element(v):
    """sinh(v) of a float32: Cephes' polynomial up to |v| = 1 (where e^v - e^-v loses v's digits), above it
    (e^|v| - e^-|v|) / 2 with the sign put back. TVM has no sinh or cosh for CPUs at all: a model with one
    failed to compile ("unknown intrinsic tirx.sinh")."""
    from tvm import tirx

    a = tirx.abs(v)
    square = v * v
    polynomial = _horner(SINH_POLYNOMIAL, square)
    up, down = _half_exponentials(a)
    large = tirx.Select(v < _f32(0.0), down - up, up - down)
    return tirx.Select(a > _f32(1.0), large, v + v * square * polynomial)


def cosh_element(v):
    """cosh(v) of a float32: (e^|v| + e^-|v|) / 2 (see sinh_element)."""
    from tvm import tirx

    up, down = _half_exponentials(tirx.abs(v))
    return up + down


def round_half_even_element(v):
    """v rounded to the nearest whole number, ties to even (ONNX's Round): TIR's round, which takes ties away
    from zero, moved back by one where v was a tie and the result is odd. TVM legalises Round to nearbyint,
    which its vectoriser leaves scalar and LLVM then vectorised as gathers and scatters: 1.9x onnxruntime's
    time over a million elements."""
    from tvm import tirx

    away = tirx.round(v)
    tie = tirx.abs(away - v) == _f32(0.5)
    odd = tirx.floor(away * _f32(0.5)) * _f32(2.0) != away
    return tirx.Select(tirx.all(tie, odd), tirx.Select(v > _f32(0.0), away - _f32(1.0), away + _f32(1.0)), away)


# relax operator (its name after "relax.") -> the element function its fast legalisation applies
ELEMENTS = {
    "exp": exp_element,
    "sigmoid": sigmoid_element,
    "sin": lambda v: sin_element(v, quarter_turns=0),
    "cos": lambda v: sin_element(v, quarter_turns=1),
    "log": log_element,
    "atan": atan_element,
    "asin": asin_element,
    "acos": acos_element,
    "sinh": sinh_element,
    "cosh": cosh_element,
    "round": round_half_even_element,
}
exponential = _per_element(exp_element, "exp")  # exp(x) of a float32 tensor, element by element


def _gelu(x):
    """x (1 + erf(x / sqrt 2)) / 2, as TVM's gelu (ONNX's Gelu from opset 20), its erf fast_erf's."""
    from tvm import te, topi

    erf = topi.fast_erf(te.compute(x.shape, lambda *i: x(*i) * math.sqrt(0.5), name="gelu_scaled"))
    return te.compute(x.shape, lambda *i: x(*i) * (0.5 + erf(*i) * 0.5), name="gelu")


def _gelu_tanh(x):
    """x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, as TVM's gelu_tanh, its tanh fast_tanh's."""
    from tvm import te, topi

    inner = te.compute(
        x.shape, lambda *i: math.sqrt(2.0 / math.pi) * x(*i) * (1.0 + 0.044715 * x(*i) * x(*i)), name="gelu_tanh_inner"
    )
    tanh = topi.fast_tanh(inner)
    return te.compute(x.shape, lambda *i: 0.5 * x(*i) * (1.0 + tanh(*i)), name="gelu_tanh")


def _log_softmax(x, axis: int):
    """log softmax(x): a long last axis row by row (kernels/softmax.py), any other as x - max - log(sum(exp))
    over the axis; TVM's own called libm's exp once per element (LogSoftmax over [1024, 1000] 20x
    onnxruntime's time)."""
    from tvm import te, tirx, topi

    from modelbuild.compiler.kernels import softmax

    if softmax.eligible(x.shape, axis):
        return softmax.compute_log(x, axis)
    axis = axis % len(x.shape)
    delta = topi.subtract(x, topi.max(x, axis=axis, keepdims=True))
    total = topi.sum(exponential(delta), axis=axis, keepdims=True)
    log_total = te.compute(total.shape, lambda *i: tirx.log(total(*i)), name="log_softmax_log")
    return topi.subtract(delta, log_total)


def _softmax(x, axis: int):
    from tvm import topi

    from modelbuild.compiler.kernels import softmax

    return (softmax.compute if softmax.eligible(x.shape, axis) else topi.nn.fast_softmax)(x, axis)


def _fast(compute, name: str, *, with_axis: bool = False):
    """A legalisation calling `compute` on FAST_DTYPES, and TVM's own legalisation on any other dtype."""
    from tvm import ir

    def legalize(bb, call):
        if str(call.args[0].ty.dtype) not in FAST_DTYPES:
            return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
        axis = (int(call.attrs.axis),) if with_axis else ()
        return bb.call_te(compute, call.args[0], *axis, primfunc_name_hint=name)

    return legalize
