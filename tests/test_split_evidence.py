"""Split points a porting engineer can trust, on synthetic traces: the library layer
parsed from the vendors' own logs, sampled splits that must replicate and survive
the deterministic layers, classification by what was compared, the dispatch table's
first decisions, and readable C++ names."""

from __future__ import annotations

import pytest

from tests.conftest import dltrace
from tracer.collect.vendor_log import parse
from tracer.processing.diff import diff_traces
from tracer.processing.diff.classify import classify
from tracer.analysis.dispatch import DispatchTable
from tracer.processing.symbols import display
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node, Run, Trace, load

K = knowledge()

META = {"framework": "fw", "framework_version": "1", "primitive": "conv2d", "api": "functional", "device": "cpu",
        "variant": "default", "shape": [2, 3, 8, 8], "machine": {"arch": "x86_64", "cpu": "test"}}

ONEDNN_V3 = """\
onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)
onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2
onednn_verbose,v1,info,cpu,isa:Intel AVX2
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 dst:f32:p:blocked:Acdb16a::f0,attr-scratchpad:user,,4x3x3x3,0.0258789
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,forward_training,src:f32:a:blocked:abcd::f0,attr-scratchpad:user,alg:convolution_direct,mb2_ic3oc4_ih8oh8kh3sh1dh0ph1_iw8ow8kw3sw1dw0pw1,1.07397
some other line the framework printed
onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src:f32::blocked:ab::f0,,,8x8:8x8,0.021
"""  # noqa: E501 - verbatim log lines, as oneDNN prints them
DNNL_V2 = """\
dnnl_verbose,info,oneDNN v2.4.4 (commit 5818c40f07bdb6307f9bc64e929836fe036da644)
dnnl_verbose,exec,cpu,convolution,x64:gemm:jit,backward_data,src_f32::blocked:abcd:f0,,alg:convolution_direct,mb2_ic3oc4,0.26001
"""
MKL = """\
MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) Architecture processors
MKL_VERBOSE SGEMM(T,N,8,4,16,0x7ffc3b4c75a0,0x55853d4a2c00,16,0x55853d4a2600,16,0x7ffc3b4c75c0,0x55853d467540,8) 1.41ms CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:2
"""  # noqa: E501 - verbatim log lines, as MKL prints them


def test_vendor_logs_are_parsed_into_calls_and_facts():
    log = parse(ONEDNN_V3 + DNNL_V2 + MKL)
    assert [(c.library, c.name) for c in log.calls] == [
        ("oneDNN", "reorder jit:uni"), ("oneDNN", "convolution jit:avx2 (forward_training)"), ("oneDNN", "gemm_api"),
        ("oneDNN", "convolution x64:gemm:jit (backward_data)"), ("MKL", "SGEMM")]
    conv = log.calls[1]
    assert conv.detail == "mb2_ic3oc4_ih8oh8kh3sh1dh0ph1_iw8ow8kw3sw1dw0pw1" and conv.time_ns == 1073970
    assert log.calls[-1].detail == "T,N,8,4,16" and log.calls[-1].time_ns == 1410000  # no pointers kept
    assert log.info["oneDNN"]["isa"] == "Intel AVX2" and log.info["oneDNN"]["version"] == "2.4.4"
    assert log.info["MKL"]["version"] == "2024.0 Update 2"


NVPL = """\
NVPL_BLAS_VERBOSE: NVPL BLAS version 0.3.0
NVPL_BLAS_VERBOSE: Platform: Generic ASIMD, cores:2 sve_width:0. Cache: L1:64 KB (cl:64 ways:4 sets:256) L2:1024 KB (cl:64 ways:16 sets:1024) L3:32768 KB (cl:64 ways:16 sets:32768)
NVPL_BLAS_VERBOSE: sgemm_(T,N,8,4,16,1,0x5fa7c020200,16,0x5fa7c010100,16,1,0x5fa7c040080,8) time_us:12872.1 int:lp64 max_nthr:2 tid:5500b48420
NVPL_BLAS_VERBOSE: sgemm_(N,N,16,4,8,1,0x5fa7c020200,16,0x5fa7c040100,8,0,0x5fa7c010200,16) time_us:nan int:lp64
"""  # noqa: E501 - verbatim log lines, as NVPL BLAS 0.3.0 printed them under torch 2.13's aarch64 build


