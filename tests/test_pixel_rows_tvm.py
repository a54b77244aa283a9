"""A 1x1 int8 conv on a map of 19 columns, computed on rows of 95 (compiler/passes/pixel_rows.py): column lanes,
its epilogue fused, nothing copied, and the same numbers as the conv on the map as it is."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.int8_convs import AVX2_CPU, PLAIN_CPU, VNNI_CPU, build, host_has_avx2, host_has_vnni

SHAPE = (1, 32, 10, 19)  # 190 pixels: rows of 19 round to 32 (VNNI) or 24 (AVX2) columns; 2 rows of 95 to 96


def requantising_conv(*, along_rows: bool):
    """uint8 x -> 1x1 conv -> rescale and bias per channel -> hard-swish -> int8 -> 3x3 max pool, as a
    quantized model's layer, written as TVM's ONNX importer writes it (constants bound to variables, the
    Clip of opset 11 and later as kernels of its own); `along_rows` adds, before the quantize, a constant
    that varies along the rows."""
    from tvm import relax, topi

    rng = np.random.default_rng(7)
    channels = 48
    weight = rng.integers(-128, 128, (channels, SHAPE[1], 1, 1)).astype("int8")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=SHAPE, dtype="uint8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(weight), out_dtype="int32"))
            f = bb.emit(relax.op.astype(y, "float32"))
            f = bb.emit(
                relax.op.multiply(f, relax.const(rng.uniform(1e-4, 1e-3, (1, channels, 1, 1)).astype("float32")))
            )
            bias = bb.emit(relax.const(rng.uniform(-1, 1, (channels, 1, 1)).astype("float32")))
            f = bb.emit(relax.op.add(f, bias))
            low, high = bb.emit(relax.const(np.float32(0))), bb.emit(relax.const(np.float32(6)))
            shifted = bb.emit(relax.op.add(f, relax.const(np.array([3], "float32"))))
            clipped = bb.emit_te(topi.minimum, bb.emit_te(topi.maximum, shifted, low), high)
            f = bb.emit(relax.op.multiply(f, clipped))
            if along_rows:
                f = bb.emit(relax.op.add(f, relax.const(rng.uniform(-1, 1, (1, 1, 1, SHAPE[3])).astype("float32"))))
            q = bb.emit(
                relax.op.quantize(f, relax.const(np.float32(0.05)), relax.const(np.int8(0)), axis=1, out_dtype="int8")
            )
            out = bb.emit_output(relax.op.nn.max_pool2d(q, pool_size=(3, 3), padding=(1, 1, 1, 1)))
        bb.emit_func_output(out)
    return bb.get()


def run(executable, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def conv_kernel(phases) -> tuple[str, str]:
    """(name, script) of the one fused kernel that holds the packed conv."""
    (found,) = [
        (gv.name_hint, f.script())
        for gv, f in phases.fused.functions.items()
        if hasattr(f, "params") and "_conv" in f.script() and "sblock" in f.script()
    ]
    return found


def host_targets() -> list[dict]:
    return [t for t, present in ((VNNI_CPU, host_has_vnni()), (AVX2_CPU, host_has_avx2())) if present]


@pytest.mark.parametrize("target", [VNNI_CPU, AVX2_CPU], ids=["vnni", "avx2"])
def test_the_conv_and_its_epilogue_run_on_rows_of_whole_vectors_and_copy_nothing(target):
    from modelbuild.compiler.kernels import avx2_conv, vnni_conv

    instruction = vnni_conv.VNNI if target is VNNI_CPU else avx2_conv.AVX2
    _, phases = build(requantising_conv(along_rows=False), target)
    name, script = conv_kernel(phases)
    assert f'sblock("{instruction.column_block}_update' in script  # column lanes, not the gathering ones
    assert "T.int64(95)" in script and "T.int64(19)" not in script
    assert all(op in name for op in ("multiply", "add", "maximum", "minimum", "quantize"))  # the epilogue too
    main = phases.planned["main"].script()
    assert "R.reshape(" in main and "reshape(" not in main.replace("R.reshape(", "")  # views, no copy kernel


def test_the_rows_give_the_numbers_of_the_map_as_it_is():
    """Against the plain x86 build, which has no packed conv and computes the map as it is; a constant that
    varies along the rows stops the cut before it."""
    if not host_targets():
        pytest.skip("this CPU has neither AVX-512 VNNI nor AVX2: the libraries are compiled and inspected, not run")
    x = np.random.default_rng(8).integers(0, 256, SHAPE).astype("uint8")
    for along_rows in (False, True):
        module = requantising_conv(along_rows=along_rows)
        want = run(build(module, PLAIN_CPU)[0], x)
        assert np.abs(want.astype(int)).max() > 10  # not a saturated or empty output
        for target in host_targets():
            executable, phases = build(module, target)
            name, _ = conv_kernel(phases)
            assert ("quantize" in name) != along_rows
            assert np.array_equal(run(executable, x), want), (target, along_rows)
