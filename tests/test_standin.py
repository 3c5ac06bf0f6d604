"""The porting dry-run: torch on the stand-in device (PrivateUse1 played by a Python
fallback on this CPU, tracer/probes/torch_standin.py). One session-scoped run of every
primitive, both API levels, forward and backward, on the stand-in device and on
the CPU, through the same engine as `dltrace survey`; the tests read its traces."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer import envs
from tracer import survey as sv
from tracer.contract import PRIMITIVES, STANDIN_LIB, Exit
from tracer.evidence_classes import EVIDENCE
from tracer.processing.diff import diff_traces
from tracer.analysis.portability import framework_report
from tracer.knowledge import knowledge
from tracer.trace import load

K = knowledge()

#: One op each primitive's kernels must cover on a new backend, forward and backward
#: (the structured ops' .out overloads: torch's generated wrapper computes the
#: functional op through them on a backend without its own).
KNOWN = {
    "dense": ("aten::addmm.out", "aten::mm.out"),
    "conv2d": ("aten::convolution_overrideable", "aten::convolution_backward_overrideable"),
    "relu": ("aten::relu", "aten::threshold_backward.grad_input"),
    "sigmoid": ("aten::sigmoid.out", "aten::sigmoid_backward.grad_input"),
    "tanh": ("aten::tanh.out", "aten::tanh_backward.grad_input"),
    "softmax": ("aten::_softmax.out", "aten::_softmax_backward_data.out"),
    "maxpool2d": ("aten::max_pool2d_with_indices.out", "aten::max_pool2d_with_indices_backward.grad_input"),
    "avgpool2d": ("aten::avg_pool2d.out", "aten::avg_pool2d_backward.grad_input"),
    "batchnorm": ("aten::native_batch_norm", "aten::native_batch_norm_backward"),
    # native_layer_norm's composite for a backend without its own kernel (math_native_layer_norm)
    "layernorm": ("aten::native_batch_norm", "aten::native_layer_norm_backward"),
    "gelu": ("aten::gelu.out", "aten::gelu_backward.grad_input"),
    # SDPA's choice for a new backend is the math composite: matmuls and a softmax
    "attention": ("aten::bmm.out", "aten::_softmax_backward_data.out"),
    "embedding": ("aten::index_select", "aten::embedding_dense_backward"),
    "crossentropy": ("aten::nll_loss_forward.output", "aten::nll_loss_backward.grad_input"),
    # an optimizer step has no backward; the foreach ops' composites hand the backend per-tensor ops
    "adam": ("aten::addcdiv.out", None),
}
GPU_EVIDENCE = set(EVIDENCE)


@pytest.fixture(scope="session")
def standin_root(frameworks, tmp_path_factory) -> Path:
    """torch on the stand-in device and on the CPU (default variant), every primitive."""
    root = tmp_path_factory.mktemp("standin")
    gaps = sv.run(sv.plan([frameworks["torch"]], devices=("cpu", "standin"), variants=False), root, workers=2,
                  timeout=900)
    assert not gaps, [f"{g.device} {g.primitive} {g.api}: {g.error}" for g in gaps]
    return root


def _trace(root: Path, device: str, primitive: str, api: str = "functional"):
    return load(root / "traces" / "torch" / f"{device}-default" / f"{primitive}-{api}.json")


@pytest.mark.parametrize("api", ["functional", "layer"])
@pytest.mark.parametrize("primitive", list(PRIMITIVES))
def test_every_primitive_runs_forward_and_backward_on_the_standin(standin_root, primitive, api):
    t = _trace(standin_root, "standin", primitive, api)
    assert t.meta["device"] == "standin" and t.meta["device_type"] == "standin"
    # a run on this CPU, never labelled a GPU
    assert t.meta.get("evidence") not in GPU_EVIDENCE
    assert t.meta["standin"]["evidence"] == "run on the stand-in device"
    reached = t.meta["standin"]["reached"]
    forward, backward = KNOWN[primitive]
    assert forward in reached["forward"], reached
    assert backward in reached["backward"] if backward else "backward" not in reached, reached
    # the inputs and parameters got there through the backend's own copy and allocation
    assert {"aten::empty_strided", "aten::_copy_from"} <= set(reached["setup"])
    for pass_ in PRIMITIVES[primitive].passes:
        run = t.run(pass_, "warm")
        leaves = [n.frame.name for _, n in run.layers["op"].walk() if n.frame.lib == STANDIN_LIB]
        assert sorted(set(leaves)) == sorted(set(reached[pass_])), (pass_, leaves, reached[pass_])


def test_ops_that_decompose_never_reach_the_backend(standin_root):
    # the list is exactly what a backend must write: torch decomposes
    # CompositeImplicitAutograd ops (conv2d, linear, batch_norm) before any backend
    for prim in PRIMITIVES:
        t = _trace(standin_root, "standin", prim)
        table = t.meta["dispatch"]["ops"]
        reached = {op for ops in t.meta["standin"]["reached"].values() for op in ops}
        assert not reached & {"aten::conv2d", "aten::linear", "aten::batch_norm", "aten::_convolution"}
        for op in reached:
            row = table.get(op) or table.get(op.split(".")[0]) or {}
            assert "CompositeImplicitAutograd" not in row.get("kernels", []), (prim, op, row)


def test_standin_computes_what_the_cpu_computes(frameworks):
    """The stand-in's values are CPU's: conv2d forward and backward agree exactly."""
    script = (
        "import torch, torch.nn.functional as F\n"
        "from tracer.probes import torch_standin as s\n"
        "dev = s.install()\n"
        "torch.manual_seed(0)\n"
        "xs = [torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)]\n"
        "a = [x.clone().requires_grad_() for x in xs]\n"
        "b = [x.to(dev).requires_grad_() for x in xs]\n"
        "ya, yb = F.conv2d(*a, padding=1), F.conv2d(*b, padding=1)\n"
        "ya.sum().backward(); yb.sum().backward()\n"
        "assert yb.device.type == 'standin'\n"
        "assert torch.equal(ya, yb.cpu()), 'forward'\n"
        "assert all(torch.equal(p.grad, q.grad.cpu()) for p, q in zip(a, b)), 'backward'\n"
        "print('same')\n"
        "from tracer.contract import leave\n"
        "leave(0)  # as a probe and a check end: torch 2.13 can abort in its teardown after a device's backward\n")
    proc = subprocess.run([str(envs.python_for(frameworks["torch"])), "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "same", proc.stderr


def test_diff_against_the_cpu_splits_at_convolution(standin_root):
    cpu, standin = _trace(standin_root, "cpu", "conv2d"), _trace(standin_root, "standin", "conv2d")
    result = diff_traces(cpu, standin, "forward", "warm", ("op",), 0.02, False, k=K)
    (split,) = result.layers[0].splits
    assert split.frame == "aten::_convolution"
    assert split.classification == "device dispatch"
    assert [n.label for n in split.only_b] == ["aten::convolution_overrideable"]
    assert "aten::mkldnn_convolution" in [n.label for n in split.only_a]


def test_the_standins_own_python_is_no_dispatch_point(standin_root):
    """Below the C hand-off the stand-in side runs its Python fallback (storage twins,
    record_function): its implementation, kept in the diff as such, never a row of the
    dispatch table; the op layer's split at _convolution is the row."""
    from tracer.processing.diff.context import STANDIN_IMPLEMENTATION
    from tracer.analysis.portability import framework_report

    cpu, standin = _trace(standin_root, "cpu", "conv2d"), _trace(standin_root, "standin", "conv2d")
    python = diff_traces(cpu, standin, "forward", "warm", ("python",), 0.02, False, k=K).layers[0]
    assert python.splits, "the fallback's Python is no longer seen below the C hand-off"
    assert {s.classification for s in python.splits} == {STANDIN_IMPLEMENTATION}
    assert all(s.kind == "c" and not s.only_a for s in python.splits)
    rows = framework_report("torch", [cpu, standin], [], k=K).dispatch_points
    assert [(r.layer, r.display) for r in rows if r.layer == "python"] == []
    assert any(r.layer == "op" and r.frame == "aten::_convolution" and r.classification == "device dispatch"
               for r in rows), [(r.layer, r.frame) for r in rows]
    # relu reaches the backend as relu itself, where CPU's relu calls clamp_min: a device dispatch
    cpu, standin = _trace(standin_root, "cpu", "relu"), _trace(standin_root, "standin", "relu")
    rows = framework_report("torch", [cpu, standin], [], k=K).dispatch_points
    assert ("aten::relu", "device dispatch") in [(r.frame, r.classification) for r in rows if r.layer == "op"]
    assert all(r.classification == "device dispatch" for r in rows), [(r.frame, r.classification) for r in rows]


