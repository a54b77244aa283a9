"""LSTM, GRU and RNN as operators TVM imports: an ONNX-level rewrite, run before import.

TVM 0.27's Relax ONNX frontend has no LSTM, GRU or RNN converter. Once its inputs are frozen, a recurrent
layer in an exported model has a static sequence length, so it is unrolled here: the input projection of
every step in one MatMul ([T, B, I] x [I, gates*H]), then per step one MatMul of the hidden state with every
gate's recurrent weights at once, gate slices, activations and the state update. Semantics are the ONNX
operator spec's (directions, initial states, sequence lengths, peepholes, clip, input_forget,
linear_before_reset, layout, the Sigmoid / Tanh / Relu activations), checked against onnxruntime over that
space by tests/test_recurrent.py.

Only operators whose form is the same in every opset since 10 are emitted (Reshape rather than
Squeeze / Unsqueeze, Max / Min rather than Clip, Slice with inputs), so the model's opset is kept. Weights
go through Gather and Transpose; TVM folds those on constants.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.errors import StageError
from modelbuild.frontend import node_rewrite

ACTIVATIONS = {"Sigmoid", "Tanh", "Relu"}
DEFAULTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def decompose(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every top-level LSTM, GRU and RNN unrolled; the model itself when it has none."""
    if not any(node.op_type in DEFAULTS for node in model.graph.node):
        return model
    shapes = _static_shapes(model)
    constants = {t.name: t for t in model.graph.initializer}

    def replacement(index, node):
        if node.op_type not in DEFAULTS:
            return None
        emit = _Emitter(f"{node.name or node.op_type}~{index}")
        UNROLL[node.op_type](emit, node, shapes, constants)
        return emit.nodes, emit.initializers

    return node_rewrite.replaced(model, replacement)


class _Emitter:
    """Appends nodes and constants under unique names derived from the recurrent node's."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.count = prefix, 0
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def _name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}/{hint}_{self.count}"

    def op(self, op_type: str, *inputs: str, output: str | None = None, **attributes) -> str:
        output = output or self._name(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=self._name(op_type), **attributes))
        return output

    def const(self, value, dtype=np.int64) -> str:
        name = self._name("const")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", x, self.const([start]), self.const([end]), self.const([axis]))

    def pick(self, x: str, index: int, axis: int = 0) -> str:
        """x's `index`-th entry along `axis`, that axis dropped."""
        return self.op("Gather", x, self.const(index), axis=axis)


def _static_shapes(model) -> dict[str, list[int]]:
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    shapes = {
        v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim] for v in values
    }
    shapes |= {t.name: list(t.dims) for t in model.graph.initializer}
    return shapes


