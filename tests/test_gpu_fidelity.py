"""GPU evidence where the framework chooses at run time, and JAX op layers that are the
programs the step runs (CPU only):

- torch's registered reading resolves convolution's backend and batch norm's
  implementation index as torch does on an NVIDIA GPU (cuDNN), lists the candidates not
  taken, and reads one op once whichever API reached it;
- JAX's op layer records the program each pass runs, instruction for instruction as XLA
  itself dumped it while the step ran (residuals as parameters: no constant-folded
  backward);
- a compiled JAX cell names XLA:cuda's instructions with their counts and cuDNN's custom
  calls as cuDNN, never a lowering rule (cuda's or rocm's) as a kernel;
- the recorded JAX cells name their op.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_ctrace import runner_env
from tests.test_recorded import recorded
from tracer import envs
from tracer.contract import PASSES, PRIMITIVES
from tracer.derive import derive
from tracer.processing.diff import diff_traces
from tracer.processing.diff.result import walk_splits
from tracer.analysis.gpu_cells import gpu_cells
from tracer.runner import CaseSpec, probe_one
from tracer.survey import trace_files
from tracer.knowledge import knowledge
from tracer.trace import Trace, load

K = knowledge()

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def traces() -> dict[str, list[Trace]]:
    """framework -> its recorded GPU traces and the GPU machine's own CPU path."""
    return {name: [load(p) for p in trace_files(folders)] for name, folders in recorded().items()}


@pytest.fixture(scope="module")
def torch_registered(frameworks, tmp_path_factory) -> list[Trace]:
    """torch's conv2d and batchnorm: the CPU trace (functional) and the registered
    readings of both APIs."""
    root = tmp_path_factory.mktemp("registered")
    fw = frameworks["torch"]
    traces: list[Trace] = []
    for prim in ("conv2d", "batchnorm"):
        for res in derive(fw, [prim], root / prim, ("functional", "layer")):
            assert res.error is None, res.error
            traces.append(res.load())
        traces.append(probe_one(fw, CaseSpec(prim, layers=("python", "op"))))
    return traces


@pytest.fixture(scope="module")
def torch_cells(torch_registered) -> dict[tuple[str, str], object]:
    """(primitive, pass) -> torch's GPU cell."""
    return {(c.primitive, c.pass_): c for c in gpu_cells(torch_registered, K) if c.primitive in ("conv2d", "batchnorm")}


@pytest.mark.parametrize("primitive, frame", [("conv2d", "aten::_convolution"),
                                              ("batchnorm", "aten::_batch_norm_impl_index")])
def test_cpu_and_registered_part_where_torch_chooses_not_at_composites(torch_registered, primitive, frame):
    """Composite ops (aten::conv2d, aten::batch_norm) never reach the dispatch table: the
    paths part at the op that chooses the library, a device dispatch."""
    cpu = next(t for t in torch_registered if t.info.primitive == primitive and t.info.device == "cpu")
    reg = next(t for t in torch_registered if t.info.primitive == primitive and t.info.device == "gpu"
               and t.info.api == "functional")
    result = diff_traces(cpu, reg, pass_="forward", k=K)
    splits = [s for ld in result.layers if ld.layer == "op" for s in walk_splits(ld.splits)]
    assert splits and splits[0].frame == frame, [(s.frame, s.classification) for s in splits]
    assert splits[0].classification == "device dispatch", splits[0].reason
    assert not any(s.frame in ("aten::conv2d", "aten::convolution", "aten::batch_norm") for s in splits)


