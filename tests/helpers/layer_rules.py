"""The package's layers: what each folder holds and which layers it may import.

tests/test_layers.py enforces these rules on every module's imports, and docs/reference.py writes the layer
table of docs/design.md from them, so the table says what the test checks and nothing else.
"""

from __future__ import annotations

# used by every layer: errors, file and code digests, atomic writes, tool versions, a model's signature, a
# library's manifest and the GPU kernels it carries, progress lines, a connection to a Ray cluster, and the
# package itself (its version)
SHARED = {
    "cuda_binaries",
    "errors",
    "fsutil",
    "hashing",
    "sources",
    "versions",
    "signature",
    "manifest",
    "progress",
    "ray_connection",
    "",
}

# layer -> the other layers (or single modules, `layer.module`) it may import
ALLOWED: dict[str, set[str]] = {
    "engine": set(),  # never names a stage or a recipe: the plan it runs carries its stages
    "host": set(),
    "recipe": {"host"},  # a cuda target's architecture defaults to the GPU here
    # tuning databases are named by target, a model file is digested with the external data it names, and
    # the stages' contracts (their input roles, params and output files) are declared beside the stages
    "pipeline": {"engine", "recipe", "host", "tuning.database", "frontend.external_data", "stages.contracts"},
    # adapters: params in (typed by recipe.params), calls out
    "stages": {
        "compiler",
        "gpu",
        "quantization",
        "validation",
        "recipe.targets",
        "recipe.params",
        "recipe.schema",
        "frontend",
        "host",
        "tuning",
        "measurement",
    },
    "tuning": set(),
    # the validate stage's measuring script and the RPC device client: they run libraries, and time them
    "measurement": {"compiler", "host", "recipe.targets", "validation"},
    "frontend": {"recipe.schema"},  # an input as the recipe declares it, and its key as a fix writes it
    "compiler": set(),
    # where NVRTC finds CUDA's headers, to compile a cuda library's kernels; a tensor's bytes, as fusion counts them
    "gpu": {"host.nvrtc", "compiler.lowering"},
    "quantization": {"validation"},
    "validation": set(),
    "reports": {"engine", "pipeline", "recipe", "validation", "stages.contracts"},
    # a search builds candidates as a build does and reads their reports
    "search": {"engine", "pipeline", "recipe", "reports", "validation"},
}

# third-party packages a layer must never import
FORBIDDEN: dict[str, set[str]] = {
    "engine": {"tvm", "onnx", "onnxruntime", "numpy", "pydantic"},
    "host": {"tvm", "onnx", "onnxruntime", "numpy", "pydantic"},
    "tuning": {"onnx", "onnxruntime"},
    "measurement": {"onnx", "onnxruntime"},
    "recipe": {"tvm", "onnx", "onnxruntime", "numpy"},
    "pipeline": {"tvm", "onnx", "onnxruntime", "numpy"},
    "compiler": {"onnxruntime", "onnx"},
    "gpu": {"onnxruntime", "onnx", "numpy"},
    "quantization": {"tvm"},
    "frontend": {"tvm", "onnxruntime"},
    "validation": {"tvm", "onnxruntime"},
    "reports": {"tvm", "onnx", "onnxruntime"},
    "search": {"tvm", "onnx", "onnxruntime", "numpy"},
}

