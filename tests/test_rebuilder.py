from modelbuild.rebuilder import changes, decide
from modelbuild.store import Store

BASE = {
    "stage": {"name": "import", "version": 1},
    "params": {"inputs": {"x": {"shape": [1, 3, 48, 192], "dtype": "float32"}}, "target": {"num-cores": 2}},
    "files": {"model": "aaa"},
    "upstream": {"ir": "111"},
    "tools": {"tvm": "0.27.0"},
}


def edited(**paths):
    import copy

    out = copy.deepcopy(BASE)
    for dotted, value in paths.items():
        *head, last = dotted.split("__")
        node = out
        for part in head:
            node = node[part]
        node[last] = value
    return out


def test_reasons_read_as_a_person_would_say_them():
    assert changes(BASE, edited(params__inputs__x__shape=[1, 3, 48, 320])) == [
        "input x shape changed [1,3,48,192] -> [1,3,48,320]"]
    assert changes(BASE, edited(files__model="bbb")) == ["model file changed"]
    assert changes(BASE, edited(tools__tvm="0.28.0")) == ["tvm 0.27.0 -> 0.28.0"]
    assert changes(BASE, edited(params__target__num_cores=4)) == ["target num_cores changed (none) -> 4"]
    assert changes(BASE, edited(upstream__ir="222")) == ["upstream ir output changed"]
    assert changes(BASE, edited(stage__version=2)) == ["stage implementation changed v1 -> v2"]
    assert changes(BASE, BASE) == []


def test_decide_without_history_says_never_built(tmp_path):
    decision = decide("import:a", "k", BASE, Store(tmp_path))
    assert decision.stale and decision.reasons == ["never built"]


def test_decide_compares_with_the_last_build(tmp_path):
    store = Store(tmp_path)
    store.remember("import:a", "old", BASE)
    decision = decide("import:a", "new", edited(files__model="bbb"), store)
    assert decision.reasons == ["model file changed"]
    assert decide("import:a", "old", BASE, store).reasons == ["cached output missing or damaged"]
