"""CPU against GPU on real files: torch's CPU probes (the session survey) set against
the real GPU profiles of reference/imported. What a whole model's profile does around
a primitive is model context, never a device decision or a dispatch-point row; each
GPU cell says which kind of evidence it rests on and where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.contract import PRIMITIVES
from tracer.importers import import_file
from tracer.processing.diff import diff_traces
from tracer.processing.diff.context import ARTEFACTS, MODEL_CONTEXT
from tracer.processing.diff.result import walk_splits
from tracer.processing.evidence_class import EVIDENCE_ORDER, evidence_class
from tracer.analysis.gpu_cells import gpu_cells
from tracer.knowledge import knowledge
from tracer.analysis.portability import framework_report

K = knowledge()

REF = Path(__file__).resolve().parent.parent / "tracer" / "reference" / "imported"
#: The profiles whose slices hold model structure (each a different model's reason).
PROFILES = ("resnet-train-mi300x", "vit-h100", "resnet-train-rtx2080ti", "mlp-train-rtx2080ti", "alexnet-a100",
            "resnet-train-v100")


@pytest.fixture(scope="module")
def gpu() -> dict[str, dict]:
    """profile -> primitive -> the imported trace."""
    return {name: {r.primitive: r.trace for r in import_file(REF / f"{name}.kineto.json.gz", "torch", "pytest")}
            for name in PROFILES}


@pytest.fixture(scope="module")
def torch_cpu(cpu_traces) -> dict[str, object]:
    """primitive -> torch's default CPU trace (functional API) of the session survey."""
    return {prim: cpu_traces[("torch", "default", prim, "functional")].load() for prim in PRIMITIVES}


def split_at(result, layer: str, frame: str):
    found = [s for ld in result.layers if ld.layer == layer for s in walk_splits(ld.splits) if s.frame == frame]
    assert found, f"no {layer} split at {frame!r}: {[s.frame for ld in result.layers for s in ld.splits]}"
    return found[0]


@pytest.mark.parametrize("profile, primitive, pass_, frame, model_ops", [
    # activation checkpointing: the forward recomputed inside the relu's autograd node
    ("resnet-train-mi300x", "relu", "backward", "ReluBackward0", {"aten::conv2d", "aten::batch_norm"}),
    # ViT's 3-D input, flattened around the matmul
    ("vit-h100", "dense", "forward", "aten::linear", {"aten::reshape"}),
    # a gradient accumulated where a ResNet tensor feeds two layers
    ("resnet-train-rtx2080ti", "conv2d", "backward", "autograd::engine::evaluate_function: ConvolutionBackward0",
     {"aten::add_"}),
])
def test_model_structure_of_a_gpu_profile_is_model_context(gpu, torch_cpu, profile, primitive, pass_, frame,
                                                           model_ops):
    s = split_at(diff_traces(torch_cpu[primitive], gpu[profile][primitive], pass_=pass_, k=K), "op", frame)
    assert s.classification == MODEL_CONTEXT, (s.classification, s.reason)
    assert model_ops <= {b.label for b in s.only_b}
    assert "whole model" in s.reason


def test_a_slice_missing_the_probes_autograd_bookkeeping_is_model_context(gpu, torch_cpu):
    result = diff_traces(torch_cpu["dense"], gpu["mlp-train-rtx2080ti"]["dense"], pass_="backward", k=K)
    s = split_at(result, "op", "dense.backward")
    assert [b.label for b in s.only_a] == ["autograd::engine::evaluate_function: TBackward0"] and not s.only_b
    assert s.classification == MODEL_CONTEXT


@pytest.mark.parametrize("profile, primitive, pass_, frame", [
    ("alexnet-a100", "conv2d", "forward", "aten::_convolution"),  # mkldnn_convolution against cudnn_convolution
    ("resnet-train-v100", "batchnorm", "backward", "batchnorm.backward"),  # NativeBatchNormBackward0 / Cudnn...
    ("resnet-train-mi300x", "maxpool2d", "forward", "aten::max_pool2d_with_indices"),  # a HIP kernel
])
def test_the_device_decisions_stay_device_dispatch(gpu, torch_cpu, profile, primitive, pass_, frame):
    s = split_at(diff_traces(torch_cpu[primitive], gpu[profile][primitive], pass_=pass_, k=K), "op", frame)
    assert s.classification == "device dispatch", (s.classification, s.reason)


def test_dispatch_table_keeps_decisions_only_and_the_diffs_keep_the_artefacts(gpu, torch_cpu):
    traces = list(torch_cpu.values()) + [t for by_prim in gpu.values() for t in by_prim.values()]
    rep = framework_report("torch", traces, [], k=K)
    frames = {d.frame for d in rep.dispatch_points}
    assert not {"ReluBackward0", "aten::linear", "dense.backward",
                "autograd::engine::evaluate_function: ConvolutionBackward0"} & frames
    assert all(d.classification not in ARTEFACTS | {"other"} for d in rep.dispatch_points), \
        [(d.display, d.classification) for d in rep.dispatch_points]
    assert {"aten::_convolution", "batchnorm.backward", "aten::max_pool2d_with_indices"} <= frames
    kept = {s.frame for c in rep.cases for pr in c.pairs for r in pr.diffs.values() for ld in r.layers
            for s in walk_splits(ld.splits) if s.classification == MODEL_CONTEXT}
    assert {"ReluBackward0", "aten::linear", "dense.backward"} <= kept


def test_every_gpu_cell_says_its_evidence_and_source(gpu, torch_cpu):
    traces = list(torch_cpu.values()) + [t for by_prim in gpu.values() for t in by_prim.values()]
    cells = gpu_cells(traces, k=K)
    assert [(c.primitive, c.pass_) for c in cells] == [(p, q) for p in PRIMITIVES for q in PRIMITIVES[p].passes]
    conv = next(c for c in cells if (c.primitive, c.pass_) == ("conv2d", "forward"))
    assert conv.cpu.op == "aten::mkldnn_convolution" and conv.cpu.library == "oneDNN"
    assert {e.label for e in conv.gpu} >= {"gpu alexnet-a100", "gpu resnet-train-mi300x"}
    by_label = {e.label: e for e in conv.gpu}
    alexnet = by_label["gpu alexnet-a100"]
    assert (alexnet.op, alexnet.library) == ("aten::cudnn_convolution", "cuDNN")
    assert (by_label["gpu resnet-train-mi300x"].op, by_label["gpu resnet-train-mi300x"].library) == (
        "aten::miopen_convolution", "MIOpen")
    assert "A100" in by_label["gpu alexnet-a100"].gpu and "HolisticTraceAnalysis" in by_label["gpu alexnet-a100"].source
    # the GPU kernel under the relu's own op, not the convolution the model recomputes around it
    relu = next(c for c in cells if (c.primitive, c.pass_) == ("relu", "backward"))
    assert {e.op for e in relu.gpu} == {"aten::threshold_backward"}
    # these profiles are all imported (their meta may say so, or only their api does)
    assert {evidence_class(t.info) for t in traces if t.info.device == "gpu"} == {"imported"}
    assert {e.evidence for c in cells for e in c.gpu} == {"imported"}
    assert evidence_class(torch_cpu["relu"].info) is None
    for c in cells:
        ranks = [EVIDENCE_ORDER.index(e.evidence) for e in c.gpu]
        assert ranks == sorted(ranks)
