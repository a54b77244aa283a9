"""Which device runs each operator of a heterogeneous build: the cost model's decisions on graphs by hand."""

from __future__ import annotations

from modelbuild.gpu.placement import CONSTANT, CPU, GPU, INPUT, Costs, Operator, place

MB = 1 << 20


def conv(name, source, flops=2_000_000_000, size=4 * MB):
    return Operator(name, "relax.nn.conv2d", ((source, size), (CONSTANT + name, MB)), size, flops, True)


def test_heavy_work_goes_to_the_gpu_and_an_operator_it_lacks_to_the_cpu_with_its_reason():
    operators = [
        conv("c1", INPUT + "image"),
        conv("c2", "c1"),
        Operator("top", "relax.topk", (("c2", 4 * MB),), 800, 0, False, "no GPU schedule for relax.topk"),
        Operator("scaled", "relax.multiply", (("top", 800),), 800, 200, True),
    ]
    placement = place(operators)
    # the small multiply after the TopK stays with it: the GPU's launch and two copies cost more than it does
    assert placement.devices == (GPU, GPU, CPU, CPU)
    assert placement.reasons[2] == "no GPU schedule for relax.topk"
    assert placement.reasons[3].startswith("cheaper here (")
    # the image goes up, the last map comes down: each copy once
    assert placement.copies == ((INPUT + "image", GPU, 4 * MB), ("c2", CPU, 4 * MB))
    summary = placement.summary(operators)
    assert summary["operators"] == {GPU: 2, CPU: 2} and summary["bytes_copied"] == 8 * MB
    assert summary["by_op"][CPU] == {"relax.multiply": 1, "relax.topk": 1}
    assert summary["on_cpu"][0] == {"operator": "top", "op": "relax.topk", "why": "no GPU schedule for relax.topk"}


def test_a_small_operator_on_the_inputs_stays_on_the_cpu_and_a_value_crosses_once_for_all_its_users():
    tiny = Operator("scaled", "relax.multiply", ((INPUT + "x", 1024),), 1024, 256, True)
    assert place([tiny]).devices == (CPU,)
    shared = [conv("c1", INPUT + "x"), conv("c2", INPUT + "x")]
    placement = place(shared)
    assert placement.devices == (GPU, GPU) and placement.copies == ((INPUT + "x", GPU, 4 * MB),)


def test_a_cpu_as_fast_as_the_gpu_keeps_everything_with_its_weights_loaded_there_and_copies_nothing():
    equal = Costs(gpu_flops=1e12, gpu_bandwidth=100e9, gpu_launch=1e-6)
    placement = place([conv("c1", INPUT + "x"), conv("c2", "c1")], equal)
    assert placement.devices == (CPU, CPU) and placement.copies == ()
    assert placement.weights_on == CPU and placement.vm_devices == [CPU, GPU]
    gpu_heavy = place([conv("c1", INPUT + "x"), conv("c2", "c1")])
    assert gpu_heavy.weights_on == GPU and gpu_heavy.vm_devices == [GPU, CPU]


def test_a_chain_of_small_operators_is_not_split_step_by_step_and_the_estimates_say_why():
    small = [Operator("a0", "relax.add", ((INPUT + "x", 4096),), 4096, 1024, True)]
    for i in range(1, 40):
        kernel = i % 10 != 5  # every tenth has no GPU kernel: the greedy walk would cross each time
        small.append(Operator(f"a{i}", "relax.add", ((f"a{i - 1}", 4096),), 4096, 1024, kernel, "none"))
    placement = place(small)
    assert set(placement.estimates) == {"split", "gpu", "cpu"}
    assert placement.estimates["cpu"] == min(placement.estimates.values())
    assert set(placement.devices) == {CPU} and placement.copies == ()
    assert placement.reasons[0] == "the whole model is cheaper on the CPU"
    assert placement.summary(small)["estimated_ms"]["cpu"] < placement.summary(small)["estimated_ms"]["gpu"]


def test_heavy_operators_behind_one_without_a_gpu_kernel_still_go_to_the_gpu():
    first = Operator("ids", "relax.nonzero", ((INPUT + "x", 4 * MB),), 4 * MB, 0, False, "no GPU kernel")
    placement = place([first, conv("c1", "ids"), conv("c2", "c1")])
    assert placement.devices == (CPU, GPU, GPU)
    assert placement.estimates["split"] < placement.estimates["cpu"]
