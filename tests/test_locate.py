from modelbuild.recipe.locate import dotted, locate

TEXT = """include = ["a"]
[models.cls]
path = "x"
inputs.x = { shape = [1, 2] }
[targets."host"]
num-cores = 2
[[builds]]
model = "cls"
[[builds]]
model = "b"
targets = ["z"]
"""


def test_keys_dotted_keys_quoted_tables_and_arrays_of_tables():
    assert locate(TEXT, ("models", "cls", "path")) == 3
    assert locate(TEXT, ("models", "cls", "inputs", "x", "shape")) == 4
    assert locate(TEXT, ("targets", "host", "num-cores")) == 6
    assert locate(TEXT, ("builds", 1, "targets", 0)) == 11


def test_a_missing_key_falls_back_to_its_table():
    assert locate(TEXT, ("builds", 0, "targets")) == 7
    assert locate(TEXT, ("nothing",)) is None


def test_dotted_paths_read_as_written():
    assert dotted(("builds", 0, "targets", 1)) == "builds[0].targets[1]"
    assert dotted(("targets", "host", "num-cores")) == "targets.host.num-cores"
