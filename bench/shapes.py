"""A speed fuzzer: single operators of shapes drawn at random, each built untuned by modelbuild and timed
against onnxruntime, against this machine's measured FP32 peak.

A fixed list of models can be fitted; a fresh draw cannot. Each run draws (seed from the clock unless
--seed) --count single-operator ONNX models over the shapes real networks use: convs (kernel 1/3/5/7,
stride 1/2, dilation 1/2, dense, grouped or depthwise, channels 3 to 1024 with odd and prime ones, sides 7
to 224), transposed convs, Gemm and MatMul (M, N, K from 1 to 4096, batched, transposed), pooling, LRN,
BatchNorm left unfolded, element-wise chains, Softmax and LayerNorm over odd sizes. They build as one recipe
through modelbuild.build (a model that fails to build is a row, not a crash), then each library and
onnxruntime are timed in alternating blocks in this process, both on --threads threads.

The peak is measured in the same run: an FMA loop on every core (C, compiled here for this CPU's widest
vectors), checked against numpy's BLAS sgemm. With --int8, every conv and matmul is also built in int8
(minmax on random samples) and timed against its own fp32 build.

Per op it prints the ratio, GFLOP/s and the fraction of the peak; then the worst ten with their geometry,
and last the line `summary: median 0.85x, p90 1.21x, max 1.90x onnxruntime over 212 ops (seed N)`.
Results go to bench/results/shapes-<seed>.json.

Usage: python bench/shapes.py [--seed N] [--count 200] [--threads 2] [--seconds 0.3] [--int8] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
import zoo  # noqa: E402  (its alternating timer, cosine and target section)

MAX_FLOPS = 3e9  # an op's work is kept under this, so a draw of 200 times in minutes on 2 cores
MAX_BYTES = 48 * 2**20  # and its weights and activations under this
HEAVY_FLOPS = 0.5e9  # convs and matmuls from this size are judged against the peak
PRIMES = [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 127]


@dataclass
class Op:
    """One drawn operator: its ONNX model's pieces and what it computes."""

    name: str
    family: str  # conv, grouped-conv, depthwise-conv, conv-transpose, matmul, gemm, pool, lrn, ...
    geometry: str  # as a person reads it: "conv 3x3 s2 d1 g1 64->128 56x56"
    flops: float
    nodes: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)  # name -> shape (float32)
    initializers: dict = field(default_factory=dict)  # name -> array
    output_shape: list = field(default_factory=list)

    @property
    def quantizable(self) -> bool:
        return self.family in ("conv", "grouped-conv", "depthwise-conv", "matmul", "gemm")


# ------------------------------------------------------------------------------------------------ drawing
def log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def channels(rng: random.Random, low: int = 3, high: int = 1024, around: int | None = None) -> int:
    """Channels log-uniform (or within a factor of about two of `around`); one time in four an odd or prime
    count, as pruned and searched networks have."""
    value = log_uniform(rng, low, high) if around is None else round(around * 2 ** rng.uniform(-1, 1.2))
    value = min(high, max(low, value))
    roll = rng.random()
    if roll < 0.12:
        return min((p for p in PRIMES + [high] if p >= value), default=high) if value <= 127 else value | 1
    if roll < 0.25:
        return min(high, value | 1)
    return max(low, value - value % 8 if value > 16 else value)


def side(rng: random.Random, low: int = 7, high: int = 224, around: int | None = None) -> int:
    value = log_uniform(rng, low, high) if around is None else round(around * rng.uniform(0.6, 1.25))
    value = min(high, max(low, value))
    return value if rng.random() < 0.3 else max(low, value - value % 2)