@pytest.mark.parametrize("primitive, pass_, op, kernel, not_taken", [
    ("conv2d", "forward", "aten::cudnn_convolution", "CUDA: cudnn_convolution", "ConvBackend.CudaDepthwise2d"),
    ("conv2d", "backward", "aten::convolution_backward", "ConvBackend.Cudnn -> cudnn_convolution_backward_stub",
     "ConvBackend.CudaDepthwise2d"),
    ("batchnorm", "forward", "aten::cudnn_batch_norm", "CUDA: cudnn_batch_norm",
     "impl index 0 -> aten::native_batch_norm (CUDA: batch_norm_cuda"),
    ("batchnorm", "backward", "aten::cudnn_batch_norm_backward", "CUDA: cudnn_batch_norm_backward",
     "impl index 0 -> aten::native_batch_norm_backward (CUDA: batch_norm_backward_cuda"),
])
def test_torch_registered_resolves_the_run_time_choice_for_an_nvidia_gpu(torch_cells, primitive, pass_, op, kernel,
                                                                       not_taken):
    cell = torch_cells[(primitive, pass_)]
    # the functional API's reading first; the layer's agrees on the op and its library (its
    # entry differs where nn.BatchNorm2d adds to num_batches_tracked: aten::add_, a CUDA kernel too)
    regs = [e for e in cell.gpu if e.evidence == "registered"]
    reg = regs[0]
    assert reg.op == op and reg.kernels[0].startswith(kernel) and reg.library == "cuDNN", reg
    assert all((r.op, r.kernels[0], r.library) == (reg.op, reg.kernels[0], reg.library) for r in regs), regs
    assert any(c.startswith(not_taken) for c in reg.candidates), reg.candidates
    assert not any(k.startswith(("ConvBackend.Miopen", "impl index")) for k in reg.kernels)  # never a kernel
    assert set(reg.label.split(", ")) == {"gpu registered"} or "," not in reg.label


def test_torch_registered_conv_shows_the_bias_add_cudnn_leaves_out(torch_cells):
    reg = torch_cells[("conv2d", "forward")].gpu[0]
    assert any(k.startswith("CUDA:") and "cudnn" not in k for k in reg.kernels[1:]), reg.kernels


