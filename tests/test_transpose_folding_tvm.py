"""Transposes that cancel through a reshape become the reshape: the same numbers, no transpose left."""

from __future__ import annotations

import numpy as np


def module(body, shapes: list[list[int]]):
    """main(x0, x1, ...) returning body(bb, *xs)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, shape in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *xs))
        bb.emit_func_output(out)
    return bb.get()


def run(mod, arrays):
    import tvm
    from tvm import relax

    executable = tvm.compile(mod, target=tvm.target.Target("llvm"))
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return got.numpy() if hasattr(got, "numpy") else [t.numpy() for t in got]


def _outputs(result) -> list:
    return result if isinstance(result, list) else [result]


def transposes(mod) -> int:
    return mod.script().count("R.permute_dims")


def folded_and_checked(mod, shapes):
    from modelbuild.compiler.passes import transpose_folding

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    folded = transpose_folding.fold(mod)
    for got, expected in zip(_outputs(run(folded, arrays)), _outputs(run(mod, arrays)), strict=True):
        np.testing.assert_array_equal(got, expected)
    return folded


def test_a_patch_embeddings_flatten_and_transpose_back_to_channels_last_is_a_reshape():
    """ViT: conv(x).flatten(2).transpose(1, 2) on a channels-last conv's output."""
    from tvm import relax

    def body(bb, x):  # x: the conv's NHWC output
        nchw = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
        tokens = bb.emit(relax.op.reshape(nchw, [1, 16, 64]))
        return relax.op.permute_dims(tokens, [0, 2, 1])

    shapes = [[1, 8, 8, 16]]
    mod = module(body, shapes)
    assert transposes(mod) == 2
    assert transposes(folded_and_checked(mod, shapes)) == 0


def test_yolov10s_scores_concatenated_over_levels_then_a_sigmoid_are_read_where_the_convs_wrote_them():
    """Each level's NHWC scores to [1, 80, H*W], concatenated on the anchors, a sigmoid, then [1, A, 80]."""
    from tvm import relax

    def body(bb, *levels):
        flat = []
        for x in levels:
            size = int(x.ty.shape[1]) * int(x.ty.shape[2])
            flat.append(bb.emit(relax.op.reshape(bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2])), [1, 80, size])))
        scores = bb.emit(relax.op.sigmoid(bb.emit(relax.op.concat(flat, axis=2))))
        return relax.op.permute_dims(scores, [0, 2, 1])

    shapes = [[1, 8, 8, 80], [1, 4, 4, 80], [1, 2, 2, 80]]
    mod = module(body, shapes)
    folded = folded_and_checked(mod, shapes)
    assert transposes(folded) == 0 and "axis=1" in folded.script()


def test_a_chain_that_moves_elements_keeps_its_transposes():
    """YOLOv5's head: [1, 3 * 85, H, W] to [1, 3, H, W, 85] takes each anchor's 85 channels out of the
    pixel's 255: not a reshape of the channels-last map."""
    from tvm import relax

    def body(bb, x):
        nchw = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
        return relax.op.permute_dims(bb.emit(relax.op.reshape(nchw, [1, 3, 85, 4, 4])), [0, 1, 3, 4, 2])

    shapes = [[1, 4, 4, 255]]
    mod = module(body, shapes)
    assert transposes(folded_and_checked(mod, shapes)) == 2


def test_a_value_read_twice_on_the_way_is_not_folded():
    from tvm import relax

    def body(bb, x):
        tokens = bb.emit(relax.op.reshape(bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2])), [1, 16, 64]))
        return relax.Tuple([relax.op.permute_dims(tokens, [0, 2, 1]), tokens])

    shapes = [[1, 8, 8, 16]]
    mod = module(body, shapes)
    assert transposes(folded_and_checked(mod, shapes)) == 2


def test_a_tensor_of_symbolic_shape_is_left_as_it_is():
    """A batch of any size: no index array to check the chain on."""
    from tvm import relax, tirx

    from modelbuild.compiler.passes import transpose_folding

    batch = tirx.Var("batch", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([batch, 8, 8, 16], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            tokens = bb.emit(relax.op.reshape(bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2])), [batch, 16, 64]))
            out = bb.emit_output(relax.op.permute_dims(tokens, [0, 2, 1]))
        bb.emit_func_output(out)
    mod = bb.get()
    assert transposes(transpose_folding.fold(mod)) == 2


def test_a_transpose_and_its_inverse_around_an_elementwise_op_fold_away():
    """Before -> Expected: the elementwise op runs on the untransposed tensor (the reshape left is to the
    same shape, which legalisation drops)."""
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R

    from modelbuild.compiler.passes import transpose_folding

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4, 5, 6), "float32")) -> R.Tensor((1, 4, 5, 6), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, [0, 2, 3, 1])
                b = R.nn.relu(a)
                c = R.permute_dims(b, [0, 3, 1, 2])
                R.output(c)
            return c

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 5, 6), "float32")) -> R.Tensor((1, 4, 5, 6), "float32"):
            with R.dataflow():
                same = R.reshape(x, R.shape([1, 4, 5, 6]))
                c = R.nn.relu(same)
                R.output(c)
            return c

    tvm.ir.assert_structural_equal(transpose_folding.transform()(Before), Expected)