def test_the_scorecard_counts_what_reached_the_standin(standin_root):
    """The run is the strongest list: the scorecard counts it, and it names the ops torch
    routes only to a new backend, which the dispatch tables read as free."""
    from tracer.analysis.portability import framework_report
    from tracer.analysis.scorecard import scorecard

    traces = [load(p) for p in sorted((standin_root / "traces" / "torch").glob("*/*.json"))]
    (row,) = scorecard([framework_report("torch", traces, [], k=K)], traces, None, K)
    must = row.figures["implement"]
    assert f"run on the standin device: {len(PRIMITIVES)} primitive(s)" in must.explain and not must.thin, \
        (must.explain, must.thin)
    ran = {op for t in traces if t.meta["device"] == "standin" for ops in t.meta["standin"]["reached"].values()
           for op in ops}
    assert int(must.value) == len(ran), (must.value, sorted(ran))
    assert "aten::convolution_overrideable" in ran and "aten::convolution_backward_overrideable" in ran


def test_audit_sets_the_run_beside_the_tables(standin_root):
    traces = [load(p) for p in sorted((standin_root / "traces" / "torch").glob("*/*.json"))]
    rows = {r.primitive: r for r in framework_report("torch", traces, [], k=K).audit}
    conv = rows["conv2d"].standin
    assert conv.by_pass["forward"] == ["aten::convolution_overrideable"]
    assert conv.by_pass["backward"] == ["aten::convolution_backward_overrideable"]
    # what it gets for free: the ops above, which torch decomposes or computes with its own kernel
    assert {"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::convolution_backward"} <= set(conv.free)
    why = {d.op: d for d in conv.differences}
    # the tables read the CPU path: they miss what torch routes only to new backends...
    assert why["aten::convolution_overrideable"].side == "run only"
    assert "only to new backends" in why["aten::convolution_overrideable"].why
    # ...and list what CPU's oneDNN path calls below _convolution
    assert why["aten::resize_"].side == "tables only"
    assert "aten::convolution_overrideable" in why["aten::resize_"].why
    # relu's CPU kernel calls clamp_min itself: no concern of a backend that has relu
    relu = {d.op: d for d in rows["relu"].standin.differences}
    assert relu["aten::clamp_min.out"].side == "tables only" and "aten::relu" in relu["aten::clamp_min.out"].why
    for row in rows.values():
        assert row.standin.evidence == "run on the stand-in device"
        assert all(d.why for d in row.standin.differences)
        one_list = set(row.standin.must_implement) ^ set(row.needs.must_implement)
        assert one_list == {d.op for d in row.standin.differences}


