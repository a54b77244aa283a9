"""exp, erf, tanh, sigmoid and softmax as vector polynomials, and small powers as products: no libm call left."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel

SHAPE = (4, 1000)


def reference(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype("float64")
    if name == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "erf": np.vectorize(math.erf)}[
        name
    ](x)


def operator(name: str):
    from tvm import relax

    return {
        "exp": relax.op.exp,
        "erf": relax.op.erf,
        "tanh": relax.op.tanh,
        "sigmoid": relax.op.sigmoid,
        "log": relax.op.log,
        "softmax": lambda v: relax.op.nn.softmax(v, axis=-1),
    }[name]


@pytest.mark.parametrize(
    "name, tolerance", [("exp", 5e-6), ("erf", 5e-7), ("tanh", 5e-7), ("sigmoid", 5e-6), ("softmax", 5e-6)]
)
def test_each_function_is_a_polynomial_within_its_measured_error(name, tolerance):
    import tvm

    op = operator(name)
    script, run = scheduled_kernel(
        build_module(lambda bb, x: bb.emit(op(x)), SHAPE), name, schedule=True, layout="auto"
    )
    assert f"T.{name}(" not in script and "T.exp(" not in script  # nothing left for LLVM to call libm for
    x = np.random.default_rng(12).uniform(-20, 20, SHAPE).astype("float32")
    expected = reference(name, x)
    got = run(tvm.runtime.tensor(x)).numpy()
    relative = np.abs(got - expected) / np.maximum(np.abs(expected), 1.0 if name in ("erf", "tanh") else 1e-30)
    assert relative.max() <= tolerance


def run_unary(name: str, x: np.ndarray) -> np.ndarray:
    import tvm

    _, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(operator(name)(v)), x.shape), name, schedule=True, layout="auto"
    )
    return run(tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("name", ["exp", "sigmoid"])
def test_exp_and_sigmoid_are_within_4e_7_relative_over_the_whole_range(name):
    """Every 64th float32 between -87 and 88.3 (2.1 million of them): TVM's fast_exp, which exp was before,
    is 4.1e-6 off at worst."""

    def every_64th_float_up_to(limit: float) -> np.ndarray:
        return np.arange(0, np.float32(limit).view("int32"), 64, dtype="int32").view("float32")

    x = np.concatenate([-every_64th_float_up_to(87.0), every_64th_float_up_to(88.3)])
    x = x[: x.size // 1024 * 1024].reshape(-1, 1024)
    expected = reference(name, x)
    relative = np.abs(run_unary(name, x) - expected) / expected
    assert relative.max() <= 4e-7


def test_exp_keeps_nan_and_overflows_to_inf_as_float32_does():
    """NaN stays NaN; far below the range exp is 0; between exp(88.376) and float32's largest it stays at
    exp(88.376) ~ 2.4e38; past that it is inf; sigmoid far out is 1, or 1 / (1 + exp(87)) = 1.6e-38, 0 to
    float32's precision and still a normal float (a denormal slows what reads it)."""
    x = np.array([[np.nan, -np.inf, -1e30, -100.0, 0.0, 88.5, 88.73, 1e30, np.inf]], "float32")
    got = run_unary("exp", x)
    assert np.isnan(got[0, 0])
    assert np.all(got[0, 1:4] == 0.0) and got[0, 4] == 1.0
    np.testing.assert_allclose(got[0, 5], np.exp(np.float32(88.3762626647949).astype("float64")), rtol=4e-7)
    assert np.all(got[0, 6:] == np.inf)
    sigmoid = run_unary("sigmoid", x)
    far_below = sigmoid[0, 1:4]
    assert np.isnan(sigmoid[0, 0]) and np.all(sigmoid[0, 5:] == 1.0)
    assert np.all((np.finfo(np.float32).tiny <= far_below) & (far_below < 1.7e-38))