def test_nvpl_blas_log_is_parsed_like_mkl():
    """PyPI's aarch64 torch computes a small addmm with NVIDIA's NVPL BLAS: its verbose
    log names the call, the problem and the platform it chose kernels for."""
    log = parse(NVPL)
    assert [(c.library, c.name, c.detail, c.time_ns) for c in log.calls] == [("NVPL", "SGEMM", "T,N,8,4,16", 12872100)]
    assert log.unreadable == 1  # the time of nan
    assert log.info["NVPL"] == {"version": "0.3.0", "platform": "Generic ASIMD", "sve_width": "0"}


def lib_tree(label, *calls):
    return Node(Frame("root", "", label), 1,
                children=[Node(Frame("library", lib, name, "", 0, lib), 1) for lib, name in calls])


def trace(layers, replicas=None, **meta):
    return Trace({**META, **meta}, [Run("forward", "warm", layers, {}, replicas or {})])


def test_library_layer_split_names_the_implementations():
    a = trace({"library": lib_tree("conv2d.forward", ("oneDNN", "convolution jit:avx2 (forward_training)"))},
              machine={"arch": "x86_64", "cpu": "x86"})
    b = trace({"library": lib_tree("conv2d.forward", ("oneDNN", "convolution brgconv:sve_512 (forward_training)"))},
              machine={"arch": "aarch64", "cpu": "a64fx"})
    (layer,) = diff_traces(a, b, k=K).layers
    (split,) = layer.splits
    assert not layer.sampled and split.classification == "ISA-specific code"
    assert "avx2" in split.reason and "sve" in split.reason
    # the gemm Eigen's convolution calls, against a oneDNN convolution: another primitive, a library choice
    c = trace({"library": lib_tree("conv2d.forward", ("oneDNN", "gemm_api"))})
    (split,) = diff_traces(a, c, k=K).layers[0].splits
    assert split.classification == "library choice"
    # oneDNN on Arm delegating to the Arm Compute Library
    d = trace({"library": lib_tree("conv2d.forward", ("oneDNN", "convolution indirect_gemm:acl (forward_training)"))})
    (split,) = diff_traces(a, d, k=K).layers[0].splits
    assert split.classification == "library choice" and "Arm Compute Library" in split.reason


def native(name, *children, count, lib="libtorch_cpu.so"):
    return Node(Frame("native", "", name, lib=lib), count, children=list(children))


def native_root(*children, count):
    return Node(Frame("root", "", "conv2d.forward"), count, children=list(children))


ONEDNN_KERNEL = ("dnnl::impl::cpu::x64::jit_avx2_convolution_fwd_t::execute_forward", "libtorch_cpu.so")
MKL_KERNEL = ("mkl_blas_avx2_sgemm_kernel_0", "libtorch_cpu.so")


def side(kernel: tuple[str, str], n: int):
    """The step on one side: the framework's own frames, and ``n`` samples in ``kernel``."""
    kids = [native("at::native::conv2d", count=40)] + ([native(kernel[0], count=n, lib=kernel[1])] if n else [])
    return native_root(native("THPVariable_conv2d", *kids, count=40 + n), count=40 + n)


def test_a_sampled_split_must_show_in_every_independent_sampling():
    # merged: oneDNN in 20 of 60 samples against MKL in 20 of 60, p tiny; but all of
    # them fell in the first half of each side's sampling
    merged_a, merged_b = side(ONEDNN_KERNEL, 20), side(MKL_KERNEL, 20)
    a = trace({"native": merged_a}, {"native": [side(ONEDNN_KERNEL, 20), side(ONEDNN_KERNEL, 0)]})
    b = trace({"native": merged_b}, {"native": [side(MKL_KERNEL, 20), side(MKL_KERNEL, 0)]})
    (layer,) = diff_traces(a, b, k=K).layers
    assert layer.splits == [] and layer.unreplicated == 1
    # in both halves: it stands, a library choice with its evidence
    a = trace({"native": merged_a}, {"native": [side(ONEDNN_KERNEL, 10), side(ONEDNN_KERNEL, 10)]})
    b = trace({"native": merged_b}, {"native": [side(MKL_KERNEL, 10), side(MKL_KERNEL, 10)]})
    (layer,) = diff_traces(a, b, k=K).layers
    (split,) = layer.splits
    assert [x.label for x in split.only_a] == [ONEDNN_KERNEL[0]] and split.only_a[0].p_value < 1e-6
    assert split.classification == "library choice"
    # a kernel one process caught and the other did not (a BLAS on its own worker threads
    # there) replaces nothing: set aside
    b = trace({"native": side(MKL_KERNEL, 0)}, {"native": [side(MKL_KERNEL, 0), side(MKL_KERNEL, 0)]})
    (layer,) = diff_traces(a, b, k=K).layers
    assert layer.splits == [] and layer.consequences == 1


