"""modelbuild.runtime without TVM: arguments bound to the signature, the manifest read back, timing figures."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild import manifest
from modelbuild.runtime import SignatureError, Timing, bind, example_inputs
from modelbuild.signature import Signature

SIGNATURE = Signature(
    inputs={"image": {"shape": [1, 3, 4, 4], "dtype": "float32"}, "ids": {"shape": [1, 2], "dtype": "int64"}},
    outputs={"scores": {"shape": [1, 2], "dtype": "float32"}},
    bound={"rate": {"dtype": "int64", "value": 8000}},
)
IMAGE, IDS = np.zeros((1, 3, 4, 4), np.float32), np.zeros((1, 2), np.int64)
WANTED = "expected (image: float32[1, 3, 4, 4], ids: int64[1, 2])"


def test_arguments_by_position_and_by_name_come_out_in_the_librarys_order():
    for args, kwargs in [((IMAGE, IDS), {}), ((), {"ids": IDS, "image": IMAGE}), ((IMAGE,), {"ids": IDS})]:
        arrays = bind(SIGNATURE, args, kwargs)
        assert [a.dtype for a in arrays] == [np.float32, np.int64] and arrays[0].shape == (1, 3, 4, 4)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((IMAGE,), {"idz": IDS}, f"no input named 'idz'; {WANTED}"),
        ((IMAGE,), {}, f"missing ids; {WANTED}"),
        ((IMAGE, IDS, IDS), {}, f"3 inputs given, the library takes 2; {WANTED}"),
        ((IMAGE, IDS), {"image": IMAGE}, f"image given by position and by name; {WANTED}"),
        ((IMAGE.astype(np.float64), IDS), {}, f"image is float64[1, 3, 4, 4]; {WANTED}"),
        ((IMAGE[..., :3], IDS), {}, f"image is float32[1, 3, 4, 3]; {WANTED}"),
        (
            (IMAGE, IDS),
            {"rate": 16000},
            f"bound at build time (rate = 8000), so not an input of this library; {WANTED}",
        ),
    ],
    ids=["unknown-name", "missing", "too-many", "twice", "dtype", "shape", "bound"],
)
def test_wrong_arguments_are_one_error_naming_the_signature(args, kwargs, message):
    with pytest.raises(SignatureError) as caught:
        bind(SIGNATURE, args, kwargs)
    assert str(caught.value) == message


def test_example_inputs_are_random_floats_and_zero_integers_of_the_signature():
    image, ids = example_inputs(SIGNATURE)
    assert image.shape == (1, 3, 4, 4) and image.dtype == np.float32 and image.std() > 0.1
    assert ids.dtype == np.int64 and not ids.any()


def test_a_manifest_reads_back_what_was_written(tmp_path):
    written = manifest.describe(
        library="model.so", target={"kind": "llvm", "num-cores": 4}, runtime={"apache-tvm": "1"}, signature=SIGNATURE
    )
    (tmp_path / manifest.FILE).write_text(written.to_json())
    assert manifest.read(tmp_path) == written
    assert manifest.read(tmp_path / manifest.FILE).threads == 4


def test_a_missing_or_foreign_manifest_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match="library.json: no such file; build the model first"):
        manifest.read(tmp_path)
    (tmp_path / manifest.FILE).write_text('{"format": "other/9"}')
    with pytest.raises(ValueError, match="format 'other/9', where this modelbuild reads 'modelbuild.library/1'"):
        manifest.read(tmp_path)


def test_timing_uses_the_validate_stages_nearest_rank_percentiles():
    timing = Timing.of([0.001 * i for i in range(1, 101)])  # 1..100 ms
    assert (timing.p50_ms, timing.p99_ms, timing.runs) == pytest.approx((50.0, 99.0, 100))