@pytest.mark.parametrize("name", ["sigmoid", "softmax"])
def test_sigmoid_and_softmax_select_no_overflow_to_inf(name):
    """exp's overflow to inf is a compare and a select per vector that a sigmoid (1 / (1 + inf) = 0, where
    1 / (1 + exp(87)) is 0 to float32's precision) and a softmax (exp(x - max), at most 1) never need: two of
    the ~32 instructions an int8 conv's SiLU epilogue runs per vector."""
    script, _ = scheduled_kernel(
        build_module(lambda bb, x: bb.emit(operator(name)(x)), SHAPE), name, schedule=True, layout="auto"
    )
    assert 'T.float32("inf")' not in script and "T.Select(" in script  # the clamps are still there


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh"])
def test_gelu_calls_no_libm_and_is_within_5e_7_of_float64(name):
    """ONNX's Gelu (opset 20) becomes relax's gelu or gelu_tanh, whose own legalisation called libm's erf or
    tanh once per element: 12x onnxruntime's time over a million elements."""
    import tvm
    from tvm import relax

    op = {"gelu": relax.op.nn.gelu, "gelu_tanh": relax.op.nn.gelu_tanh}[name]
    script, run = scheduled_kernel(
        build_module(lambda bb, x: bb.emit(op(x)), SHAPE), "gelu", schedule=True, layout="auto"
    )
    assert "T.erf(" not in script and "T.tanh(" not in script
    x = np.random.default_rng(15).uniform(-8, 8, SHAPE).astype("float64")
    if name == "gelu":
        expected = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    else:
        expected = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    got = run(tvm.runtime.tensor(x.astype("float32"))).numpy()
    assert np.abs(got - expected).max() <= 5e-7 * np.abs(x).max()


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_and_cos_call_no_libm_and_are_within_2e_7_up_to_their_limit(name):
    """Reduced by pi / 2 in float64: within 2e-7 of float64's sin and cos for |x| up to 4e8 (float32's own
    three-part reduction held to 8192); NaN for NaN, the infinities and beyond SIN_LIMIT."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import fast_math

    op = {"sin": relax.op.sin, "cos": relax.op.cos}[name]
    x = np.concatenate([np.random.default_rng(16).uniform(-limit, limit, (8, 1000)) for limit in (4, 1e4, 4e8)])
    x = x.astype("float32")
    script, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(op(v)), x.shape), name, schedule=True, layout="auto"
    )
    assert f"T.{name}(" not in script
    expected = {"sin": np.sin, "cos": np.cos}[name](x.astype("float64"))
    assert np.abs(run(tvm.runtime.tensor(x)).numpy() - expected).max() <= 2e-7
    special = np.array([[np.nan, np.inf, -np.inf, 2 * fast_math.SIN_LIMIT]], "float32")
    _, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(op(v)), special.shape), name, schedule=True, layout="auto"
    )
    assert np.isnan(run(tvm.runtime.tensor(special)).numpy()).all()


def test_log_calls_no_libm_and_is_within_2e_7_over_every_float32():
    """Every 1024th positive float32 (subnormals, and up to the largest): within 2e-7 of float64's log, relative
    above 1 and absolute below; -inf at 0, inf at inf, NaN below 0 and for NaN. Softplus and Mish are written
    with it by the importer, and called libm per element."""
    import tvm

    x = np.arange(1, np.float32(np.finfo("float32").max).view("int32"), 1024, dtype="int32").view("float32")
    x = np.concatenate([x[: x.size // 1024 * 1024], np.float32([0.0, np.inf, -1.0, np.nan] + [1.0] * 1020)])
    x = x.reshape(-1, 1024)
    script, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(operator("log")(v)), x.shape), "log", schedule=True, layout="auto"
    )
    assert "T.log(" not in script
    got = run(tvm.runtime.tensor(x)).numpy()
    expected = np.log(x.astype("float64")[:-1])
    assert (np.abs(got[:-1] - expected) / np.maximum(np.abs(expected), 1.0)).max() <= 2e-7
    assert got[-1, 0] == -np.inf and got[-1, 1] == np.inf and np.isnan(got[-1, 2:4]).all()


def test_atan_calls_no_libm_and_is_within_3e_7_relative_over_every_float32():
    """Every 1024th float32 of both signs, subnormals to the largest: within 3e-7 of float64's atan, relative;
    pi / 2 at the infinities, with their sign, and NaN for NaN."""
    import tvm
    from tvm import relax

    positive = np.arange(1, np.float32(np.finfo("float32").max).view("int32"), 1024, dtype="int32").view("float32")
    x = np.concatenate([positive, -positive])
    x = np.concatenate([x[: x.size // 1024 * 1024], np.float32([np.inf, -np.inf, np.nan, 0.0] + [1.0] * 1020)])
    x = x.reshape(-1, 1024)
    script, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(relax.op.atan(v)), x.shape), "atan", schedule=True, layout="auto"
    )
    assert "T.atan(" not in script
    got = run(tvm.runtime.tensor(x)).numpy()
    expected = np.arctan(x.astype("float64")[:-1])
    assert (np.abs(got[:-1] - expected) / np.abs(expected)).max() <= 3e-7
    np.testing.assert_allclose(got[-1, :2], [np.pi / 2, -np.pi / 2], rtol=1e-7)
    assert np.isnan(got[-1, 2]) and got[-1, 3] == 0.0


def test_round_takes_ties_to_even_in_vectors_over_every_kind_of_float32():
    """ONNX's Round, as numpy's: ties to the even neighbour (0.5 -> 0, 1.5 -> 2, -2.5 -> -2), whole numbers
    and those past 2^23 as they are, NaN and the infinities kept. TVM's nearbyint was left scalar by its
    vectoriser and became gathers and scatters (1.9x onnxruntime's time)."""
    import tvm
    from tvm import relax

    quarters = np.arange(-4096, 4096, dtype="float32") / 4  # every tie between -1024 and 1024, and between
    spread = np.random.default_rng(17).standard_normal(8192).astype("float32") * np.float32(1e4)
    large = np.float32([2.0**23 + 1, -(2.0**23) - 3, 2.0**24 + 2, 1e30, np.inf, -np.inf, np.nan, 0.49999997])
    x = np.concatenate([quarters, spread, large, np.zeros(1024 - large.size, "float32")]).reshape(-1, 1024)
    script, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(relax.op.round(v)), x.shape), "round", schedule=True, layout="auto"
    )
    assert "T.nearbyint(" not in script
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), np.round(x))