# what each layer holds, in the order the design document lists them
HOLDS: dict[str, str] = {
    "engine": "`plan` (Node, Plan), `stage` (what a stage is to the build system), `keys`, `store`, `sealing` "
    "(entries' digests and team signatures), `locks`, `remote` (the team cache through fsspec), `housekeeping` "
    "(verify, gc, leftovers), `rebuilder`, `scheduler`, `worker`, `executors` (local or a Ray cluster, "
    "chosen), `cluster` (stages as Ray tasks, from the driver), `cluster_task` (a stage on a worker, and the "
    "leases that build each key once), `events`, `render` (the plan as a tree, dot, mermaid)",
    "recipe": "`schema` (pydantic), `load` (TOML, includes, checks), `snapshot` (validated recipes read back "
    "without pydantic), `locate` (field -> line), `targets`, `params` (each stage's params, typed: what the plan "
    "writes and the stage parses at entry)",
    "pipeline": "`graph` (the stage graph a recipe asks for, built from the stages' contracts), `registry` (each "
    "stage's contract as the build system runs it), `names` (build ids, selection), `sample_files`, `project`, "
    "`explain`",
    "stages": "the adapters: import, quantize, tune, compile, reference, validate; `contracts`, each stage's "
    "input roles, params model, output files and key-schema version, declared once",
    "tuning": "MetaSchedule's machinery as the tune stage drives it: `candidate_builder` (its builder, workers "
    "kept for the search), `candidate_timing`, `database` (a target's tuning records as files: merge, export, "
    "import)",
    "measurement": "running a built library to time it: `measure` (the validate stage's script, a fresh "
    "process), `peak` (this machine's FMA-loop peak and bandwidth), `device` (a device over TVM's RPC tracker)",
    "host": "probes of this machine: `cgroup` (CPU quota), `gpus`, `nvrtc` (where NVRTC and the CUDA headers are)",
    "frontend": "ONNX graph rewrites before import: `recurrent` (LSTM, GRU, RNN unrolled into operators TVM "
    "imports), `qoperator` (pre-quantized QOperator models in QDQ form), `batchnorm` (BatchNorms simplification "
    "left, as a multiply-add), `inputs` (the declared inputs bound or frozen), `facts` (a model's signature, "
    "whether it arrives quantized)",
    "compiler": "the phased TVM pipeline (`lowering`), IR figures (`analysis`, `layer_names`), the integer "
    "legalisation (`integer_ops`), `fast_math`, `default_schedule`; `passes/`, the graph rewrites before "
    "legalisation, each a `tvm.transform` module pass; and `kernels/` (packed dot-product convs and matmuls for "
    "x86 VNNI, x86 AVX2 (vpmaddwd) and Arm sdot; float GEMVs on packed weights; matmuls by a few columns; NCHW "
    "pools at stride two by shuffles; a row-by-row softmax)",
    "gpu": "what a GPU build adds: `cuda_kernels` (its kernels compiled while it is built, for the library to "
    "carry), `placement` (which device runs each operator of a split build, from a cost model: pure) and "
    "`heterogeneous` (the split itself: GPU kernels found, the module placed on Relax's virtual devices)",
    "quantization": "ONNX-level: smoothing, bias correction, GPTQ weight rounding, sensitivity, activations",
    "validation": "golden inputs, accuracy and timing statistics, `measured` (metrics.json, typed), gates, "
    "`unsigned_weights` (a pre-quantized model's int8 weights as uint8, which onnxruntime's reference computes "
    "exactly on every CPU): pure",
    "reports": "the report model and its JSON, Markdown, JUnit and HTML renderings",
    "search": "`modelbuild search`: `strategy` (the walk over candidates: pure), `candidates` (a candidate as a "
    "quantization section, a built one as an outcome), `runner` (each candidate built as a build of its own, in "
    "the same store), `outputs` (the snippet, search.json/md/html)",
}

# the modules above every layer, which the rules leave free
TOP: dict[str, tuple[str, str]] = {
    "cli/": (
        "the command line (`entry`: parse, call, render a failure once; `parser`; one module per concern), the "
        "terminal view (`console`), `modelbuild init`'s recipe text (`scaffold`): the only code that prints or exits",
        "everything",
    ),
    "api.py": (
        "`modelbuild.build()`: a project opened, run and reported, failures raised as typed errors; the CLI's "
        "build is a layer over its `run_build`",
        "everything",
    ),
    "runtime.py": (
        "`Library`: a built library loaded from its build folder and called by its signature, TVM's thread "
        "pool sized for it, `benchmark()`",
        "shared and `validation.metrics`; numpy and TVM's runtime only",
    ),
}


def table() -> str:
    """docs/design.md's layer table, in Markdown."""
    rows = ["| folder | what it holds | may import | never imports |", "| --- | --- | --- | --- |"]
    for name, (holds, imports) in TOP.items():
        rows.append(f"| `{name}` | {holds} | {imports} | |")
    for layer, holds in HOLDS.items():
        allowed = ", ".join(sorted(ALLOWED[layer])) or "shared only"
        never = ", ".join(sorted(FORBIDDEN.get(layer, ())))
        rows.append(f"| `{layer}/` | {holds} | {allowed} | {never} |")
    shared = ", ".join(f"`{name}`" for name in sorted(SHARED) if name)
    rows.append(f"| shared | {shared} | each other | |")
    return "\n".join(rows) + "\n"