def test_native_splits_follow_the_decision_the_op_layer_names():
    def op(name, *kids):
        return Node(Frame("op", "aten", name), 1, children=list(kids))

    def ops(kernel):
        return Node(Frame("root", "", "conv2d.forward"), 1,
                    children=[op("aten::conv2d", op("aten::_convolution", op(kernel)))])

    def nat(kernel, lib):
        return native_root(native("THPVariable_conv2d", native(kernel, count=90, lib=lib), count=100), count=100)

    a = trace({"op": ops("aten::mkldnn_convolution"),
               "native": nat("dnnl::impl::cpu::x64::jit_avx2_conv::execute", "libtorch_cpu.so")})
    b = trace({"op": ops("aten::thnn_conv2d"),
               "native": nat("at::native::slow_conv2d_forward_out_cpu", "libtorch_cpu.so")},
              variant="onednn-off")
    result = diff_traces(a, b, k=K)
    op_layer, nat_layer = result.layers
    assert op_layer.splits[0].frame == "aten::_convolution" and op_layer.splits[0].classification == "library choice"
    assert nat_layer.splits == [] and nat_layer.consequences == 1
    # same devices: never a device dispatch, whatever the names say
    assert classify([Frame("python", "fw", "forward_cpu")], [Frame("python", "fw", "forward_ideep")], False,
                    k=K)[0] != "device dispatch"
    assert classify([Frame("op", "cuda", "cudnn::conv_fwd")], [], True, k=K)[0] == "device dispatch"
    assert classify([Frame("op", "cuda", "cudnn::conv_fwd")], [], False, k=K)[0] != "device dispatch"


def test_the_dispatch_table_lists_first_decisions_with_their_evidence():
    def op(name, *kids):
        return Node(Frame("op", "tf", name), 1, children=list(kids))

    # TensorFlow's oneDNN rewrite: the op itself is renamed at the step
    a = trace({"op": Node(Frame("root", "", "conv2d.forward"), 1, children=[op("_MklNativeConv2D"), op("BiasAdd")]),
               "library": lib_tree("conv2d.forward", ("oneDNN", "convolution jit:avx2 (forward_training)"))},
              framework="tensorflow")
    b = trace({"op": Node(Frame("root", "", "conv2d.forward"), 1, children=[op("Conv2D"), op("BiasAdd")]),
               "library": lib_tree("conv2d.forward", ("oneDNN", "gemm_api"))}, framework="tensorflow", variant="off")
    table = DispatchTable(k=K)
    table.add("conv2d", "cpu vs cpu off", {"forward": diff_traces(a, b, k=K)})
    (row,) = table.points()
    assert row.frame == "Conv2D" and row.layer == "op" and row.classification == "library choice"
    assert row.a_names == ["_MklNativeConv2D"] and row.b_names == ["Conv2D"]
    assert any(e.startswith("forward, library layer: A convolution jit:avx2") for e in row.evidence)
    # where no layer names the decision, the library chose: its own row
    x = trace({"library": lib_tree("conv2d.forward", ("oneDNN", "convolution jit:avx2 (forward_training)"))})
    y = trace({"library": lib_tree("conv2d.forward", ("oneDNN", "convolution gemm:ref (forward_training)"))},
              variant="v")
    table = DispatchTable(k=K)
    table.add("conv2d", "x86 vs arm", {"forward": diff_traces(x, y, k=K)})
    (row,) = table.points()
    assert row.layer == "library" and row.frame == "library: convolution" and row.classification == "ISA-specific code"


