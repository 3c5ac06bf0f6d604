"""dltrace's own GPU traces (tracer/reference/recorded): what the CUDA libraries logged
on the GPU machine becomes the library layer, the recorded traces say where they were
recorded and are evidence of class ``recorded``, and the CPU and GPU paths of one
machine part where the framework chooses its device's kernel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracer import registry
from tracer.collect.vendor_log import CUBLAS, CUBLASLT, CUDNN, parse
from tracer.contract import PRIMITIVES, WORKLOADS
from tracer.processing.diff import diff_traces
from tracer.processing.diff.result import walk_splits
from tracer.processing.evidence_class import evidence_class
from tracer.analysis.gpu_cells import gpu_cells
from tracer.survey import trace_files
from tracer.knowledge import knowledge
from tracer.trace import Trace, load

K = knowledge()

LOG = Path(__file__).resolve().parent / "data" / "cuda_library_log.txt"


def steps() -> dict[str, str]:
    """step -> what the libraries printed during it (the captured log's '@@@ STEP' marks)."""
    parts = re.split(r"^@@@ (.*)\n", LOG.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_cuda_library_logs_name_each_call_and_what_ran():
    log = {step: parse(text) for step, text in steps().items()}
    calls = {step: [(c.library, c.name) for c in v.calls] for step, v in log.items()}
    # cuDNN's graph API: the operation of the executed plan and its engine, not the
    # descriptors set up around it, nor the call's return logged as a second block
    assert calls["conv fwd 1"] == [(CUDNN, "cudnnBackendExecute convolution_forward engine 48 (tensor cores)")]
    assert calls["conv bwd 1"] == [(CUDNN, "cudnnBackendExecute convolution_backward_data engine 58 (tensor cores)"),
                                   (CUDNN, "cudnnBackendExecute convolution_backward_filter engine 50 (tensor cores)")]
    assert log["conv fwd 1"].calls[0].detail == "8x16x64x64 16x16x3x3 8x16x64x64"
    # torch's addmm goes to cuBLASLt directly; mm goes through cuBLAS, which runs cuBLASLt
    assert calls["dense fwd 1"] == [(CUBLASLT, "cublasLtMatmul algoId=10 tile=32x32 numSplitsK=2")]
    assert "EPILOGUE_BIAS" in log["dense fwd 1"].calls[0].detail  # the bias fused into the matmul
    assert [lib for lib, _ in calls["dense bwd 1"]] == [CUBLAS, CUBLASLT, CUBLAS, CUBLASLT]
    assert calls["dense bwd 1"][0] == (CUBLAS, "cublasSgemm_v2 (N,N)")
    assert log["dense bwd 1"].calls[0].detail == "m=1024 n=256 k=512"
    # the legacy API: one call each, though cuDNN logged a warning block about it and
    # torch asked for its workspace size first
    assert calls["bn fwd 1"] == [(CUDNN, "cudnnBatchNormalizationForwardTrainingEx")]
    assert calls["bn bwd 1"] == [(CUDNN, "cudnnBatchNormalizationBackwardEx")]
    assert all(v.unreadable == 0 for v in log.values())
    assert log["dense bwd 1"].info[CUBLAS]["version"] == "13.1.0"
    assert log["conv fwd 1"].info[CUDNN]["version"] == "91900"


def test_a_cut_cuda_log_costs_nothing_but_its_own_lines():
    text = steps()["conv fwd 1"]
    header = "function cudnnBackendExecute() called:\n"
    cut = text[: text.index(header) + len(header) + 40]  # the execute block ends before its plan
    log = parse(cut + "\nsomething the framework printed\n" + steps()["dense fwd 1"])
    assert [c.library for c in log.calls] == [CUBLASLT] and log.unreadable == 0


def recorded() -> dict[str, list[Path]]:
    """framework -> its recorded GPU folders (frameworks.yaml), each with the GPU
    machine's own CPU path beside it (cpu-default)."""
    return {name: list(dict.fromkeys(p for gpu in fw.recorded for p in (gpu, gpu.parent / "cpu-default")))
            for name, fw in registry.load().items() if fw.recorded}


@pytest.fixture(scope="module")
def traces() -> dict[str, list[Trace]]:
    """framework -> every trace of its recorded folders and their CPU companions."""
    return {name: [load(p) for p in trace_files(folders)] for name, folders in recorded().items()}


def test_recorded_traces_say_where_a_gpu_ran_them(traces):
    assert set(traces) >= {"torch", "jax"}
    for name, ts in traces.items():
        gpu = [t for t in ts if t.info.device == "gpu"]
        cpu = [t for t in ts if t.info.device == "cpu"]
        # every primitive and every model's training step, on the GPU and the machine's own CPU
        assert {t.info.primitive for t in gpu} == set(WORKLOADS) == {t.info.primitive for t in cpu}, name
        for t in gpu:
            m = t.info.machine
            assert m.gpu.startswith("NVIDIA") and m.gpu_driver and m.gpu_runtime, (name, m)
            assert evidence_class(t.info) == "recorded"
            assert machine_key(t) in {machine_key(c) for c in cpu}  # its CPU path on the same machine
            warm = t.run("forward", "warm")
            assert warm is not None and {"python", "op", "library"} <= set(warm.layers), name
        assert any("native" in (t.run("forward", "warm") or t.runs[0]).layers for t in gpu), name


def machine_key(t: Trace) -> tuple[str | None, str | None]:
    return t.info.machine.arch, t.info.machine.cpu


def case(ts: list[Trace], device: str, primitive: str) -> Trace:
    return next(t for t in ts if t.info.device == device and t.info.primitive == primitive
                and t.info.api == "functional" and t.info.shape == PRIMITIVES[primitive].shape)


@pytest.mark.parametrize("primitive, pass_, frame, cpu_op, gpu_op, gpu_library", [
    # torch's _convolution picks the backend: oneDNN on the CPU, cuDNN's graph API on CUDA
    ("conv2d", "forward", "aten::_convolution", "aten::mkldnn_convolution", "aten::cudnn_convolution",
     "cudnnBackendExecute convolution_forward"),
    # _batch_norm_impl_index picks cuDNN's batch norm on CUDA, torch's own kernel on the CPU
    ("batchnorm", "forward", "aten::_batch_norm_impl_index", "aten::native_batch_norm", "aten::cudnn_batch_norm",
     "cudnnBatchNormalizationForwardTrainingEx"),
])
def test_torch_cpu_and_gpu_paths_part_where_torch_picks_the_kernel(traces, primitive, pass_, frame, cpu_op,
                                                                    gpu_op, gpu_library):
    a, b = case(traces["torch"], "cpu", primitive), case(traces["torch"], "gpu", primitive)
    result = diff_traces(a, b, pass_=pass_, k=K)
    op = [s for ld in result.layers if ld.layer == "op" for s in walk_splits(ld.splits)]
    assert op[0].frame == frame and op[0].classification == "device dispatch", [(s.frame, s.classification)
                                                                                for s in op]
    assert cpu_op in {x.label for x in op[0].only_a} and gpu_op in {x.label for x in op[0].only_b}
    lib = [s for ld in result.layers if ld.layer == "library" for s in walk_splits(ld.splits)]
    assert any(x.label.startswith(gpu_library) for s in lib for x in s.only_b)


def test_jax_cpu_and_gpu_paths_part_at_the_compiled_program(traces):
    a, b = case(traces["jax"], "cpu", "conv2d"), case(traces["jax"], "gpu", "conv2d")
    result = diff_traces(a, b, pass_="forward", k=K)
    (op,) = [s for ld in result.layers if ld.layer == "op" for s in walk_splits(ld.splits)][:1]
    assert {x.label for x in op.only_a} == {"XLA:cpu"} and {x.label for x in op.only_b} == {"XLA:gpu"}
    lib = [x.label for ld in result.layers if ld.layer == "library" for s in walk_splits(ld.splits) for x in s.only_b]
    assert any(label.startswith("cudnnBackendExecute convolution_forward") for label in lib)


def test_gpu_cells_rest_on_the_recorded_run(traces):
    cells = {(c.primitive, c.pass_): c for c in gpu_cells(traces["torch"], k=K)}
    conv = cells[("conv2d", "forward")]
    assert conv.strongest is not None and conv.strongest.evidence == "recorded"
    assert conv.strongest.gpu == "NVIDIA H100 80GB HBM3" and conv.strongest.op == "aten::cudnn_convolution"
    # what cuDNN itself logged it ran, and the runtime and driver the run had
    (lib, call), = conv.strongest.reported
    assert lib == "cuDNN" and call.startswith("cudnnBackendExecute convolution_forward engine ")
    assert "CUDA 13.0" in conv.strongest.source and "driver NVIDIA 580" in conv.strongest.source
    # no vendor library computes torch's relu on CUDA: its own kernel, and nothing reported
    relu = cells[("relu", "forward")].strongest
    assert relu is not None and relu.library == "PyTorch CUDA kernels" and not relu.reported
    assert all(c.strongest is not None and c.strongest.evidence == "recorded" for c in cells.values())


def test_scorecard_names_the_strongest_gpu_evidence_first(traces):
    """torch's recorded GPU run beside a public profile: the coverage names recorded first."""
    from tracer.importers import import_file
    from tracer.analysis.portability import framework_report
    from tracer.analysis.scorecard import scorecard

    ref = Path(__file__).resolve().parent.parent / "tracer" / "reference" / "imported" / "alexnet-a100.kineto.json.gz"
    ts = [t for t in traces["torch"] if t.info.device == "gpu"] + [r.trace for r in import_file(ref, "torch", "pytest")]
    (row,) = scorecard([framework_report("torch", ts, [], k=K)], ts, None, K)
    coverage = row.figures["coverage"]
    assert "GPU recorded/imported" in coverage.value, coverage.value
    assert [d.split(":")[0] for d in coverage.details[1:3]] == ["GPU (recorded)", "GPU (imported)"], coverage.details


def test_torch_attention_on_the_h100_runs_the_backend_sdpa_picks(traces):
    """F.scaled_dot_product_attention chooses its backend at run time (sdp_utils'
    select_sdp_backend): in float32 CUTLASS's memory-efficient kernels (flash and cuDNN
    take half types only), in bfloat16 cuDNN's fused flash attention for sm90; the CPU
    runs its own flash kernel. The registered reading names the same float32 choice."""
    cells = {(c.primitive, c.pass_): c for c in gpu_cells(traces["torch"], k=K)}
    fwd, bwd = cells[("attention", "forward")].strongest, cells[("attention", "backward")].strongest
    assert fwd.evidence == "recorded" and fwd.op == "aten::_efficient_attention_forward" and fwd.library == "CUTLASS"
    assert fwd.kernels[0].startswith("fmha_cutlassF_f32") and bwd.op == "aten::_efficient_attention_backward"
    bf16 = next(t for t in traces["torch"] if t.info.device == "gpu" and t.info.variant == "bf16"
                and t.info.primitive == "attention")
    kernels = {n.frame.name for p in ("forward", "backward") for _, n in bf16.layer(p, "op").walk()}
    assert any(k.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") for k in kernels), kernels
    assert any(k.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_bprop") for k in kernels), kernels
    cpu = case(traces["torch"], "cpu", "attention")
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in {
        n.frame.name for _, n in cpu.layer("forward", "op").walk()}


def test_model_steps_on_the_h100_name_their_gpu_libraries(traces):
    """The models' training steps recorded on the GPU: LeNet reaches cuDNN for its
    convolutions and cuBLAS for its dense layers; the transformer block's attention is
    the memory-efficient kernel, its layer norms torch's own."""
    from tracer.analysis.models import gpu_steps

    steps = {s.api: s for s in gpu_steps([t for t in traces["torch"] if t.info.primitive == "lenet"], k=K)}
    assert set(steps) == {"functional", "layer"}
    for s in steps.values():
        assert s.evidence == "recorded" and s.gpu == "NVIDIA H100 80GB HBM3"
        assert {"cuDNN", "cuBLAS"} <= set(s.libraries), s.libraries
    (block,) = gpu_steps([t for t in traces["torch"] if t.info.primitive == "transformer"], k=K)
    assert any(o.startswith("fmha_cutlassF_f32") for o in block.ops)
    assert any("layer_norm_kernel" in o for o in block.ops)