class _Layer:
    """What both recurrent operators share: attributes, shapes, inputs, and the per-step bookkeeping."""

    def __init__(self, emit: _Emitter, node, shapes: dict, constants: dict) -> None:
        self.emit, self.node = emit, node
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.hidden = attrs.get("hidden_size")
        self.direction = attrs.get("direction", b"forward").decode()
        self.layout = attrs.get("layout", 0)
        self.clip = attrs.get("clip")
        self.directions = 2 if self.direction == "bidirectional" else 1
        per_direction = DEFAULTS[node.op_type]
        names = [a.decode() for a in attrs.get("activations", [])] or per_direction * self.directions
        unknown = sorted(set(names) - ACTIVATIONS)
        if unknown:
            self.fail(f"activation {unknown[0]} is not one modelbuild unrolls ({', '.join(sorted(ACTIVATIONS))})")
        self.activations = [
            names[d * len(per_direction) : (d + 1) * len(per_direction)] for d in range(self.directions)
        ]
        self.attrs = attrs
        x = node.input[0]
        shape = shapes.get(x)
        if not self.hidden or not shape or len(shape) != 3 or None in shape:
            self.fail(
                f"its input {x!r} needs a static [sequence, batch, features] shape (declare the model's "
                f"input shapes) and hidden_size must be set"
            )
        self.steps, self.batch = (shape[0], shape[1]) if self.layout == 0 else (shape[1], shape[0])
        self.inputs = list(node.input) + [""] * 8
        self.x = x if self.layout == 0 else emit.op("Transpose", x, perm=[1, 0, 2])  # [T, B, I]
        self.masks = self._masks(constants.get(self.inputs[4]))

    def fail(self, why: str):
        raise StageError(f"operator {self.node.op_type} (node {self.node.name!r}): {why}")

    def present(self, position: int) -> str | None:
        return self.inputs[position] or None

    def weights(self, position: int, d: int) -> str:
        """W or R of direction d, transposed for x @ W^T: [features, gates * H]."""
        return self.emit.op("Transpose", self.emit.pick(self.inputs[position], d), perm=[1, 0])

    def initial(self, position: int, d: int) -> str:
        """initial_h / initial_c of direction d as [B, H], zeros when absent."""
        given = self.present(position)
        if given is None:
            return self.emit.const(np.zeros((self.batch, self.hidden)), np.float32)
        return self.emit.pick(given, d, axis=0 if self.layout == 0 else 1)

    def _masks(self, constant) -> list[str] | None:
        """Per step, [B, 1] booleans: step t < sequence_lens[b]. None without sequence_lens, or when they are
        constants equal to the sequence length (every step of every sample runs)."""
        lens = self.present(4)
        if lens is None or (constant is not None and bool(np.all(numpy_helper.to_array(constant) == self.steps))):
            return None
        column = self.emit.op(
            "Reshape", self.emit.op("Cast", lens, to=onnx.TensorProto.INT64), self.emit.const([-1, 1])
        )
        return [self.emit.op("Less", self.emit.const([[t]]), column) for t in range(self.steps)]

    def activate(self, kind: str, x: str) -> str:
        if self.clip is not None:
            x = self.emit.op(
                "Min",
                self.emit.op("Max", x, self.emit.const(-self.clip, np.float32)),
                self.emit.const(self.clip, np.float32),
            )
        return self.emit.op(kind, x)

    def order(self, d: int) -> range:
        reverse = self.direction == "reverse" or d == 1
        return range(self.steps - 1, -1, -1) if reverse else range(self.steps)

    def keep(self, t: int, new: str, old: str) -> str:
        """The state after step t: the new one where the sample's sequence still runs, else the old one."""
        return new if self.masks is None else self.emit.op("Where", self.masks[t], new, old)

    def output(self, t: int, h: str) -> str:
        """Y's row for step t: the new hidden state, zero past the sample's sequence length."""
        if self.masks is None:
            return h
        return self.emit.op("Where", self.masks[t], h, self.emit.const(np.zeros((1, 1)), np.float32))

    def finish(self, ys: list[list[str]], states: list[list[str]]) -> None:
        """Y [T, D, B, H] (layout 1: [B, T, D, H]) and each final state [D, B, H] (layout 1: [B, D, H]),
        under the node's own output names; only the outputs the model uses."""
        emit, b, h = self.emit, self.batch, self.hidden
        outputs = list(self.node.output) + [""] * 3
        if outputs[0]:
            per_direction = [
                emit.op("Concat", *(emit.op("Reshape", y, emit.const([1, 1, b, h])) for y in rows), axis=0)
                for rows in ys
            ]
            stacked = emit.op("Concat", *per_direction, axis=1) if len(per_direction) > 1 else per_direction[0]
            if self.layout == 0:
                emit.op("Identity", stacked, output=outputs[0])
            else:
                emit.op("Transpose", stacked, perm=[2, 0, 1, 3], output=outputs[0])
        for position, finals in enumerate(states, start=1):
            if not outputs[position]:
                continue
            rows = [emit.op("Reshape", s, emit.const([1, b, h])) for s in finals]
            stacked = emit.op("Concat", *rows, axis=0) if len(rows) > 1 else rows[0]
            if self.layout == 0:
                emit.op("Identity", stacked, output=outputs[position])
            else:
                emit.op("Transpose", stacked, perm=[1, 0, 2], output=outputs[position])


def _lstm(emit: _Emitter, node, shapes: dict, constants: dict) -> None:
    """Gates i, o, f, c (ONNX's order): i = f(x Wi + h Ri + Pi . c + bi), f likewise, c' = g(x Wc + h Rc + bc),
    C = f . C + i . c' (input_forget: f = 1 - i), o = f(x Wo + h Ro + Po . C + bo), H = o . h(C)."""
    layer = _Layer(emit, node, shapes, constants)
    H = layer.hidden
    input_forget = layer.attrs.get("input_forget", 0)
    ys, hs, cs = [], [], []
    for d in range(layer.directions):
        f, g, h_act = layer.activations[d]
        projected = emit.op("MatMul", layer.x, layer.weights(1, d))  # [T, B, 4H]: every step's input at once
        if layer.present(3):
            bias = emit.pick(layer.inputs[3], d)
            projected = emit.op(
                "Add", projected, emit.op("Add", emit.slice(bias, 0, 4 * H, 0), emit.slice(bias, 4 * H, 8 * H, 0))
            )
        recurrent = layer.weights(2, d)
        peep = emit.pick(layer.inputs[7], d) if layer.present(7) else None
        h, c = layer.initial(5, d), layer.initial(6, d)
        rows = {}
        for t in layer.order(d):
            gates = emit.op("Add", emit.pick(projected, t), emit.op("MatMul", h, recurrent))
            gi, go, gf, gc = (emit.slice(gates, k * H, (k + 1) * H, 1) for k in range(4))
            if peep:
                gi = emit.op("Add", gi, emit.op("Mul", emit.slice(peep, 0, H, 0), c))
                gf = emit.op("Add", gf, emit.op("Mul", emit.slice(peep, 2 * H, 3 * H, 0), c))
            i = layer.activate(f, gi)
            forget = emit.op("Sub", emit.const(1.0, np.float32), i) if input_forget else layer.activate(f, gf)
            c_new = emit.op("Add", emit.op("Mul", forget, c), emit.op("Mul", i, layer.activate(g, gc)))
            if peep:
                go = emit.op("Add", go, emit.op("Mul", emit.slice(peep, H, 2 * H, 0), c_new))
            h_new = emit.op(
                "Mul", layer.activate(f, go), emit.op(h_act, c_new)
            )  # clip bounds gate inputs, not the cell (as onnxruntime)
            rows[t] = layer.output(t, h_new)
            h, c = layer.keep(t, h_new, h), layer.keep(t, c_new, c)
        ys.append([rows[t] for t in range(layer.steps)])
        hs.append(h)
        cs.append(c)
    layer.finish(ys, [hs, cs])