def test_audit_command_prints_the_run(standin_root):
    proc = dltrace("audit", "torch", "--traces", str(standin_root / "traces"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "run on the stand-in device" in proc.stdout
    assert "aten::convolution_backward_overrideable" in proc.stdout
    assert "Why the run and the tables differ" in proc.stdout


def test_standin_is_torchs_tensorflows_and_jaxs_alone():
    for framework in ("chainer", "mxnet"):
        line = one_line_error(dltrace("probe", framework, "relu", "--device", "standin"), Exit.USAGE)
        assert "standin" in line and "cpu" in line


def test_report_shows_the_run_beside_the_tables(standin_root, tmp_path):
    proc = dltrace("report", str(standin_root / "traces"), "-o", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "report" / "torch.html").read_text()
    table = page[page.index('id="standin-table"'):]
    table = table[:table.index("</table>")]
    assert "<code>aten::convolution_backward_overrideable</code>" in table
    assert "run on the stand-in device" in page and "only to new backends" in table


def test_standin_traces_stop_at_the_op_layer(standin_root):
    # below the op layer is the stand-in's own CPU computation (oneDNN...), not a backend's
    t = _trace(standin_root, "standin", "conv2d")
    assert all(set(r.layers) <= {"python", "op"} for r in t.runs)
    line = one_line_error(dltrace("probe", "torch", "relu", "--device", "standin", "--layers", "python,library"),
                          Exit.USAGE)
    assert "python and op layers only" in line


def test_a_pass_that_fails_on_the_standin_fails_the_probe_naming_it(frameworks, tmp_path):
    """No list without its backward: the probe exits 1 naming the pass and the reason."""
    workload = Path(__file__).parent / "workloads" / "torch_standin_fails_backward.py"
    line = one_line_error(dltrace("probe", "torch", "--workload", str(workload), "--device", "standin",
                                  "--layers", "op", "-o", str(tmp_path / "t.json")), Exit.ERROR)
    assert "standin" in line and "running backward(loss): RuntimeError: this op has no kernel" in line, line
    assert not (tmp_path / "t.json").exists()
