"""The stages a recipe's builds are made of, as the build system runs them: their contracts
(stages/contracts.py) by name.

A stage's code is named by an import path and loaded only in the worker process that runs it, so a build
whose stages are all cached never imports TVM, onnx or onnxruntime.
"""

from __future__ import annotations

from modelbuild.engine.stage import Stage
from modelbuild.errors import ModelbuildError
from modelbuild.frontend.external_data import companions, model_digest
from modelbuild.stages.contracts import CONTRACTS, Role

STAGES: dict[str, Stage] = {stage.name: stage for stage in CONTRACTS}

# the role of a declared ONNX model file, digested with the files it keeps its tensors in
DIGESTERS = {Role.MODEL: model_digest}
# and the files it keeps beside it, which travel with it to a cluster's worker
COMPANIONS = {Role.MODEL: companions}


def get_stage(name: str) -> Stage:
    """The registered stage of that name; an unknown name lists the valid ones."""
    try:
        return STAGES[name]
    except KeyError:
        raise ModelbuildError(f"no stage named {name!r}; stages: {', '.join(sorted(STAGES))}") from None