def _gru(emit: _Emitter, node, shapes: dict, constants: dict) -> None:
    """Gates z, r, h (ONNX's order): z = f(x Wz + h Rz + b), r likewise, h' = g(x Wh + (r . h) Rh + b) or,
    with linear_before_reset, g(x Wh + r . (h Rh + Rbh) + Wbh); H = (1 - z) . h' + z . h."""
    layer = _Layer(emit, node, shapes, constants)
    H = layer.hidden
    before_reset = layer.attrs.get("linear_before_reset", 0)
    ys, hs = [], []
    for d in range(layer.directions):
        f, g = layer.activations[d]
        projected = emit.op("MatMul", layer.x, layer.weights(1, d))  # [T, B, 3H]
        recurrent = layer.weights(2, d)  # [H, 3H]
        bias = emit.pick(layer.inputs[3], d) if layer.present(3) else None
        if bias:
            projected = emit.op("Add", projected, emit.slice(bias, 0, 3 * H, 0))
            recurrent_bias = emit.slice(bias, 3 * H, 6 * H, 0)
        if not before_reset:  # z and r take h's projection; h' takes (r . h)'s, a second MatMul per step
            recurrent_zr, recurrent_h = emit.slice(recurrent, 0, 2 * H, 1), emit.slice(recurrent, 2 * H, 3 * H, 1)
        h = layer.initial(5, d)
        rows = {}
        for t in layer.order(d):
            x_t = emit.pick(projected, t)
            xz, xr, xh = (emit.slice(x_t, k * H, (k + 1) * H, 1) for k in range(3))
            if before_reset:
                hr = emit.op("MatMul", h, recurrent)
                if bias:
                    hr = emit.op("Add", hr, recurrent_bias)
                hz, hr_, hh = (emit.slice(hr, k * H, (k + 1) * H, 1) for k in range(3))
                z, r = layer.activate(f, emit.op("Add", xz, hz)), layer.activate(f, emit.op("Add", xr, hr_))
                candidate = layer.activate(g, emit.op("Add", xh, emit.op("Mul", r, hh)))
            else:
                hzr = emit.op("MatMul", h, recurrent_zr)
                if bias:
                    hzr = emit.op("Add", hzr, emit.slice(recurrent_bias, 0, 2 * H, 0))
                z = layer.activate(f, emit.op("Add", xz, emit.slice(hzr, 0, H, 1)))
                r = layer.activate(f, emit.op("Add", xr, emit.slice(hzr, H, 2 * H, 1)))
                reset = emit.op("MatMul", emit.op("Mul", r, h), recurrent_h)
                if bias:
                    reset = emit.op("Add", reset, emit.slice(recurrent_bias, 2 * H, 3 * H, 0))
                candidate = layer.activate(g, emit.op("Add", xh, reset))
            # (1 - z) . h' + z . h, as h' + z . (h - h'): one operator fewer
            h_new = emit.op("Add", candidate, emit.op("Mul", z, emit.op("Sub", h, candidate)))
            rows[t] = layer.output(t, h_new)
            h = layer.keep(t, h_new, h)
        ys.append([rows[t] for t in range(layer.steps)])
        hs.append(h)
    layer.finish(ys, [hs])


def _rnn(emit: _Emitter, node, shapes: dict, constants: dict) -> None:
    """H = f(x W + h R + Wb + Rb)."""
    layer = _Layer(emit, node, shapes, constants)
    H = layer.hidden
    ys, hs = [], []
    for d in range(layer.directions):
        (f,) = layer.activations[d]
        projected = emit.op("MatMul", layer.x, layer.weights(1, d))  # [T, B, H]
        if layer.present(3):
            bias = emit.pick(layer.inputs[3], d)
            projected = emit.op(
                "Add", projected, emit.op("Add", emit.slice(bias, 0, H, 0), emit.slice(bias, H, 2 * H, 0))
            )
        recurrent = layer.weights(2, d)
        h = layer.initial(5, d)
        rows = {}
        for t in layer.order(d):
            h_new = layer.activate(f, emit.op("Add", emit.pick(projected, t), emit.op("MatMul", h, recurrent)))
            rows[t] = layer.output(t, h_new)
            h = layer.keep(t, h_new, h)
        ys.append([rows[t] for t in range(layer.steps)])
        hs.append(h)
    layer.finish(ys, [hs])


UNROLL = {"LSTM": _lstm, "GRU": _gru, "RNN": _rnn}