@pytest.fixture(scope="module")
def jax_programs(frameworks, tmp_path) -> dict[str, dict[str, dict[str, list[str]]]]:
    """primitive -> pass -> the probe's recorded XLA:cpu instructions and those of the
    programs XLA compiled while the step ran (its own dump)."""
    fw = frameworks["jax"]
    assert envs.status(fw).ready, "jax: environment not set up (dltrace env setup jax)"
    dump = tmp_path / "xla-dump"
    proc = subprocess.run([str(envs.python_for(fw)), str(ROOT / "tests" / "jax_step_programs.py"), str(dump),
                           "cpu", *PRIMITIVES], capture_output=True, text=True, timeout=600, env=runner_env(fw),
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def tmp_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jax-programs")


def test_jax_op_layer_is_the_program_each_pass_runs(jax_programs):
    for prim in PRIMITIVES:
        for pass_ in PRIMITIVES[prim].passes:
            got = jax_programs[prim][pass_]
            assert got["ran"], (prim, pass_, "XLA compiled nothing while the step ran")
            assert got["recorded"] == got["ran"], (prim, pass_, got)


def test_jax_conv_backward_computes_both_gradients_with_its_residuals(jax_programs):
    # the constant-folded pullback had one convolution: the weight folded in
    assert jax_programs["conv2d"]["backward"]["recorded"].count("convolution") == 2


@pytest.fixture(scope="module")
def jax_compiled(frameworks, tmp_path_factory) -> Trace:
    fw = frameworks["jax"]
    (res,) = derive(fw, ["conv2d"], tmp_path_factory.mktemp("compiled"), ("functional",))
    assert res.error is None, res.error
    return res.load()


def test_jax_compiled_conv_names_cudnn_calls_and_counts(jax_compiled):
    assert jax_compiled.info.evidence == "compiled"
    (fwd, bwd) = [c for c in gpu_cells([jax_compiled], k=K) if c.primitive == "conv2d"]
    for cell, target in ((fwd, "custom-call:__cudnn$conv"), (bwd, "custom-call:__cudnn$convBackward")):
        (e,) = cell.gpu
        assert e.kernels[0].startswith(target) and e.library == "cuDNN", e
        assert not any(k.startswith(("cuda:", "rocm:")) for k in e.kernels), e.kernels  # lowering is no kernel
        assert e.op == "conv_general_dilated", e
    # both gradients of the step: backward input and backward filter
    run = jax_compiled.run("backward", "warm")
    assert run is not None
    xla = [n for n in run.layers["op"].children if n.frame.name.startswith("XLA:cuda")][0]
    calls = {(p.frame.name, c.frame.name) for p in xla.children for c in p.children}
    assert {("conv_general_dilated", "custom-call:__cudnn$convBackwardInput"),
            ("conv_general_dilated", "custom-call:__cudnn$convBackwardFilter")} <= calls, calls
    counts = [c.count for p in xla.children for c in p.children]
    assert sum(counts) > len(counts), calls  # an instruction the program runs twice reads x2


def test_recorded_jax_cells_name_their_op_and_cudnn(traces):
    cells = gpu_cells(traces["jax"], k=K)
    assert cells and all(c.strongest is not None and c.strongest.evidence == "recorded" for c in cells)
    assert all(c.strongest.op for c in cells if c.strongest), [(c.primitive, c.pass_) for c in cells
                                                               if c.strongest and not c.strongest.op]
    for pass_ in PASSES:
        conv = next(c for c in cells if (c.primitive, c.pass_) == ("conv2d", pass_)).strongest
        assert conv is not None and conv.library == "cuDNN" and "__cudnn$conv" in conv.kernel, conv
        assert conv.op == "conv_general_dilated", conv


def test_recorded_jax_backward_runs_cudnns_backward_calls(traces):
    """The recording's op layer is the program the step ran: the same backward calls
    cuDNN logged (convolution_backward_data and _filter), not a folded forward conv."""
    (t,) = [t for t in traces["jax"] if t.info.device == "gpu" and t.info.primitive == "conv2d"
            and t.info.variant == "default" and len(t.info.shape) == 4 and t.info.shape[0] == 2]
    run = t.run("backward", "warm")
    assert run is not None
    ops = {n.frame.name for _, n in run.layers["op"].walk()}
    assert {"custom-call:__cudnn$convBackwardInput", "custom-call:__cudnn$convBackwardFilter"} <= ops, ops
    assert "custom-call:__cudnn$convForward" not in ops
    logged = [n.frame.name for n in run.layers["library"].children]
    assert any("convolution_backward_data" in x for x in logged) and any("backward_filter" in x for x in logged)


@pytest.mark.parametrize("framework, primitive, pass_, op, library", [
    ("torch", "conv2d", "forward", "aten::cudnn_convolution", "cuDNN"),
    ("torch", "dense", "forward", "aten::addmm", "cuBLAS"),  # cuBLASLt's nvjet kernels on the H100
    # in bfloat16, _batch_norm_impl_index leaves cuDNN for torch's own kernel (float32 takes cuDNN)
    ("torch", "batchnorm", "forward", "aten::native_batch_norm", "PyTorch CUDA kernels"),
    ("jax", "conv2d", "backward", "conv_general_dilated", "cuDNN"),
])
def test_the_recorded_bf16_pass_is_in_the_gpu_cells(traces, framework, primitive, pass_, op, library):
    cell = next(c for c in gpu_cells(traces[framework], k=K) if (c.primitive, c.pass_) == (primitive, pass_))
    bf16 = [e for e in cell.gpu if "bf16" in e.label.split(", ")[-1]]
    assert bf16 and bf16[0].evidence == "recorded", [e.label for e in cell.gpu]
    assert bf16[0].op == op and bf16[0].library == library, bf16[0]
    assert cell.gpu[0].label.split(", ")[0] == "gpu"  # the float32 recording first
