"""Fusion and memory figures from IR facts: pure, with answers computed by hand."""

from modelbuild.compiler.analysis import (
    KernelCall,
    Step,
    fusion_summary,
    heaviest_kernels,
    lifetimes,
    memory_summary,
    peak_live_bytes,
    roofline,
)

S = 4096  # bytes of one tensor


def test_a_fused_chain_of_n_elementwise_ops_cuts_traffic_n_fold():
    for n in (1, 2, 5):
        before = [KernelCall(f"op{i}", (f"op{i}",), S, S) for i in range(n)]
        after = [KernelCall("fused", tuple(f"op{i}" for i in range(n)), S, S)]
        figures = fusion_summary(before, after)
        assert figures["traffic_bytes_before"] == 2 * n * S and figures["traffic_bytes_after"] == 2 * S
        assert figures["traffic_ratio"] == n
        assert (figures["operators"], figures["kernels"]) == (n, 1)


def test_groups_list_only_kernels_that_merged_ops_count_their_calls_and_name_every_layer_they_compute():
    ops = ("conv2d", "add", "relu")
    after = [
        KernelCall("fused_conv_add_relu", ops, 3 * S, S, ("stage1_conv", "stage1_relu")),
        KernelCall("fused_conv_add_relu", ops, 3 * S, S, ("stage2_conv", "stage2_relu")),
        KernelCall("softmax", ("softmax",), S, S, ("head_softmax",)),
    ]
    groups = fusion_summary(after, after)["groups"]
    assert groups == [
        {
            "kernel": "fused_conv_add_relu",
            "ops": list(ops),
            "calls": 2,
            "layers": ["stage1_conv", "stage1_relu", "stage2_conv", "stage2_relu"],
        }
    ]


def diamond_steps():
    """a = f(x); b = g(a); c = h(a); d = b + c; out = k(d): allocation, call and alias steps."""
    return [
        Step(allocates={"a": S}),
        Step(uses=("x", "a")),
        Step(uses=("a",), alias={"lv": "a"}),
        Step(allocates={"b": S}),
        Step(uses=("lv", "b")),
        Step(uses=("b",), alias={"lv1": "b"}),
        Step(allocates={"c": S}),
        Step(uses=("lv", "c")),
        Step(uses=("c",), alias={"lv2": "c"}),
        Step(allocates={"d": S}),
        Step(uses=("lv1", "lv2", "d")),
        Step(uses=("d",), alias={"lv3": "d"}),
        Step(allocates={"out": S}),
        Step(uses=("lv3", "out")),
        Step(uses=("out",), alias={"gv": "out"}),
    ]


def test_diamond_lifetimes_and_lower_bound_by_hand():
    spans = lifetimes(diamond_steps(), outputs={"gv"})
    assert spans == {"a": (0, 7, S), "b": (3, 10, S), "c": (6, 10, S), "d": (9, 13, S)}
    assert peak_live_bytes(spans) == 3 * S  # a, b, c at step 7; b, c, d at step 10


def test_memory_summary_compares_planned_with_naive_and_the_bound():
    figures = memory_summary(diamond_steps(), {"gv"}, planned_bytes=3 * S)
    assert figures["naive_bytes"] == 4 * S and figures["lower_bound_bytes"] == 3 * S
    assert figures["planned_over_naive"] == 0.75 and figures["planned_over_bound"] == 1.0
    assert figures["intermediates"] == 4


def test_a_chain_needs_only_two_buffers_alive_at_once():
    steps = []
    previous = "x"
    for i in range(5):
        steps += [Step(allocates={f"t{i}": S}), Step(uses=(previous, f"t{i}"))]
        previous = f"t{i}"
    spans = lifetimes(steps, outputs={"t4"})
    assert peak_live_bytes(spans) == 2 * S and sum(s for *_, s in spans.values()) == 4 * S


def test_no_intermediates_means_nothing_to_plan():
    figures = memory_summary([Step(allocates={"out": S}), Step(uses=("x", "out"))], {"out"}, 0)
    assert figures["naive_bytes"] == 0 and figures["lower_bound_bytes"] == 0 and figures["planned_over_naive"] == 1.0


def test_heaviest_kernels_rank_by_total_flops_over_their_calls():
    calls = [
        KernelCall("a", ("conv2d",), 100, 100),
        KernelCall("a", ("conv2d",), 100, 100),
        KernelCall("b", ("dense",), 50, 50),
        KernelCall("c", ("relu",), 10, 10),
    ]
    kernels = heaviest_kernels(
        calls, {"a": 1000, "b": 1500, "c": 0}, {"a": [[[1], "float32"]], "b": [[[1], "float32"]]}
    )
    assert [(k["kernel"], k["calls"]) for k in kernels] == [("a", 2), ("b", 1)]  # 2000 > 1500; c does no flops
    assert kernels[0]["bytes"] == 200


def test_roofline_classifies_by_arithmetic_intensity_against_the_ridge():
    kernels = [
        {"kernel": "dense", "ops": ["dense"], "calls": 1, "flops": 8000, "bytes": 100},
        {"kernel": "add", "ops": ["add"], "calls": 1, "flops": 100, "bytes": 1200},
    ]
    result = roofline(kernels, {"dense": 1e-6, "add": 1e-6}, peak_flops=1e10, peak_bytes=1e9)
    assert result["ridge_flops_per_byte"] == 10
    dense, add = result["kernels"]
    assert dense["bound"] == "compute" and dense["flops_per_s"] == 8e9 and dense["roof_fraction"] == 0.8
    assert add["bound"] == "memory" and add["bytes_per_s"] == 1.2e9
    assert add["roof_fraction"] == (100 / 1e-6) / (100 / 1200 * 1e9)


def test_a_kernel_under_30_percent_of_its_roof_is_marked_slow_with_its_shapes():
    kernels = [
        {"kernel": "fast", "ops": ["conv2d"], "calls": 1, "flops": 8000, "bytes": 100, "args": [[[1, 8], "float32"]]},
        {"kernel": "slow", "ops": ["conv2d"], "calls": 1, "flops": 2900, "bytes": 100, "args": [[[1, 4], "float32"]]},
        {"kernel": "edge", "ops": ["conv2d"], "calls": 1, "flops": 3000, "bytes": 100, "args": []},
    ]
    result = roofline(kernels, {"fast": 1e-6, "slow": 1e-6, "edge": 1e-6}, peak_flops=1e10, peak_bytes=1e9)
    assert result["slow_below"] == 0.3
    assert [k["slow"] for k in result["kernels"]] == [False, True, False]  # 80%, 29%, 30% of the compute roof
    assert result["kernels"][1]["shapes"] == [[1, 4]]


def test_an_alias_cycle_ends_the_walk_instead_of_hanging():
    """Names repeat in an imported model (a binding renamed after its ONNX node, as its input was); the
    lowering names variables uniquely, and the walk itself stops on a cycle rather than loop forever."""
    steps = [
        Step(allocates={"a": 8}),
        Step(uses=("a",), alias={"a": "a"}),
        Step(uses=("a",), alias={"b": "c"}),
        Step(uses=("b",), alias={"c": "b"}),
        Step(allocates={"d": 4}),
        Step(uses=("a", "b", "d")),
    ]
    assert lifetimes(steps, outputs=set()) == {"a": (0, 5, 8), "d": (4, 5, 4)}
