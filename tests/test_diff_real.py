"""The diff engine on real traces from the session survey: the oneDNN switches of
torch, TensorFlow and MXNet, JAX's jit switch, Chainer's device branch from one
trace, and no split between a trace and itself."""

from __future__ import annotations

import json

import pytest

from tests.conftest import dltrace
from tracer.processing.candidates import find_candidates
from tracer.processing.cpu_kernel import computes
from tracer.knowledge import knowledge
from tracer.processing.diff import diff_traces

K = knowledge()


def load(results, key):
    res = results[key]
    assert res.error is None, f"{key}: {res.error}"
    return res.load()


def first_splits(result, layer):
    (ld,) = [d for d in result.layers if d.layer == layer]
    return ld.splits


def all_splits(result, layer):
    (ld,) = [d for d in result.layers if d.layer == layer]
    return [s for _, s in ld.all_splits()]


def side_names(split):
    return {b.label for b in split.only_a}, {b.label for b in split.only_b}


def test_torch_onednn_split_names_the_kernels(native_traces):
    a, b = load(native_traces, ("torch", "default")), load(native_traces, ("torch", "onednn-off"))
    result = diff_traces(a, b, k=K)
    assert first_splits(result, "python") == []  # F.conv2d is one C call on both sides
    (split,) = first_splits(result, "op")
    assert split.frame == "aten::_convolution"
    only_a, only_b = side_names(split)
    assert "aten::mkldnn_convolution" in only_a and "aten::thnn_conv2d" in only_b
    assert split.classification == "library choice"
    # what the libraries say they ran: oneDNN's convolution on one side, MKL's gemm on the other
    (lib,) = first_splits(result, "library")
    assert any(b.label.startswith("convolution ") and b.library == "oneDNN" for b in lib.only_a)
    assert any(b.label == "SGEMM" and b.library == "MKL" for b in lib.only_b)
    assert lib.classification == "library choice"
    # the op layer names the decision: the native differences follow from it, none is listed
    (native,) = [d for d in result.layers if d.layer == "native"]
    assert native.splits == [] and native.consequences + native.unreplicated >= 1


def test_mxnet_onednn_split_is_below_python(native_traces):
    a, b = load(native_traces, ("mxnet", "default")), load(native_traces, ("mxnet", "onednn-off"))
    result = diff_traces(a, b, k=K)
    assert first_splits(result, "python") == []  # the same ctypes call on both sides
    # MKL-DNN reports its convolution on one side only
    (lib,) = first_splits(result, "library")
    assert any(b.label.startswith("convolution ") and b.library == "oneDNN" for b in lib.only_a) and not lib.only_b
    native = all_splits(result, "native")
    assert native, "the MKL-DNN switch acts inside libmxnet: the native layer must show it"
    reached_a = {lib for s in native for br in s.only_a for lib in br.libraries}
    reached_b = {lib for s in native for br in s.only_b for lib in br.libraries}
    assert "oneDNN" in reached_a and "oneDNN" not in reached_b, (reached_a, reached_b)


def test_tensorflow_onednn_split(native_traces):
    default = load(native_traces, ("tensorflow", "default"))
    on = default if default.meta["onednn_enabled"] else load(native_traces, ("tensorflow", "onednn-on"))
    off = load(native_traces, ("tensorflow", "onednn-off"))
    result = diff_traces(on, off, k=K)
    # oneDNN's own convolution on the oneDNN path; on the Eigen path, the gemm Eigen's contraction calls
    (lib,) = first_splits(result, "library")
    assert any(b.label.startswith("convolution ") for b in lib.only_a)
    assert lib.only_b and all(b.label.startswith("gemm") for b in lib.only_b)
    assert lib.classification == "library choice"
    native = all_splits(result, "native")
    assert native
    # Most of TF's kernel samples end in oneDNN's JIT code (unwinding stops there), so
    # they hang under the Python op wrapper, named from oneDNN's perf map: the oneDNN
    # path's conv kernel on one side.
    conv = [(s, a) for s in native for a in s.only_a if "oneDNN" in a.libraries and a.label.startswith("jit_")]
    assert conv, [(s.frame, side_names(s)) for s in native]
    split, a = conv[0]
    assert split.frame.startswith("tensorflow.python.ops.gen_nn_ops.")
    # On the other, the Eigen path: the gemm its contraction calls (TF builds it on
    # oneDNN's sgemm JIT code) at the same split, or, where too few of those samples
    # fell in both halves of the sampling to replicate (an AVX-512 CPU runs that gemm
    # fast), Eigen's own Conv2DOp that the rest of its samples unwound through: a
    # sample count decides which, never the side.
    eigen = [b for s in native for b in s.only_b if b.label.startswith("jit_") or "Eigen" in b.libraries]
    assert eigen, [(s.frame, side_names(s)) for s in native]
    assert all(b.label != a.label for b in eigen)


