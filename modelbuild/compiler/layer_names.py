"""ONNX -> Relax with each binding named after the ONNX node it came from, so a fused kernel can be traced back
to the model's layers (`fused_conv2d12_add12_relu` -> `backbone_stage2_conv1_Conv`).

TVM's frontend names every binding `lv`/`gv` and keeps no span. Its importer does keep, per ONNX tensor, the
Relax expression that computes it; a binding is owned by the node whose output it is, and the bindings a
converter emits on the way to that output (a conv's bias add, a softmax's reshape) by the same node. The names
then survive legalisation and fusion: TVM's passes keep a binding's variable, and FuseOps keeps the names of
the bindings it moves into a fused function. Names are made identifiers, so the IR files still read as
TVMScript; lowering.py reads them back.
"""

from __future__ import annotations

import re

_UNNAMED = re.compile(r"^(lv|gv)\d*$")  # what TVM, or a rewrite of ours, names a binding


def from_onnx(model, shapes: dict, dtypes: dict):
    """The model as a Relax module (as tvm.relax.frontend.onnx.from_onnx builds it), bindings named by layer."""
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = onnx_frontend.ONNXGraphImporter(shapes, dtypes, keep_params_in_input=False, sanitize=True)
    module = importer.from_onnx(model.graph, _opset(model))
    owners = _owners(model, importer._nodes)  # the importer's table of ONNX tensor -> Relax expression
    module["main"] = _renamed(module["main"], owners)
    return module


def is_layer(name: str) -> bool:
    """Whether a binding's name is a layer's, rather than one TVM or a rewrite made up."""
    return not _UNNAMED.match(name)


def label(node, index: int) -> str:
    """A node's name as an identifier; a node with none is called by its operator and position."""
    name = re.sub(r"\W+", "_", node.name).strip("_") or f"{node.op_type}_{index}"
    return name if not name[0].isdigit() else f"n{name}"


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _owners(model, tensors: dict) -> dict:
    """Relax expression -> the label of the ONNX node whose output it is."""
    owners = {}
    for index, node in enumerate(model.graph.node):
        for output in node.output:
            expr = tensors.get(output)
            if expr is not None:
                owners[expr] = label(node, index)
    return owners


def _binding_names(function, owners: dict) -> dict:
    """Binding variable -> its layer: a node's output binding, and the unowned bindings just before it."""
    names, pending = {}, []
    for block in function.body.blocks:
        for binding in block.bindings:
            pending.append(binding.var)
            owner = owners.get(binding.var) or owners.get(binding.value)
            if owner:
                names.update((var, owner) for var in pending)
                pending = []
    return names


def _renamed(function, owners: dict):
    from tvm import relax

    names = _binding_names(function, owners)

    @relax.expr_functor.mutator
    class Rename(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            old = binding.var
            if old not in names:
                return super().visit_var_binding_(binding)
            value = self.visit_expr(binding.value)
            kind = relax.DataflowVar if isinstance(old, relax.DataflowVar) else relax.Var
            new = kind(names[old], old.ty)
            self.builder_.emit_normalized(relax.VarBinding(new, value))
            self.set_var_remap(old, new)

    return Rename().visit_expr(function)