def network_stage(rng: random.Random) -> tuple[int, int]:
    """(side, channels) around one stage of a convnet: 224 px at 16 channels down to 7 px at 512."""
    stage = rng.randint(0, 5)
    return side(rng, around=224 // 2**stage), 16 * 2 ** min(stage, 5)


def out_side(size: int, kernel: int, stride: int, dilation: int, pad: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def draw_conv(rng: random.Random, name: str) -> Op:
    kernel = rng.choices([1, 3, 5, 7], [0.35, 0.45, 0.1, 0.1])[0]
    stride = rng.choices([1, 2], [0.75, 0.25])[0]
    dilation = 2 if kernel > 1 and rng.random() < 0.15 else 1
    kind = rng.choices(["conv", "grouped-conv", "depthwise-conv"], [0.6, 0.15, 0.25])[0]
    if kind == "depthwise-conv":  # a depthwise conv always has taps: a 1x1 one is a per-channel scale
        kernel = rng.choices([3, 5, 7], [0.6, 0.25, 0.15])[0]
        dilation = 2 if rng.random() < 0.1 else 1
    height, around = network_stage(rng)
    width = height if rng.random() < 0.7 else side(rng, around=height)
    if kind == "depthwise-conv":
        cin = cout = groups = channels(rng, 8, 1024, around)
    elif kind == "grouped-conv":
        groups = rng.randint(2, 8)
        cin, cout = (groups * channels(rng, 3, 256, around // groups) for _ in range(2))
    elif rng.random() < 0.05:  # a stem: the image's three channels in
        groups, cin, cout = 1, 3, channels(rng, 8, 64)
    else:
        groups, cin, cout = 1, channels(rng, around=around), channels(rng, around=around)
    pad = dilation * (kernel // 2)

    def work(h: int, w: int) -> tuple[float, float]:
        oh, ow = out_side(h, kernel, stride, dilation, pad), out_side(w, kernel, stride, dilation, pad)
        flops = 2.0 * cout * oh * ow * (cin // groups) * kernel * kernel
        return flops, 4.0 * (cin * h * w + cout * oh * ow + cout * (cin // groups) * kernel * kernel)

    while max(work(height, width)[0] / MAX_FLOPS, work(height, width)[1] / MAX_BYTES) > 1 and height > 7:
        height, width = max(7, height * 3 // 4), max(7, width * 3 // 4)
    flops, size = work(height, width)
    if flops > MAX_FLOPS or size > MAX_BYTES:
        return draw_conv(rng, name)
    oh, ow = out_side(height, kernel, stride, dilation, pad), out_side(width, kernel, stride, dilation, pad)
    weight = np.random.default_rng(rng.getrandbits(32)).standard_normal((cout, cin // groups, kernel, kernel))
    attrs = dict(kernel_shape=[kernel, kernel], strides=[stride] * 2, dilations=[dilation] * 2, pads=[pad] * 4)
    relu = rng.random() < 0.5
    op = Op(
        name,
        kind,
        f"conv {kernel}x{kernel} s{stride} d{dilation} g{groups} {cin}->{cout} {height}x{width}"
        + (" +relu" if relu else ""),
        flops,
        inputs={"x": [1, cin, height, width]},
        initializers={"w": (weight * 0.1).astype(np.float32), "b": np.zeros(cout, np.float32)},
        output_shape=[1, cout, oh, ow],
    )
    op.nodes = [("Conv", ["x", "w", "b"], ["c" if relu else "y"], dict(attrs, group=groups))]
    if relu:
        op.nodes.append(("Relu", ["c"], ["y"], {}))
    return op


def draw_conv_transpose(rng: random.Random, name: str) -> Op:
    kernel, stride = rng.choice([(2, 2), (3, 2), (4, 2), (3, 1)])
    cin, cout, size = channels(rng, 8, 256), channels(rng, 8, 256), side(rng, 7, 64)
    pad = (kernel - stride + 1) // 2 if kernel > stride else 0
    out = (size - 1) * stride - 2 * pad + kernel
    flops = 2.0 * cin * cout * kernel * kernel * size * size
    if flops > MAX_FLOPS:
        return draw_conv_transpose(rng, name)
    weight = np.random.default_rng(rng.getrandbits(32)).standard_normal((cin, cout, kernel, kernel)) * 0.1
    op = Op(
        name,
        "conv-transpose",
        f"convtranspose {kernel}x{kernel} s{stride} p{pad} {cin}->{cout} {size}x{size}",
        flops,
        inputs={"x": [1, cin, size, size]},
        initializers={"w": weight.astype(np.float32)},
        output_shape=[1, cout, out, out],
    )
    attrs = dict(kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=[pad] * 4)
    op.nodes = [("ConvTranspose", ["x", "w"], ["y"], attrs)]
    return op


def draw_matmul(rng: random.Random, name: str) -> Op:
    m, n, k = (log_uniform(rng, 1, 4096) for _ in range(3))
    batch = rng.choice([1, 1, 1, 2, 4, 8, 12, 16])
    gemm = batch == 1 and rng.random() < 0.4
    weights_constant = gemm or rng.random() < 0.7  # a layer's weights; else two activations (attention)
    while 2.0 * batch * m * n * k > MAX_FLOPS or 4.0 * (batch * (m * k + m * n) + k * n * batch) > MAX_BYTES:
        m, n, k = max(1, m * 3 // 4), max(1, n * 3 // 4), max(1, k * 3 // 4)
    gen = np.random.default_rng(rng.getrandbits(32))
    flops = 2.0 * batch * m * n * k
    if gemm:
        trans_b = rng.random() < 0.6
        weight = gen.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) * 0.1
        op = Op(
            name,
            "gemm",
            f"gemm {m}x{k} @ {k}x{n}{' transB' if trans_b else ''}",
            flops,
            inputs={"x": [m, k]},
            initializers={"w": weight, "b": np.zeros(n, np.float32)},
            output_shape=[m, n],
        )
        op.nodes = [("Gemm", ["x", "w", "b"], ["y"], {"transB": int(trans_b)})]
        return op
    lead = [batch] if batch > 1 else []
    right = ([] if weights_constant else lead) + [k, n]
    op = Op(
        name,
        "matmul",
        f"matmul {'x'.join(map(str, lead + [m, k]))} @ {'x'.join(map(str, right))}",
        flops,
        inputs={"x": lead + [m, k]},
        output_shape=lead + [m, n],
    )
    if weights_constant:
        op.initializers = {"w": gen.standard_normal((k, n)).astype(np.float32) * 0.1}
    else:
        op.inputs["w"] = lead + [k, n]
    op.nodes = [("MatMul", ["x", "w"], ["y"], {})]
    return op


def draw_pool(rng: random.Random, name: str) -> Op:
    c, size = channels(rng, 8, 512), side(rng, 7, 112)
    kind = rng.choice(["MaxPool", "AveragePool", "GlobalAveragePool"])
    if kind == "GlobalAveragePool":
        op = Op(name, "pool", f"globalavgpool {c} {size}x{size}", c * size * size, {}, {"x": [1, c, size, size]})
        op.nodes, op.output_shape = [(kind, ["x"], ["y"], {})], [1, c, 1, 1]
        return op
    kernel, stride = rng.choice([(2, 2), (3, 2), (3, 1)])
    pad = 1 if kernel == 3 else 0
    out = out_side(size, kernel, stride, 1, pad)
    attrs = dict(kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=[pad] * 4)
    op = Op(name, "pool", f"{kind.lower()} {kernel}x{kernel} s{stride} {c} {size}x{size}", c * out * out * kernel**2)
    op.inputs, op.nodes, op.output_shape = {"x": [1, c, size, size]}, [(kind, ["x"], ["y"], attrs)], [1, c, out, out]
    return op


def draw_lrn(rng: random.Random, name: str) -> Op:
    c, size = channels(rng, 16, 256), side(rng, 7, 56)
    op = Op(name, "lrn", f"lrn size 5 {c} {size}x{size}", 10.0 * c * size * size, inputs={"x": [1, c, size, size]})
    op.nodes = [("LRN", ["x"], ["y"], dict(size=5, alpha=1e-4, beta=0.75, bias=1.0))]
    op.output_shape = [1, c, size, size]
    return op


def draw_batchnorm(rng: random.Random, name: str) -> Op:
    c, size = channels(rng, 3, 512), side(rng, 7, 112)
    gen = np.random.default_rng(rng.getrandbits(32))
    op = Op(name, "batchnorm", f"batchnorm {c} {size}x{size}", 2.0 * c * size * size, inputs={"x": [1, c, size, size]})
    op.initializers = {
        "scale": gen.uniform(0.5, 1.5, c).astype(np.float32),
        "bias": gen.standard_normal(c).astype(np.float32),
        "mean": gen.standard_normal(c).astype(np.float32),
        "var": gen.uniform(0.5, 2.0, c).astype(np.float32),
    }
    op.nodes = [("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], {})]
    op.output_shape = [1, c, size, size]
    return op


def draw_elementwise(rng: random.Random, name: str) -> Op:
    c, size = channels(rng, 3, 512), side(rng, 7, 112)
    steps = rng.choices(["Add", "Mul", "Sigmoid", "Tanh", "Relu", "Clip", "Exp"], k=rng.randint(2, 5))
    op = Op(
        name, "elementwise", f"{'-'.join(s.lower() for s in steps)} {c} {size}x{size}", len(steps) * c * size * size
    )
    op.inputs, op.output_shape = {"x": [1, c, size, size]}, [1, c, size, size]
    op.initializers = {
        "k": np.full((1, c, 1, 1), 0.5, np.float32),
        "lo": np.array(-1, np.float32),
        "hi": np.array(1, np.float32),
    }
    current = "x"
    for i, step in enumerate(steps):
        out = "y" if i == len(steps) - 1 else f"t{i}"
        ins = {"Add": [current, "k"], "Mul": [current, "k"], "Clip": [current, "lo", "hi"]}.get(step, [current])
        op.nodes.append((step, ins, [out], {}))
        current = out
    return op


def draw_normalisation(rng: random.Random, name: str) -> Op:
    rows, width = log_uniform(rng, 1, 4096), log_uniform(rng, 7, 4096) | 1
    while rows * width * 4 > MAX_BYTES / 4:
        rows = max(1, rows // 2)
    if rng.random() < 0.5:
        op = Op(name, "softmax", f"softmax {rows}x{width}", 5.0 * rows * width, inputs={"x": [rows, width]})
        op.nodes = [("Softmax", ["x"], ["y"], {"axis": -1})]
    else:
        op = Op(name, "layernorm", f"layernorm {rows}x{width}", 8.0 * rows * width, inputs={"x": [rows, width]})
        op.initializers = {"g": np.ones(width, np.float32), "b": np.zeros(width, np.float32)}
        op.nodes = [("LayerNormalization", ["x", "g", "b"], ["y"], {"axis": -1})]
    op.output_shape = [rows, width]
    return op


FAMILIES = {  # the share of a draw each family takes: convs and matmuls are most of a network's time
    draw_conv: 0.45,
    draw_matmul: 0.2,
    draw_conv_transpose: 0.05,
    draw_pool: 0.06,
    draw_lrn: 0.03,
    draw_batchnorm: 0.05,
    draw_elementwise: 0.08,
    draw_normalisation: 0.08,
}


def draw(seed: int, count: int) -> list[Op]:
    rng = random.Random(seed)
    makers = rng.choices(list(FAMILIES), list(FAMILIES.values()), k=count)
    return [maker(rng, f"op{i:03d}") for i, maker in enumerate(makers)]


def save(op: Op, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node(kind, ins, outs, name=f"{kind}_{i}", **attrs)
        for i, (kind, ins, outs, attrs) in enumerate(op.nodes)
    ]
    graph = helper.make_graph(
        nodes,
        op.name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in op.inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, op.output_shape)],
        [numpy_helper.from_array(a, n) for n, a in op.initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


# ----------------------------------------------------------------------------------------------- building
def recipe_text(ops: list[Op], threads: int, int8: bool) -> str:
    lines = []
    for op in ops:
        lines += [f"[models.{op.name}]", f'path = "{op.name}.onnx"', ""]
    lines += zoo.target_section(threads)
    lines += ["[validation]", "enabled = false  # accuracy is checked here, against onnxruntime", ""]
    if int8:
        lines += ["[quantization.int8]", 'calibration = { method = "minmax", samples = 4 }', ""]
    for op in ops:
        lines += ["[[builds]]", f'model = "{op.name}"', 'targets = ["cpu"]', ""]
        if int8 and op.quantizable:
            lines += ["[[builds]]", f'model = "{op.name}"', 'targets = ["cpu"]', 'quantization = "int8"', ""]
    return "\n".join(lines)


def build(root: Path, ops: list[Op], threads: int, jobs: int, int8: bool, stage_timeout: float) -> dict[str, str]:
    """Build every op; the error of each build that failed, by build name ('op007@cpu', 'op007+int8@cpu').
    A stage that runs past `stage_timeout` stops the build: its op is a row that says so, and the rest build
    again (what was built is cached)."""
    failed: dict[str, str] = {}
    left = list(ops)
    while True:
        (root / "deploy.toml").write_text(recipe_text(left, threads, int8))
        watch = Watchdog(stage_timeout)
        failures, stalled = watch.build(root / "deploy.toml", jobs)
        failed |= failures
        if not stalled:
            return failed
        for node in stalled:
            build = node.partition(":")[2]
            failed[build] = f"TIMEOUT: {node.partition(':')[0]} ran past {stage_timeout:.0f} s"
        stuck = {node.partition(":")[2].partition("@")[0].partition("+")[0] for node in stalled}
        left = [op for op in left if op.name not in stuck]


class Watchdog:
    """A reporter that notes when each stage started, and interrupts the build (as Ctrl-C would, so its
    stages are stopped and nothing half-built is kept) once one has run longer than `timeout`."""

    def __init__(self, timeout: float):
        self.timeout, self.running, self.stalled = timeout, {}, []

    def __call__(self, event) -> None:
        from modelbuild.engine.events import NodeFinished, NodeStarted

        if isinstance(event, NodeStarted):
            self.running[event.node] = time.monotonic()
        elif isinstance(event, NodeFinished):
            self.running.pop(event.result.node, None)

    def build(self, recipe: Path, jobs: int) -> tuple[dict[str, str], list[str]]:
        """(the error of each build that failed, the stages stopped for running too long)."""
        import signal
        import threading

        import modelbuild
        from modelbuild.errors import BuildFailed, Interrupted

        done = threading.Event()

        def watch() -> None:
            while not done.wait(1.0):
                now = time.monotonic()
                late = [node for node, started in self.running.items() if now - started > self.timeout]
                if late:
                    self.stalled = late
                    os.kill(os.getpid(), signal.SIGINT)
                    return

        # Python's own handler, so the interrupt arrives even where SIGINT was ignored (a job started in the
        # background by a shell that is not interactive)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=watch, daemon=True).start()
        try:
            modelbuild.build(recipe, jobs=jobs, keep_going=True, reporter=self)
            return {}, []
        except BuildFailed as failed:
            return {f.build: f.error.splitlines()[0][:160] for f in failed.failures if f.build}, []
        except (Interrupted, KeyboardInterrupt):
            if not self.stalled:
                raise
            return {}, self.stalled
        finally:
            done.set()
            signal.signal(signal.SIGINT, previous)


# ----------------------------------------------------------------------------------------------- the peak
def fma_peak(threads: int) -> float:
    """GFLOP/s of independent FMA chains on `threads` cores, in this CPU's widest float vectors: the loop the
    validate stage's roofline takes as its compute roof (modelbuild.measurement.peak)."""
    from modelbuild.measurement import peak

    return peak.fma_flops(threads, seconds=0.2) / 1e9


def sgemm_rate() -> float:
    """GFLOP/s of numpy's BLAS on a 2048 float32 matmul, best of 5: the check on the FMA figure."""
    from modelbuild.measurement import peak

    return peak.sgemm_flops(2048) / 1e9


def vector_bits() -> int:
    from modelbuild.measurement import peak

    return 32 * peak.vector_lanes(peak.host_target(1))


# ------------------------------------------------------------------------------------------------- timing
def time_op(op: Op, folder: Path, library: Path, threads: int, seconds: float) -> dict:
    import onnxruntime as ort
    import tvm
    from tvm import relax

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(folder / f"{op.name}.onnx"), options, providers=["CPUExecutionProvider"])
    gen = np.random.default_rng(0)
    feed = {name: gen.standard_normal(shape).astype(np.float32) for name, shape in op.inputs.items()}
    main = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())["main"]
    tensors = [tvm.runtime.tensor(feed[name]) for name in op.inputs]
    ours = main(*tensors)
    cosine = zoo.cosine(np.asarray(ours.numpy()), session.run(None, feed)[0])
    medians = zoo.alternate({"ort": lambda: session.run(None, feed), "mb": lambda: main(*tensors)}, seconds, 0.05)
    return {"cosine": cosine, "ort_ms": medians["ort"] * 1e3, "mb_ms": medians["mb"] * 1e3}


def time_pair(fp32: Path, int8: Path, op: Op, seconds: float) -> float:
    """The int8 library's median time over its fp32 build's, in alternating blocks."""
    import tvm
    from tvm import relax

    gen = np.random.default_rng(0)
    tensors = [tvm.runtime.tensor(gen.standard_normal(s).astype(np.float32)) for s in op.inputs.values()]
    mains = {
        k: relax.VirtualMachine(tvm.runtime.load_module(str(p)), tvm.cpu())["main"]
        for k, p in (("fp32", fp32), ("int8", int8))
    }
    medians = zoo.alternate({k: (lambda f: lambda: f(*tensors))(f) for k, f in mains.items()}, seconds, 0.05)
    return medians["int8"] / medians["fp32"]


# ------------------------------------------------------------------------------------------------ summary
def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


@dataclass
class Row:
    op: str
    family: str
    geometry: str
    gflop: float
    status: str = "ok"
    ort_ms: float | None = None
    mb_ms: float | None = None
    ratio: float | None = None
    gflops: float | None = None
    peak_fraction: float | None = None
    cosine: float | None = None
    int8_ratio: float | None = None


def print_row(row: Row) -> None:
    if row.status != "ok":
        print(f"| {row.op} | {row.geometry} | {row.gflop:.3f} | {row.status} |||||", flush=True)
        return
    int8 = f" | int8/fp32 {row.int8_ratio:.2f}x" if row.int8_ratio is not None else ""
    print(
        f"| {row.op} | {row.geometry} | {row.gflop:.3f} | {row.ort_ms:.3f} | {row.mb_ms:.3f} | {row.ratio:.2f}x "
        f"| {row.gflops:.1f} | {row.peak_fraction:.0%} | {row.cosine:.6f}{int8} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="the draw (default: from the clock)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="stages built at once")
    parser.add_argument("--seconds", type=float, default=0.3, help="timing per op and runtime")
    parser.add_argument("--int8", action="store_true", help="also each conv and matmul in int8, against its fp32")
    parser.add_argument(
        "--stage-timeout", type=float, default=300.0, help="seconds a stage may run before its op is a TIMEOUT row"
    )
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000_000
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    ops = draw(seed, args.count)
    peak, blas = fma_peak(args.threads), sgemm_rate()
    print(
        f"seed {seed}: {len(ops)} ops; {args.threads} threads; FP32 peak {peak:.1f} GFLOP/s (FMA loop, "
        f"{vector_bits()}-bit vectors), numpy BLAS sgemm {blas:.1f} GFLOP/s ({blas / peak:.0%} of it)",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        for op in ops:
            save(op, root / f"{op.name}.onnx")
        started = time.perf_counter()
        failed = build(root, ops, args.threads, args.jobs, args.int8, args.stage_timeout)
        print(f"built in {time.perf_counter() - started:.0f} s, {len(failed)} builds failed\n", flush=True)
        print("| op | geometry | GFLOP | ORT ms | modelbuild ms | ratio | GFLOP/s | of peak | cosine |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        rows = []
        for op in ops:
            row = Row(op.name, op.family, op.geometry, op.flops / 1e9)
            library = root / "build" / op.name / "cpu" / "model.so"
            if f"{op.name}@cpu" in failed or not library.is_file():
                row.status = f"FAILED: {failed.get(f'{op.name}@cpu', 'no library')}"
            else:
                timed = time_op(op, root, library, args.threads, args.seconds)
                row.ort_ms, row.mb_ms, row.cosine = timed["ort_ms"], timed["mb_ms"], timed["cosine"]
                row.ratio = row.mb_ms / row.ort_ms
                row.gflops = op.flops / (row.mb_ms / 1e3) / 1e9
                row.peak_fraction = row.gflops / peak
                quantized = root / "build" / f"{op.name}+int8" / "cpu" / "model.so"
                if args.int8 and op.quantizable and quantized.is_file():
                    row.int8_ratio = time_pair(library, quantized, op, args.seconds)
            rows.append(row)
            print_row(row)
    peak = remeasured_peak(peak, rows, args.threads)
    summarise(rows, seed, peak, blas, args, REPO / "bench" / "results" / f"shapes-{seed}.json")


def host_machine() -> dict:
    from modelbuild.recipe.targets import host_machine

    return host_machine()


def remeasured_peak(peak: float, rows: list[Row], threads: int) -> float:
    """The peak measured again after the timings, the higher of the two kept and every row's share of it
    recomputed: another process on a core can only lower the loop's reading, and a core busy for the first
    seconds of a run would halve the peak and double every share of it (bench/results/README.md)."""
    return with_higher_peak(rows, peak, fma_peak(threads))


def with_higher_peak(rows: list[Row], peak: float, again: float) -> float:
    """The higher of two readings of the peak, every row's share of it recomputed where the second is higher."""
    if again <= peak:
        return peak
    print(f"FP32 peak measured again after the timings: {again:.1f} GFLOP/s (first {peak:.1f}); shares of it use it")
    for row in rows:
        if row.gflops is not None:
            row.peak_fraction = row.gflops / again
    return again


def summarise(rows: list[Row], seed: int, peak: float, blas: float, args, out: Path) -> None:
    timed = [r for r in rows if r.ratio is not None]
    print("\nworst ten (modelbuild's time over onnxruntime's):")
    for r in sorted(timed, key=lambda r: r.ratio, reverse=True)[:10]:
        print(f"  {r.ratio:5.2f}x  {r.op}  {r.geometry}  ({r.gflop:.3f} GFLOP, {r.peak_fraction:.0%} of peak)")
    heavy = [
        r.peak_fraction
        for r in timed
        if r.gflop >= HEAVY_FLOPS / 1e9 and r.family in ("conv", "grouped-conv", "depthwise-conv", "matmul", "gemm")
    ]
    if heavy:
        print(
            f"convs and matmuls of 0.5 GFLOP or more: median {statistics.median(heavy):.0%} of the measured peak "
            f"over {len(heavy)}"
        )
    failures = [r for r in rows if r.status != "ok"]
    if failures:
        print(f"{len(failures)} ops failed to build: {', '.join(r.op for r in failures)}")
    low = [r for r in timed if r.cosine is not None and r.cosine < 0.999]
    if low:
        print(f"{len(low)} ops disagree with onnxruntime (cosine < 0.999): {', '.join(r.op for r in low)}")
    int8 = [r for r in timed if r.int8_ratio is not None]
    if int8:
        every = [r.int8_ratio for r in int8]
        large = [r.int8_ratio for r in int8 if r.gflop >= 0.1]
        print(
            f"int8: median {statistics.median(every):.2f}x, p90 {nearest_rank(every, 90):.2f}x, "
            f"max {max(every):.2f}x of fp32 over {len(every)} convs and matmuls"
            + (f"; of 0.1 GFLOP or more: median {statistics.median(large):.2f}x over {len(large)}" if large else "")
        )
    ratios = [r.ratio for r in timed]
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    out.write_text(
        json.dumps(
            {
                "bench": "shapes",
                "seed": seed,
                "date": time.strftime("%Y-%m-%d"),
                "commit": commit,
                "machine": {
                    "cpu": host_machine().get("cpu", platform.machine()),
                    "threads": args.threads,
                    "fp32_peak_gflops": peak,
                    "blas_sgemm_gflops": blas,
                },
                "rows": [asdict(r) for r in rows],
            },
            indent=1,
        )
    )
    print(f"results: {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    median, p90, worst = statistics.median(ratios), nearest_rank(ratios, 90), max(ratios)
    over = f"onnxruntime over {len(ratios)} ops (seed {seed})"
    print(f"summary: median {median:.2f}x, p90 {p90:.2f}x, max {worst:.2f}x {over}")


if __name__ == "__main__":
    main()