def test_jax_jit_split_is_in_python_and_named(cpu_traces):
    a = load(cpu_traces, ("jax", "default", "conv2d", "functional"))
    b = load(cpu_traces, ("jax", "nojit", "conv2d", "functional"))
    result = diff_traces(a, b, k=K)
    first = first_splits(result, "python")[0]
    assert first.frame == "jax._src.interpreters.ad.linearize"
    assert first.classification == "compilation"
    only_a, only_b = side_names(first)
    assert any("conv_general_dilated" in n for n in only_b)
    (fragment,) = [f for f in first.fragments if f.kind == "source"]
    assert fragment.decision_line is not None
    # and the op layer: the compiled HLO on one side only
    assert first_splits(result, "op")


def test_chainer_single_trace_names_the_device_branch(cpu_traces):
    t = load(cpu_traces, ("chainer", "default", "conv2d", "functional"))
    cands = find_candidates(t)
    branch = next(c for c in cands if c.function.endswith("FunctionNode.forward") and "cuda" in c.condition)
    taken = {call for arm in branch.arms if arm.ran for call in arm.calls}
    untaken = {call for arm in branch.arms if arm.ran is False for call in arm.calls}
    assert any(c.endswith("forward_cpu") for c in taken) and any(c.endswith("forward_gpu") for c in untaken)


def _onednn_pair(native_traces, fw):
    """The framework's oneDNN path and the path without it (TensorFlow's default may be either)."""
    default = load(native_traces, (fw, "default"))
    if fw == "tensorflow" and not default.meta["onednn_enabled"]:
        default = load(native_traces, (fw, "onednn-on"))
    return default, load(native_traces, (fw, "onednn-off"))


def reaches_only_what_computes(a, b):
    """Every name a native split's "reaches" lists is a frame the kernel cells' rule
    (cpu_kernel.computes) says computes: never a helper (write, a refcount, a log
    check, the engine's push lambda) or unnamed code; the lists that remain name the
    kernels. Returns what each side reaches, for the caller's own checks."""
    frames: dict[str, list] = {}
    for t in (a, b):
        for run in t.runs:
            if "native" in run.layers:
                for _, node in run.layers["native"].walk():
                    frames.setdefault(node.frame.label, []).append(node.frame)
    reached: dict[str, set[str]] = {"A": set(), "B": set()}
    for pass_ in ("forward", "backward"):
        native = [d for d in diff_traces(a, b, pass_=pass_, k=K).layers if d.layer == "native"]
        for layer in native:
            for _, split in layer.all_splits():
                for side, branches in (("A", split.only_a), ("B", split.only_b)):
                    for br in branches:
                        helpers = [h for h in br.hot if not any(computes(f, K) for f in frames.get(h, []))]
                        assert not helpers, f"{split.frame} {side} only {br.label}: reaches helpers {helpers}"
                        reached[side].update(br.hot)
    return reached


@pytest.mark.parametrize("fw", ["mxnet", "tensorflow"])
def test_a_diffs_reaches_lists_name_only_frames_that_compute(native_traces, fw):
    """MXNet's conv2d, default against onednn-off, said "reaches: [unknown], write,
    std::_Sp_counted_base<, dmlc::LogCheck_GE<int>, Engine::PushSync (lambda)" where
    oneDNN's convolution computed (issue 60)."""
    reached = reaches_only_what_computes(*_onednn_pair(native_traces, fw))
    assert reached["A"] and reached["B"], reached
    if fw == "mxnet":  # the oneDNN convolution on one side, the gemm path's on the other
        assert any("MKLDNNConvolution" in h for h in reached["A"]), reached
        assert any("ConvolutionOp" in h or "sgemm" in h for h in reached["B"]), reached


@pytest.mark.parametrize("fw", ["torch", "mxnet", "tensorflow"])
def test_a_trace_against_itself_has_no_split(native_traces, fw):
    t = load(native_traces, (fw, "default"))
    for pass_ in ("forward", "backward"):
        assert all(not ld.splits for ld in diff_traces(t, t, pass_=pass_, k=K).layers)


def test_cli_diff_json_and_mismatch(native_traces, cpu_traces):
    a, b = native_traces[("torch", "default")].path, native_traces[("torch", "onednn-off")].path
    proc = dltrace("diff", str(a), str(b), "--json", "--layer", "op")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (op,) = doc["layers"]
    assert op["splits"][0]["frame"] == "aten::_convolution"
    other = cpu_traces[("mxnet", "default", "conv2d", "functional")].path
    proc = dltrace("diff", str(a), str(other))
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("dltrace: error: the traces are of different frameworks")
