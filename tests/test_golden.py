"""Golden inputs and calibration samples from images: the preprocessing, checked value by value."""

import numpy as np
import pytest
from PIL import Image

from modelbuild.errors import StageError
from modelbuild.pipeline.sample_files import image_files
from modelbuild.validation.golden import CALIBRATION, GOLDEN, generate, load_images

PRE = {
    "resize": None,
    "scale": 1 / 255,
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
    "layout": "NCHW",
    "color": "RGB",
}


def red_and_blue(folder):
    folder.mkdir()
    Image.new("RGB", (8, 4), (255, 0, 0)).save(folder / "a.png")
    Image.new("RGB", (16, 8), (0, 0, 255)).save(folder / "b.png")  # resized to the input's 4 x 8
    (folder / "notes.txt").write_text("not an image")
    return folder


def test_images_become_normalised_nchw_tensors_in_name_order(tmp_path):
    folder = red_and_blue(tmp_path / "imgs")
    files = image_files(folder, 10)
    assert [p.name for p in files] == ["a.png", "b.png"]
    x = load_images(files, {"x": {"shape": [1, 3, 4, 8], "dtype": "float32"}}, PRE)["x"]
    assert x.shape == (2, 1, 3, 4, 8)
    assert np.allclose(x[0, 0, 0], 1.0) and np.allclose(x[0, 0, 1:], -1.0)  # red: (255/255 - .5) / .5
    assert np.allclose(x[1, 0, 2], 1.0) and np.allclose(x[1, 0, :2], -1.0)  # blue


def test_bgr_and_nhwc(tmp_path):
    files = image_files(red_and_blue(tmp_path / "imgs"), 1)
    x = load_images(
        files, {"x": {"shape": [1, 4, 8, 3], "dtype": "float32"}}, {**PRE, "layout": "NHWC", "color": "BGR"}
    )["x"]
    assert x.shape == (1, 1, 4, 8, 3)
    assert np.allclose(x[0, 0, :, :, 2], 1.0) and np.allclose(x[0, 0, :, :, :2], -1.0)  # red is last in BGR


def test_count_limits_the_files_declared(tmp_path):
    assert len(image_files(red_and_blue(tmp_path / "imgs"), 1)) == 1


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"x": {"shape": [1, 3, 4, 8], "dtype": "float32"}, "y": {"shape": [1], "dtype": "float32"}}, "one input"),
        ({"x": {"shape": [2, 3, 4, 8], "dtype": "float32"}}, "batch 1"),
        ({"x": {"shape": [1, 1, 4, 8], "dtype": "float32"}}, "resize or layout"),
    ],
)
def test_images_that_cannot_feed_the_input_are_refused_clearly(tmp_path, inputs, message):
    files = image_files(red_and_blue(tmp_path / "imgs"), 2)
    with pytest.raises(StageError, match=message):
        load_images(files, inputs, PRE)


def test_generated_inputs_are_seeded():
    spec = {"x": {"shape": [1, 2], "dtype": "float32"}, "ids": {"shape": [1, 3], "dtype": "int64"}}
    a, b = (generate(spec, fill="random", seed=3, count=2, stream=GOLDEN) for _ in range(2))
    assert all(np.array_equal(a[k], b[k]) for k in spec) and a["ids"].dtype == np.int64
    assert np.all(generate(spec, fill="ones", seed=0, count=1, stream=GOLDEN)["x"] == 1)


def test_no_golden_sample_equals_a_calibration_sample_drawn_with_the_same_seed():
    """Both default to seed 0: int8 accuracy was measured on the samples it had been calibrated on."""
    spec = {"x": {"shape": [1, 3, 4, 4], "dtype": "float32"}}
    held_out = generate(spec, fill="random", seed=0, count=8, stream=GOLDEN)["x"]
    calibration = generate(spec, fill="random", seed=0, count=32, stream=CALIBRATION)["x"]
    assert not any(np.array_equal(g, c) for g in held_out for c in calibration)
