"""ONNX TopK: the k best of each row kept in a heap while the row is read once, then the heap sorted.

TVM 0.27 dispatches topk to its C++ runtime's sort: every row copied into pairs and all of it sorted, for a
k of 100 out of YOLO's 25200 anchors as for a k of 25200 (47 us, 1.6x onnxruntime). Here each row is read
once against the worst of the k kept so far (a compare and a branch that is almost never taken once the heap
holds good values), and only an element better than it enters the heap: about k log(n / k) of them on
scores in no particular order, n in the worst case (a row already in increasing order: 0.80 ms for 25200,
onnxruntime's heap 0.71 ms). The heap lives in the outputs, so the kernel needs no scratch array. A
contiguous row is read 16 elements at a time, and a vector none of whose elements beats the heap's worst
costs one vector comparison: 100 of 25200 anchors 47 -> 23 us (0.79x onnxruntime), 1 of them 23 -> 3 us.

Order is ONNX's: best first; equal values by lower index first. A later element enters only when strictly
better than the heap's worst, which keeps the lower of two equal indices. A row holding NaNs is not
ordered as onnxruntime orders it (a comparison with a NaN is false here).
"""

from __future__ import annotations

import math

from modelbuild.compiler.kernels import statements
from modelbuild.compiler.relax_rewrite import known_shape, module_pass

PARALLEL_MIN_ELEMENTS = 1 << 14  # rows shorter than this together run on one core
LANES = 16  # elements one comparison clears while the heap is full of better ones (a float32 vector of AVX-512)
RET_TYPES = ("both",)  # what ONNX's converter asks for; "values" or "indices" alone stay with TVM's sort


def transform():
    """`rewrite` as a module pass: TopK on its last axis as this kernel, before the library dispatch."""
    return module_pass(rewrite, "TopKAsKernel")


def rewrite(module):
    """Each eligible relax.topk in the module as this kernel's call_tir, before TVM's sort dispatch sees it."""
    from modelbuild.compiler.relax_rewrite import rewrite_calls

    def rule(mutator, call):
        if getattr(call.op, "name", None) != "relax.topk" or not eligible(call):
            return call
        attrs = call.attrs
        return mutator.builder_.call_te(
            top_k,
            call.args[0],
            int(attrs.k),
            int(attrs.axis),
            bool(attrs.largest),
            str(attrs.dtype),
            primfunc_name_hint="top_k",
        )

    return rewrite_calls(module, rule)


def eligible(call) -> bool:
    """Static shapes, 1 <= k <= the axis's length, both outputs, a numeric element type."""
    shape = known_shape(call.args[0])
    if shape is None:
        return False
    attrs = call.attrs
    k = int(attrs.k)
    return (
        bool(shape)
        and 1 <= k <= shape[int(attrs.axis)]
        and str(attrs.ret_type) in RET_TYPES
        and str(call.args[0].ty.dtype) in ("float32", "float16", "int32", "int64", "uint8", "int8")
    )


def top_k(data, k: int, axis: int, largest: bool, index_dtype: str):
    """The TE extern: data -> (values, indices), `k` along `axis`."""
    from tvm import te, tirx

    shape = [int(d) for d in data.shape]
    axis = axis % len(shape)
    out_shape = shape[:axis] + [k] + shape[axis + 1 :]
    values = tirx.decl_buffer(out_shape, data.dtype, "values")
    indices = tirx.decl_buffer(out_shape, index_dtype, "indices")
    layout = _Rows(outer=math.prod(shape[:axis]), length=shape[axis], inner=math.prod(shape[axis + 1 :]), k=k)
    return te.extern(
        [out_shape, out_shape],
        [data],
        lambda ins, outs: _body(ins[0], outs[0], outs[1], layout, largest),
        out_buffers=[values, indices],
        name="top_k",
    )


