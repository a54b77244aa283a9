"""The report model's pure parts: comparing a quantized build with its float twin."""

from modelbuild.reports.model import compare_with_float


def build(name, median):
    return {"name": name, "latency_ms": {"median": median} if median else None}


def test_a_quantized_build_is_compared_with_the_float_build_of_the_same_model_and_target():
    builds = [build("cls@x86", 2.0), build("cls+int8@x86", 0.5), build("cls+int8@pi", None), build("det+int8@x86", 1.0)]
    compare_with_float(builds)
    assert builds[1]["vs_float"] == {"build": "cls@x86", "latency_ms": 2.0, "latency_ratio": 0.25}
    assert builds[0]["vs_float"] is None  # a float build has nothing to compare with
    assert builds[2]["vs_float"] is None  # not timed (a cross target)
    assert builds[3]["vs_float"] is None  # no float build of det in the recipe