def test_a_sampled_native_split_is_evidence_of_the_row_another_layer_names():
    """The native stacks part above a library's call (TensorFlow's gen_nn_ops.conv2d over
    oneDNN's ISA dispatch): one decision, counted once, whether or not sampling caught it."""
    def both(library_a, library_b):
        halves = [side(ONEDNN_KERNEL, 10), side(ONEDNN_KERNEL, 10)], [side(MKL_KERNEL, 10), side(MKL_KERNEL, 10)]
        a = trace({"native": side(ONEDNN_KERNEL, 20), **library_a}, {"native": halves[0]})
        b = trace({"native": side(MKL_KERNEL, 20), **library_b}, {"native": halves[1]}, variant="off")
        table = DispatchTable(k=K)
        table.add("conv2d", "cpu vs cpu off", {"forward": diff_traces(a, b, k=K)})
        return table.points()

    # the library layer shows the choice: its row, the native split its evidence
    (row,) = both({"library": lib_tree("conv2d.forward", ("oneDNN", "convolution jit:avx2 (forward_training)"))},
                  {"library": lib_tree("conv2d.forward", ("MKL", "SGEMM"))})
    assert row.layer == "library" and row.site == "library choice: MKL / oneDNN"
    assert any(e.startswith("forward, native layer") for e in row.evidence), row.evidence
    # nothing else shows it: the native split is the row
    (row,) = both({}, {})
    assert row.layer == "native" and row.classification == "library choice"


@pytest.mark.parametrize("symbol, shown", [
    ("at::internal::invoke_parallel<at::parallel_for<at::native::(anonymous namespace)::cpu_max_pool<float, false>("
     "at::Tensor const&, int)::{lambda(long, long)#1}>(long, long, long, at::native::(anonymous namespace)::"
     "cpu_max_pool<float, false>(at::Tensor const&, int)::{lambda(long, long)#1} const&)::{lambda()#1}>(long, long, "
     "long, at::parallel_for<x>(long, long)::{lambda()#1} const&) [clone ._omp_fn.0]", "cpu_max_pool (lambda)"),
    ("at::native::(anonymous namespace)::cpu_max_pool<float, false>(at::Tensor const&)",
     "at::native::cpu_max_pool<float>"),
    ("std::_Function_handler<void (long, long), dnnl::impl::cpu::x64::jit_uni_softmax_fwd_t::execute("
     "dnnl::impl::exec_ctx_t const&) const::{lambda(long, long)#1}>::_M_invoke(std::_Any_data const&, long&&, long&&)",
     "jit_uni_softmax_fwd_t::execute (lambda)"),
    ("tensorflow::ConvOp<Eigen::ThreadPoolDevice, float>::Compute(tensorflow::OpKernelContext*)",
     "tensorflow::ConvOp<…>::Compute"),
    ("aten::mkldnn_convolution", "aten::mkldnn_convolution"),
    ("jit_avx2_conv_fwd_kernel_f32_t", "jit_avx2_conv_fwd_kernel_f32_t"),
])
def test_cpp_symbols_have_a_readable_form(symbol, shown):
    assert display(symbol) == shown


@pytest.mark.parametrize("time", ["nan", "inf", "1e400", "-1", "1.2.3"])
def test_a_reported_time_that_is_no_duration_is_an_unreadable_line_not_a_figure(time):
    onednn = ("onednn_verbose,v1,primitive,exec,cpu,softmax,jit:avx2,forward_training,src:f32,,alg:softmax,mb2ic8,"
              f"{time}\n")
    mkl = f"MKL_VERBOSE SGEMM(T,N,8,4,16,0x1,0x2,16,0x3,16,0x4,0x5,8) {time}ms CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:2\n"
    log = parse(onednn + mkl)
    assert log.calls == [] and log.unreadable == 2


def test_a_malformed_library_line_costs_no_case(fake_frameworks, tmp_path):
    out = tmp_path / "softmax.json"
    proc = dltrace("probe", "crashy", "softmax", "--layers", "python,library", "--pass", "forward", "-o", str(out),
                   env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    run = load(out).run("forward")
    assert [n.frame.name for _, n in run.layers["library"].walk()][1:] == ["softmax jit:avx2 (forward_training)"]
    assert run.stats["layers"]["library"]["unreadable_lines"] == 3
    assert "python" in run.layers