class _Rows:
    """Where row r of the input (its `length` elements `inner` apart) and of the outputs (k of them) start."""

    def __init__(self, *, outer: int, length: int, inner: int, k: int):
        self.outer, self.length, self.inner, self.k = outer, length, inner, k

    @property
    def count(self) -> int:
        return self.outer * self.inner

    def source(self, r):
        return (r // self.inner) * self.length * self.inner + r % self.inner

    def target(self, r):
        return (r // self.inner) * self.k * self.inner + r % self.inner


def _body(data, values, indices, rows: _Rows, largest: bool):
    def write(T):
        source = statements.flat(T, data)
        kept = (statements.flat(T, values), str(values.dtype)), (statements.flat(T, indices), str(indices.dtype))
        parallel = rows.count > 1 and rows.count * rows.length >= PARALLEL_MIN_ELEMENTS
        with (T.parallel if parallel else T.serial)(0, rows.count) as r:
            heap = _Heap(T, *kept, rows.target(r), rows.inner, largest)
            start = rows.source(r)
            with T.serial(0, rows.k) as t:
                heap.set(t, source[start + t * rows.inner], t)
            with T.serial(0, rows.k // 2) as p:
                heap.sift_down(rows.k // 2 - 1 - p, rows.k, *heap.held(rows.k // 2 - 1 - p))
            worst = statements.scalar(T, data.dtype)
            worst[0] = heap.value(0)
            _scan(T, source, start, rows, heap, worst, largest)
            with T.serial(0, rows.k - 1) as s:  # heapsort: the worst left goes last, the best ends first
                last = rows.k - 1 - s
                value, index = heap.held(last)
                heap.set(last, heap.value(0), heap.index(0))
                heap.sift_down(0, last, value, index)

    return statements.written(write)


def _scan(T, source, start, rows: _Rows, heap, worst, largest: bool) -> None:
    """Offers the heap every element of the row after its first k. A contiguous row is read a vector at a
    time, and a vector none of whose elements beats the heap's worst (nearly all, once the heap holds good
    values) costs one vector comparison."""
    from tvm import tirx

    def offer(j):
        x = source[start + j * rows.inner]
        with T.If(x > worst[0] if largest else x < worst[0]):
            with T.Then():
                heap.sift_down(0, rows.k, x, j)
                worst[0] = heap.value(0)

    vectors = (rows.length - rows.k) // LANES if rows.inner == 1 else 0
    if vectors:
        with T.serial(0, vectors) as v:
            first = rows.k + v * LANES
            lanes, bound = source[tirx.Ramp(start + first, 1, LANES)], tirx.Broadcast(worst[0], LANES)
            beats = lanes > bound if largest else lanes < bound
            with T.If(tirx.call_llvm_pure_intrin("bool", "llvm.vector.reduce.or", beats)):
                with T.Then():
                    with T.serial(0, LANES) as lane:
                        offer(first + lane)
    with T.serial(rows.k + vectors * LANES, rows.length) as j:
        offer(j)


class _Heap:
    """A binary heap over one row of the outputs whose root is the worst element kept."""

    def __init__(self, T, values, indices, start, stride: int, largest: bool):
        """values, indices: (the flat output, its element type). The heap's scalars are declared here, once a
        row: declared in a parallel loop's inner loops, each would be allocated per element offered."""
        self.T, self.start, self.stride, self.largest = T, start, stride, largest
        (self.values, self.value_dtype), (self.indices, self.index_dtype) = values, indices
        self.at, self.child = statements.scalar(T, "int64"), statements.scalar(T, "int64")
        self.moving = statements.scalar(T, "bool")
        self.held_value = statements.scalar(T, self.value_dtype)
        self.held_index = statements.scalar(T, self.index_dtype)

    def _at(self, position):
        return self.start + position * self.stride

    def value(self, position):
        return self.values[self._at(position)]

    def index(self, position):
        return self.indices[self._at(position)]

    def set(self, position, value, index) -> None:
        from tvm import tirx

        self.values[self._at(position)] = value
        self.indices[self._at(position)] = tirx.Cast(self.index_dtype, index)

    def held(self, position):
        """The element at `position` read into the heap's held registers: (value, index)."""
        self.held_value[0], self.held_index[0] = self.value(position), self.index(position)
        return self.held_value[0], self.held_index[0]

    def worse(self, value, index, than_value, than_index):
        """Whether (value, index) is a worse element than the other: a worse value, or an equal one found later."""
        from tvm import tirx

        worse_value = value < than_value if self.largest else value > than_value
        return tirx.Or(worse_value, tirx.And(value == than_value, index > than_index))

    def sift_down(self, start, size, value, index) -> None:
        """Places (value, index) at `start` of a heap of `size`, moving worse children up until both of its
        children are better. The worse child is chosen without a branch: which one is worse is a coin toss a
        branch predictor loses half the time."""
        from tvm import tirx

        T, at, child, moving = self.T, self.at, self.child, self.moving
        held_value, held_index = self.held_value, self.held_index
        held_value[0], held_index[0] = value, tirx.Cast(self.index_dtype, index)
        at[0], moving[0] = tirx.Cast("int64", start), True
        with T.While(tirx.And(moving[0], at[0] * 2 + 1 < size)):  # no break: TVM's LLVM codegen has none
            left = at[0] * 2 + 1
            right_worse = tirx.if_then_else(
                left + 1 < size,
                self.worse(self.value(left + 1), self.index(left + 1), self.value(left), self.index(left)),
                False,
            )
            child[0] = left + tirx.Cast("int64", right_worse)
            with T.If(self.worse(self.value(child[0]), self.index(child[0]), held_value[0], held_index[0])):
                with T.Then():
                    self.set(at[0], self.value(child[0]), self.index(child[0]))
                    at[0] = child[0]
                with T.Else():
                    moving[0] = False
        self.set(at[0], held_value[0], held_index[0])
