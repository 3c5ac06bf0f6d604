"""The op and native layers on the real frameworks (CPU), from the session survey:
each framework's own op path for conv2d, the native kernel that computed it, and
the kernels the oneDNN-off variants reach instead."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from tests.conftest import dltrace
from tracer.contract import LAYERS, workload_passes
from tracer.processing.tags import library_of
from tracer.runner import CaseSpec, run_probe
from tracer.knowledge import knowledge
from tracer.trace import Frame

K = knowledge()

FRAMEWORKS = ["torch", "tensorflow", "chainer", "mxnet", "jax"]


def load(results, key):
    res = results[key]
    assert res.error is None, f"{key}: {res.error}\n{res.detail}"
    return res.load()


def op_names(tree):
    return {n.frame.name for _, n in tree.walk() if n.frame.kind == "op"}


def native_frames(trace, passes=("forward", "backward")):
    """(frame, samples) of every native node of the warm runs."""
    out = []
    for pass_ in passes:
        tree = trace.layer(pass_, "native")
        assert tree is not None, (pass_, trace.run(pass_).stats.get("native_error"))
        out += [(n.frame, n.count) for _, n in tree.walk() if n.frame.kind == "native"]
    return out


def samples_in(trace, pattern, passes=("forward", "backward")):
    """Samples that passed through a native frame whose symbol matches ``pattern``."""
    rx = re.compile(pattern)

    def reach(node):
        return sum(c.count if c.frame.kind == "native" and rx.search(c.frame.name) else reach(c) for c in node.children)

    return sum(reach(trace.layer(p, "native")) for p in passes)


# ----------------------------------------------------------------------------- op layer


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_case_has_an_op_layer(cpu_traces, fw):
    for (name, variant, primitive, api) in cpu_traces:
        if name == fw:
            t = load(cpu_traces, (fw, variant, primitive, api))
            for pass_ in workload_passes(primitive):  # an optimizer step: its update alone
                run = t.run(pass_, "warm")
                assert "op_error" not in run.stats, (variant, primitive, api, pass_, run.stats["op_error"])
                tree = run.layers["op"]
                assert tree.frame.name == f"{primitive}.{pass_}" and op_names(tree), (variant, primitive, api, pass_)
                assert run.stats["layers"]["op"]["source"]


EXPECTED_OPS = {  # (forward, backward): ops each framework's own instrumentation names for conv2d
    "torch": ({"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"},
              {"aten::convolution_backward"}),
    "tensorflow": ({"Conv2D", "BiasAdd"}, {"Conv2DBackpropInput", "Conv2DBackpropFilter", "BiasAddGrad"}),
    "mxnet": ({"Convolution"}, {"_backward_Convolution"}),
    "jax": ({"conv_general_dilated", "XLA:cpu", "convolution"}, {"conv_general_dilated", "convolution"}),
    "chainer": ({"Convolution2DFunction.forward"}, {"Convolution2DFunction.backward", "Convolution2DGradW.forward"}),
}


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_conv2d_op_path(cpu_traces, fw):
    t = load(cpu_traces, (fw, "default", "conv2d", "functional"))
    fwd, bwd = (op_names(t.layer(p, "op")) for p in ("forward", "backward"))
    assert EXPECTED_OPS[fw][0] <= fwd, sorted(fwd)
    assert EXPECTED_OPS[fw][1] <= bwd, sorted(bwd)


def test_torch_op_path_nests_the_dispatcher_chain(cpu_traces):
    tree = load(cpu_traces, ("torch", "default", "conv2d", "functional")).layer("forward", "op")
    chain, node = [], tree
    while node.children:
        node = max(node.children, key=lambda c: c.size())  # the deepest branch: the dispatch chain
        chain.append(node.frame.name)
    assert chain[:4] == ["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"]


def test_torch_default_shape_picks_onednn_and_onednn_off_the_slow_path(cpu_traces):
    # The default 2x3x8x8 already goes to oneDNN; with it off, to THNN's im2col + gemm.
    on = op_names(load(cpu_traces, ("torch", "default", "conv2d", "functional")).layer("forward", "op"))
    off_t = load(cpu_traces, ("torch", "onednn-off", "conv2d", "functional"))
    off = op_names(off_t.layer("forward", "op"))
    assert "aten::mkldnn_convolution" in on and "aten::mkldnn_convolution" not in off
    assert {"aten::thnn_conv2d", "aten::_slow_conv2d_forward"} <= off
    assert "aten::_slow_conv2d_backward" in op_names(off_t.layer("backward", "op"))


def test_jax_op_layer_names_platform_and_compiled_hlo(cpu_traces):
    t = load(cpu_traces, ("jax", "default", "conv2d", "functional"))
    run = t.run("forward", "warm")
    assert run.stats["layers"]["op"]["platform"] == "cpu"
    (xla,) = [c for c in run.layers["op"].children if c.frame.name == "XLA:cpu"]
    assert {c.frame.name for c in xla.children} >= {"convolution"}
    assert all(c.frame.module == "xla" and c.frame.lib == "XLA" for c in xla.children)


# ----------------------------------------------------------------------------- native layer


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_native_layer_is_recorded_with_its_stats(native_traces, frameworks, fw):
    t = load(native_traces, (fw, "default"))
    assert t.meta["native"]["startup_s"] > 0 and "error" not in t.meta["native"]
    assert t.meta.get("native_env", {}) == frameworks[fw].native.env
    for pass_ in ("forward", "backward"):
        run = t.run(pass_, "warm")
        st = run.stats["layers"]["native"]
        assert st["sampled"] is True and st["rate"] == frameworks[fw].native.rate
        assert st["samples"] > 0 and st["samples"] == run.layers["native"].count
        # unwinding errors are counted by kind, and the count is their sum (torch: none; TensorFlow, JAX: many)
        assert type(st["errors"]) is int and st["errors"] == sum(st["error_kinds"].values())
        assert all(type(n) is int and n > 0 for n in st["error_kinds"].values())
        assert st["duration_s"] >= frameworks[fw].native.seconds and st["slowdown"] > 0
        tree = run.layers["native"]
        assert tree.frame.name == f"conv2d.{pass_}"
        # dltrace's own frames (the loop, the probe) are never in the tree
        assert not any(n.frame.module.startswith(("tracer.", "probes.")) for _, n in tree.walk())
        # native frames name their shared object, never a path
        libs = {n.frame.lib for _, n in tree.walk() if n.frame.kind == "native"}
        assert libs and not any("/" in lib for lib in libs)


def test_torch_native_kernel_is_onednn(native_traces):
    t = load(native_traces, ("torch", "default"))
    frames = native_frames(t)
    names = {f.name for f, _ in frames}
    assert "at::native::mkldnn_convolution" in names
    kernel = [(f, n) for f, n in frames if re.match(r"dnnl::impl::cpu::\w+::\w*convolution\w*_t::execute", f.name)]
    assert all(f.lib == "libtorch_cpu.so" and library_of(f, k=K) == "oneDNN" for f, _ in kernel)
    # oneDNN's generated code is kept and named from the perf map oneDNN writes when asked
    # (which kernels are sampled varies: jit_t, jit_avx2_conv_bwd_weights_kernel_f32_t...)
    jit = {f.name for f, _ in frames if f.lib == "[jit]"}
    assert any(name.startswith("jit_") for name in jit), jit
    # the convolution ran in oneDNN: its primitive's execute in libtorch_cpu.so, or its generated
    # convolution kernel (a second's samples in the JIT code do not always unwind to execute)
    assert kernel or any(name.startswith("jit_") and "conv" in name for name in jit), (sorted(names)[:50], jit)
    assert all(library_of(Frame("native", "", n, lib="[jit]"), k=K) == "oneDNN" for n in jit if n.startswith("jit_"))
    assert t.meta["native"]["jit_named"] > 0


def test_mxnet_native_kernel_is_mkldnn_under_naive_engine(native_traces):
    t = load(native_traces, ("mxnet", "default"))
    assert t.meta["native_env"] == {"MXNET_ENGINE_TYPE": "NaiveEngine"}
    frames = native_frames(t)
    names = {f.name for f, _ in frames}
    assert {"mxnet::op::MKLDNNConvolutionForward", "mxnet::engine::NaiveEngine::PushAsync"} <= names
    assert {f.lib for f, _ in frames if "MKLDNN" in f.name} == {"libmxnet.so"}
    # MXNet links MKL-DNN statically with its symbols stripped: below MXNet's own
    # MKLDNN* wrappers the frames are unnamed addresses in libmxnet.so, then oneDNN's JIT code
    assert samples_in(t, r"MKLDNNConvolution(Forward|Backward)") > 0
    assert any(f.name == "[unknown]" and f.lib == "libmxnet.so" for f, _ in frames)
    assert sum(run.stats["layers"]["native"]["jit_samples"] for run in t.runs if run.phase == "warm") > 0


def test_tensorflow_native_kernel_is_named(native_traces):
    # On CPUs without AVX512-VNNI-class features TF's default is the Eigen path; its
    # contraction's gemm is oneDNN's sgemm (TF builds Eigen with it).
    t = load(native_traces, ("tensorflow", "default"))
    frames = native_frames(t)
    kernels = [(f, n) for f, n in frames
               if library_of(f, K) in ("Eigen", "oneDNN") or re.search(r"Conv2D\w*Op<", f.name)]
    assert kernels, sorted({f.name for f, _ in frames})[:80]
    assert any(f.lib.startswith("libtensorflow") for f, _ in kernels)


def test_onednn_off_reaches_other_kernels_torch(native_traces):
    on, off = load(native_traces, ("torch", "default")), load(native_traces, ("torch", "onednn-off"))
    # oneDNN's code (dnnl::, ideep::) never runs with it off; torch's own gemm still
    # asks at::native::mkldnn_gemm<float> whether to use it (seen in 1 of 70 samples)
    assert samples_in(on, r"mkldnn_convolution") > 0 and samples_in(off, r"dnnl::|ideep::|mkldnn_convolution") == 0
    assert samples_in(off, r"at::native::.*slow_conv2d") > 0
    assert "aten::_slow_conv2d_forward" in op_names(off.layer("forward", "op"))


def test_onednn_off_reaches_other_kernels_mxnet(native_traces):
    on, off = load(native_traces, ("mxnet", "default")), load(native_traces, ("mxnet", "onednn-off"))
    # (MXNet decides in mxnet::MKLDNNStorageType, which runs either way: only the compute frames differ)
    mkldnn_compute = r"MKLDNN(Run|Stream|Convolution)|dnnl::|mkldnn::"
    assert samples_in(on, mkldnn_compute) > 0 and samples_in(off, mkldnn_compute) == 0
    # without MKL-DNN the mshadow/FCompute convolution: im2col and a BLAS gemm
    off_frames = native_frames(off)
    assert any(re.search(r"ConvolutionOp<|ConvolutionCompute|im2col", f.name) for f, _ in off_frames)
    assert any(library_of(f, k=K) in ("OpenBLAS", "BLAS", "MKL", "mshadow") for f, _ in off_frames)


def test_onednn_off_reaches_other_kernels_tensorflow(native_traces, cpu_traces):
    default = load(native_traces, ("tensorflow", "default"))
    # TF enables oneDNN by default only on CPUs with AVX512-VNNI/BF16/AMX-class features:
    # where it left it off, compare forcing it on against forcing it off.
    on_key = ("tensorflow", "default") if default.meta["onednn_enabled"] else ("tensorflow", "onednn-on")
    on, off = load(native_traces, on_key), load(native_traces, ("tensorflow", "onednn-off"))
    assert on.meta["onednn_enabled"] is True and off.meta["onednn_enabled"] is False
    assert samples_in(on, r"Mkl\w*Conv|_MklNative|jit_\w*conv") > 0
    assert samples_in(off, r"Mkl\w*Conv|_MklNative|jit_\w*conv") == 0
    assert samples_in(off, r"Conv2D\w*Op<|Eigen::|sgemm") > 0


def test_native_layer_renders_compactly(native_traces):
    from tracer.render.console import print_trace

    t = load(native_traces, ("torch", "default"))
    console = Console(record=True, width=220)
    print_trace(t, console, layers=LAYERS, k=K)
    text = console.export_text()
    assert "[python]" in text and "[op]" in text and "[native]" in text
    assert "mkldnn_convolution" in text and "oneDNN" in text and "samples at 100/s" in text
    assert "libc.so.6" not in text and "libpython3" not in text  # plumbing frames hidden


# ----------------------------------------------------------------------------- py-spy missing


def test_without_pyspy_the_trace_says_so_and_keeps_the_rest(frameworks, tmp_path):
    (res,) = run_probe(frameworks["chainer"], [CaseSpec("relu", "functional", layers=LAYERS)], tmp_path,
                       pyspy=str(tmp_path / "no-such" / "py-spy"), timeout=300)
    assert res.error is None, res.detail
    t = res.load()
    assert "py-spy not found" in t.meta["native"]["error"]
    for pass_ in ("forward", "backward"):
        run = t.run(pass_, "warm")
        assert "py-spy not found" in run.stats["native_error"]
        assert set(run.layers) == {"python", "op", "library"}


# ----------------------------------------------------------------------------- export


def test_export_speedscope(native_traces, tmp_path):
    path = native_traces[("torch", "default")].path
    out = tmp_path / "t.speedscope.json"
    proc = dltrace("export", str(path), "--format", "speedscope", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    assert frames and all(isinstance(f["name"], str) and f["name"] for f in frames)
    names = [p["name"] for p in doc["profiles"]]
    assert len(names) == 8 and all(any(f"[{layer}]" in n for n in names)
                                   for layer in ("python", "op", "library", "native"))
    for p in doc["profiles"]:
        # evented: two events per frame, properly nested, in time order
        assert p["type"] == "evented" and p["unit"] in ("none", "nanoseconds")
        events, open_ = p["events"], []
        assert events and p["startValue"] == 0 and events[-1]["at"] == p["endValue"] > 0
        for prev, e in zip([None, *events], events):
            assert prev is None or prev["at"] <= e["at"]
            assert 0 <= e["frame"] < len(frames)
            if e["type"] == "O":
                open_.append(e["frame"])
            else:
                assert e["type"] == "C" and open_.pop() == e["frame"]
        assert not open_
    native = next(p for p in doc["profiles"] if p["name"].startswith("conv2d.forward [native]"))
    t = native_traces[("torch", "default")].load()
    assert native["endValue"] == t.layer("forward", "native").count  # every sample, once
    assert any("mkldnn_convolution" in frames[e["frame"]]["name"] for e in native["events"])


def test_export_collapsed(native_traces):
    path = native_traces[("torch", "default")].path
    proc = dltrace("export", str(path), "--format", "collapsed", "--layer", "native", "--pass", "forward")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(re.fullmatch(r"[^;\n]+(;[^;\n]+)* \d+", line) for line in lines), lines[:3]
    # the root alone: a sample in the loop itself
    assert all(line.startswith("conv2d.forward [native]") for line in lines)
    t = native_traces[("torch", "default")].load()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == t.layer("forward", "native").count
    assert any("(libtorch_cpu.so)" in line for line in lines)


def test_export_and_probe_reject_unknown_layers(native_traces):
    path = native_traces[("torch", "default")].path
    for args in (["export", str(path), "--format", "collapsed", "--layer", "gpu"],
                 ["probe", "torch", "conv2d", "--layers", "gpu"]):
        proc = dltrace(*args)
        assert proc.returncode == 2 and "unknown layer 'gpu'" in proc.stderr and "Traceback" not in proc.stderr
    # the cold runs have no native layer (it is sampled on the warm path only)
    proc = dltrace("export", str(path), "--format", "speedscope", "--layer", "native", "--phase", "cold")
    assert proc.returncode == 1 and "no native layer in the cold runs" in proc.stderr


# ----------------------------------------------------------------------------- library layer


def test_library_layer_records_what_the_vendor_libraries_ran(cpu_traces):
    torch_conv = cpu_traces[("torch", "default", "conv2d", "functional")].load()
    calls = [n.frame for n in torch_conv.layer("forward", "library").children]
    assert any(f.kind == "library" and f.module == "oneDNN" and f.name.startswith("convolution ") and
               "forward_training" in f.name for f in calls)
    assert torch_conv.meta["library"]["oneDNN"]["version"] and torch_conv.meta["library"]["oneDNN"]["isa"]
    backward = [n.frame.name for n in torch_conv.layer("backward", "library").children]
    assert any("backward_data" in n for n in backward) and any("backward_weights" in n for n in backward)
    # with oneDNN off, torch's slow convolution reports MKL's gemm
    off = cpu_traces[("torch", "onednn-off", "conv2d", "functional")].load()
    assert {n.frame.name for n in off.layer("forward", "library").children} == {"SGEMM"}
    # chainer's numpy reports nothing per call; its OpenBLAS names the kernels it chose for this CPU
    chainer = cpu_traces[("chainer", "default", "dense", "functional")].load()
    assert chainer.layer("forward", "library").children == []
    assert chainer.meta["library"]["OpenBLAS"]["core"]
