"""Random recipes, and random bytes where the TOML should be: the loader loads them or raises the project's
own error (a RecipeError with a file), never anything else."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelbuild.errors import RecipeError
from modelbuild.recipe import load_recipe

KEYS = [
    "models",
    "targets",
    "builds",
    "validation",
    "tuning",
    "quantization",
    "include",
    "path",
    "inputs",
    "shape",
    "dtype",
    "kind",
    "mcpu",
    "num-cores",
    "model",
    "golden",
    "gates",
    "min_cosine",
    "x",
    "cls",
    "host",
    "source",
    "count",
    "scheme",
    "calibration",
    "quantization",
    "enabled",
    "timing",
    "cache",
    "remote",
    "mode",
]
scalars = st.one_of(
    st.integers(-3, 300),
    st.floats(allow_nan=False, width=32),
    st.booleans(),
    st.sampled_from(["m.onnx", "llvm", "host", "float32", "int8", "cls", "x", "", "images", "*"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12,
)
tables = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)


def toml(value, path=()) -> list[str]:
    """A dict as TOML text: scalars and arrays inline, nested dicts as inline tables."""
    return [f"{_key(k)} = {_inline(v)}" for k, v in value.items()]


def _key(k: str) -> str:
    return k if all(c in string.ascii_letters + string.digits + "-_" for c in k) and k else f'"{k}"'


def _inline(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_inline(x) for x in v) + "]"
    return "{ " + ", ".join(f"{_key(k)} = {_inline(x)}" for k, x in v.items()) + " }"


def load(tmp_path, text: str | bytes):
    (tmp_path / "m.onnx").write_bytes(b"not parsed when loading")
    recipe = tmp_path / "deploy.toml"
    recipe.write_bytes(text if isinstance(text, bytes) else text.encode())
    try:
        return load_recipe(recipe, snapshots=tmp_path / "snapshots")
    except RecipeError as err:
        assert err.file and "\n" not in str(err), str(err)
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables)
def test_random_recipes_load_or_raise_a_recipe_error(tmp_path, data):
    load(tmp_path, "\n".join(toml(data)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_random_bytes_as_a_recipe_raise_a_recipe_error(tmp_path, data):
    load(tmp_path, data)


GOOD = """
[models.cls]
path = "m.onnx"
inputs.x = { shape = [1, 3, 8, 8] }

[targets.host]
kind = "llvm"
mcpu = "host"

[[builds]]
model = "cls"
targets = ["host"]
"""


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(KEYS),
    values,
    st.sampled_from(["", "[models.cls]\n", "[targets.host]\n", "[[builds]]\n", "[validation]\n", "[quantization.q]\n"]),
)
def test_a_good_recipe_with_one_random_line_added_loads_or_raises_a_recipe_error(tmp_path, key, value, table):
    load(tmp_path, GOOD + "\n" + table + f"{_key(key)} = {_inline(value)}\n")