@pytest.mark.parametrize("name", ["sinh", "cosh"])
def test_sinh_and_cosh_compile_for_a_cpu_and_are_within_1e_6_relative(name):
    """TVM had no sinh or cosh for CPUs: a model with either failed to compile. Over every 256th float32 of
    both signs up to 89 (sinh and cosh overflow at 89.4, e^x at 88.7): within 1e-6 relative of float64; the
    small arguments (Cephes' polynomial, where e^x - e^-x would cancel) with them; inf, NaN kept."""
    import tvm
    from tvm import relax

    op = {"sinh": relax.op.sinh, "cosh": relax.op.cosh}[name]
    positive = np.arange(1, np.float32(89.3).view("int32"), 256, dtype="int32").view("float32")
    x = np.concatenate([positive, -positive])
    x = np.concatenate([x[: x.size // 1024 * 1024], np.float32([np.inf, -np.inf, np.nan, 0.0] + [1.0] * 1020)])
    x = x.reshape(-1, 1024)
    _, run = scheduled_kernel(build_module(lambda bb, v: bb.emit(op(v)), x.shape), name, schedule=True, layout="auto")
    got = run(tvm.runtime.tensor(x)).numpy()
    expected = {"sinh": np.sinh, "cosh": np.cosh}[name](x.astype("float64")[:-1])
    assert np.isfinite(got[:-1]).all() and (np.abs(got[:-1] - expected) / np.abs(expected)).max() <= 1e-6
    want = {"sinh": [np.inf, -np.inf], "cosh": [np.inf, np.inf]}[name] + [np.nan, 0.0 if name == "sinh" else 1.0]
    np.testing.assert_array_equal(got[-1, :4], np.float32(want))


@pytest.mark.parametrize("name", ["asin", "acos"])
def test_asin_and_acos_call_no_libm_and_are_within_3e_7_relative_over_their_domain(name):
    """Every 256th float32 in [-1, 1]: within 3e-7 of float64, relative (acos's values near 1 small, and as
    exact); NaN past |x| = 1 and for NaN, and the ends exact."""
    import tvm
    from tvm import relax

    op, reference = {"asin": (relax.op.asin, np.arcsin), "acos": (relax.op.acos, np.arccos)}[name]
    positive = np.arange(1, np.float32(1.0).view("int32") + 1, 256, dtype="int32").view("float32")
    x = np.concatenate([positive, -positive])
    special = np.float32([1.0, -1.0, 1.0000001, -2.0, np.nan, np.inf])
    x = np.concatenate([x[: x.size // 1024 * 1024], special, np.zeros(1024 - special.size, "float32")])
    x = x.reshape(-1, 1024)
    script, run = scheduled_kernel(
        build_module(lambda bb, v: bb.emit(op(v)), x.shape), name, schedule=True, layout="auto"
    )
    assert f"T.{name}(" not in script
    got = run(tvm.runtime.tensor(x)).numpy()
    expected = reference(x.astype("float64")[:-1])
    assert (np.abs(got[:-1] - expected) / np.maximum(np.abs(expected), 1e-30)).max() <= 3e-7
    ends = {"asin": [np.pi / 2, -np.pi / 2], "acos": [0.0, np.pi]}[name]
    np.testing.assert_array_equal(got[-1, :2], np.float32(ends))
    assert np.isnan(got[-1, 2:6]).all()


@pytest.mark.parametrize("exponent, libm", [(2.0, False), (3.0, False), (4.0, False), (0.5, False), (2.5, True)])
def test_a_power_by_a_small_whole_constant_or_a_half_calls_no_libm(exponent, libm):
    """GPT-2's tanh GELU cubes its input with Pow: x * x * x, where powf was a scalar libm call per element;
    a square root for 0.5; any other exponent keeps TVM's pow. Within an ulp or two of float64's power."""
    import tvm
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.power(x, relax.const(exponent, "float32"))), SHAPE)
    script, run = scheduled_kernel(module, "pow", schedule=True, layout="auto")
    assert ("T.pow(" in script) == libm
    x = np.random.default_rng(13).uniform(0, 20, SHAPE).astype("float32")
    expected = x.astype("float64") ** exponent
    relative = np.abs(run(tvm.runtime.tensor(x)).numpy() - expected) / np.maximum(expected, 1e-30)
    assert relative.max() <= 3e-7


def test_a_power_by_an_exponent_of_more_dimensions_keeps_the_broadcast_shape():
    """x [4, 1000] ** a [1, 1, 1] constant is [1, 4, 1000]: TVM's pow makes that shape, a product of x would not."""
    import tvm
    from tvm import relax

    exponent = relax.const(np.full((1, 1, 1), 3.0, "float32"))
    module = build_module(lambda bb, x: bb.emit(relax.op.power(x, exponent)), SHAPE)
    _, run = scheduled_kernel(module, "pow", schedule=True, layout="auto")
    x = np.random.default_rng(14).uniform(0, 2, SHAPE).astype("float32")
    out = run(tvm.runtime.tensor(x)).numpy()
    assert out.shape == (1, *SHAPE)
    np.testing.assert_allclose(out[0], x.astype("float64") ** 3, rtol=3e-7)


BIT_PATTERNS = (256, 4096)  # a million random float32 bit patterns: every exponent, subnormals, inf and NaN


@pytest.mark.parametrize("divisor, ulps", [(6.0, 1), (255.0, 1), (-5.5, 1), (0.001, 1), (1e30, 1), (8.0, 0)])
def test_a_division_by_a_constant_is_a_product_within_an_ulp_of_the_quotient(divisor, ulps):
    """Hardswish's x * relu6(x + 3) / 6 divides every element of MobileNetV3's convs by 6; a vector division
    takes 10-16 cycles on Intel's cores. x / c is x times 1 / c: within an ulp of the quotient wherever that
    is a normal float32, exact by a power of two; zeros, inf and NaN as the division gives them."""
    import tvm
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.divide(x, relax.const(divisor, "float32"))), BIT_PATTERNS)
    script, run = scheduled_kernel(module, "divide", schedule=True, layout="auto")
    assert " / " not in script
    x = np.random.default_rng(15).integers(0, 2**32, BIT_PATTERNS, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[0, :8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.0e38, 6.0, -7.0]
    got = run(tvm.runtime.tensor(x)).numpy()
    with np.errstate(all="ignore"):
        want = x / np.float32(divisor)
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
    apart = np.abs(got[normal].view(np.int32).astype(np.int64) - want[normal].view(np.int32).astype(np.int64))
    assert apart.max() == ulps
    special = np.isinf(want) | (want == 0)
    assert np.array_equal(got[special].view(np.uint32), want[special].view(np.uint32))
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("divisor", [1e-39, 3e38])
def test_a_division_by_a_constant_whose_reciprocal_is_not_a_normal_float_stays_a_division(divisor):
    """1 / 1e-39 overflows and 1 / 3e38 is subnormal: a product by either is not the quotient."""
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.divide(x, relax.const(divisor, "float32"))), SHAPE)
    script, _ = scheduled_kernel(module, "divide", schedule=True, layout="auto")
    assert " / T.float32(" in script
