from modelbuild.engine.rebuilder import changes, decide
from modelbuild.engine.store import Store

BASE = {
    "stage": {"name": "import", "source": "c0de"},
    "params": {"inputs": {"x": {"shape": [1, 3, 48, 192], "dtype": "float32"}}, "target": {"num-cores": 2}},
    "files": {"model": "aaa"},
    "upstream": {"ir": "111"},
    "tools": {"tvm": "0.27.0"},
}


def edited(**paths):
    import copy

    out = copy.deepcopy(BASE)
    for dotted, value in paths.items():  # a__b__c is the path a.b.c; a single _ inside a part stands for -
        *head, last = (
            part.replace("_", "-") if part.replace("_", "-") in _keys(out) else part for part in dotted.split("__")
        )
        node = out
        for part in head:
            node = node[part]
        node[last] = value
    return out


def _keys(tree: dict) -> set[str]:
    """Every key anywhere in `tree`, to tell 'num-cores' from a new key 'num_cores'."""
    keys = set()
    for key, value in tree.items():
        keys.add(key)
        if isinstance(value, dict):
            keys |= _keys(value)
    return keys


def texts(reasons) -> list[str]:
    return [str(r) for r in reasons]


def test_reasons_read_as_a_person_would_say_them():
    assert texts(changes(BASE, edited(params__inputs__x__shape=[1, 3, 48, 320]))) == [
        "input x shape changed [1,3,48,192] -> [1,3,48,320]"
    ]
    assert texts(changes(BASE, edited(files__model="bbb"))) == ["model file changed"]
    assert texts(changes(BASE, edited(tools__tvm="0.28.0"))) == ["tvm 0.27.0 -> 0.28.0"]
    assert texts(changes(BASE, edited(params__target__num_cores=4))) == ["target num-cores changed 2 -> 4"]
    assert texts(changes(BASE, edited(upstream__ir="222"))) == ["upstream ir output changed"]
    assert texts(changes(BASE, edited(stage__source="beef"))) == ["stage code changed"]
    assert changes(BASE, BASE) == []


def test_decide_without_history_says_never_built(tmp_path):
    decision = decide("import:a", "k", BASE, Store(tmp_path))
    assert decision.stale and texts(decision.reasons) == ["never built"]


def test_decide_compares_with_the_last_build(tmp_path):
    store = Store(tmp_path)
    store.remember("import:a", "old", BASE)
    decision = decide("import:a", "new", edited(files__model="bbb"), store)
    assert texts(decision.reasons) == ["model file changed"]
    assert decision.reasons[0].as_dict() == {
        "kind": "file",
        "field": "model",
        "old": None,
        "new": None,
        "text": "model file changed",
    }
    assert texts(decide("import:a", "old", BASE, store).reasons) == ["cached output missing or damaged"]


def test_a_cached_result_the_plan_doubts_is_stale_saying_what_it_fails(tmp_path):
    from modelbuild.engine.store import ActionResult

    store = Store(tmp_path)
    (tmp_path / "metrics.json").write_text("{}")
    metrics = store.put_object(tmp_path / "metrics.json")
    store.record("k", ActionResult("validate", "validate:a", {"metrics.json": metrics}, 1.0))
    store.remember("validate:a", "k", BASE)
    seen = []

    def doubt(result):
        seen.append(result.outputs)
        return "max_p99_ms, min_throughput"

    decision = decide("validate:a", "k", BASE, store, doubt)
    assert decision.stale and texts(decision.reasons) == [
        "its cached result fails max_p99_ms, min_throughput: run again"
    ]
    assert seen == [{"metrics.json": metrics}]  # asked of the cached result itself
    assert not decide("validate:a", "k", BASE, store, lambda result: None).stale
    assert decide("validate:a", "other", BASE, store, doubt).stale and len(seen) == 1  # a miss: nothing to doubt
