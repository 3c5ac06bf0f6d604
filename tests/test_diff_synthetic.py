"""The diff engine on synthetic call trees built from Frame and Node (no framework)."""

import json
import re

import pytest
from rich.console import Console

from tests.conftest import dltrace, one_line_error
from tracer.processing.candidates import find_candidates
from tracer.processing.diff import DiffError, diff_traces, diff_trees
from tracer.processing.diff.classify import classify
from tracer.processing.diff.fragment import fragments, source_fragment
from tracer.processing.graph import call_graph, merged_graph
from tracer.processing.normalize import identity
from tracer.processing.reach import native_kernels
from tracer.processing.sampling import ALPHA, family_alpha, miss_chance
from tracer.processing.tags import isa_of, library_of, library_order
from tracer.render.diff_console import print_candidates, print_diff
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node, Run, Trace, save

K = knowledge()


def n(name, *children, kind="python", module="fw", count=1, lines=(), call_lines=(), lib="", file="", line=0):
    """A node; ``name`` may be a Frame."""
    frame = name if isinstance(name, Frame) else Frame(kind, module if kind in ("python", "c") else "", name,
                                                       file, line, lib)
    return Node(frame, count, 0, list(call_lines), list(lines), list(children))


def root(*children, count=1):
    return Node(Frame("root", "", "probe"), count, 0, [], [], list(children))


def native(name, *children, count, lib="libtorch_cpu.so"):
    return n(name, *children, kind="native", count=count, lib=lib)


def labels(branches):
    return [b.label for b in branches]


def splits(result):
    return [(level, s.frame, labels(s.only_a), labels(s.only_b)) for level, s in result.all_splits()]


# ----------------------------------------------------------------------------- alignment


def test_identical_trees_have_no_split():
    def make():
        return root(n("forward", n("conv", n("im2col"), n("gemm")), n("bias")))

    result = diff_trees(make(), make(), k=K)
    assert result.splits == []
    assert result.shared == result.nodes_a == result.nodes_b == 6


def test_split_at_root():
    result = diff_trees(root(n("forward_cpu", n("gemm"))), root(n("forward_gpu", n("cudnn_conv"))), k=K)
    (split,) = result.splits
    assert (split.frame, split.kind, split.depth, split.path) == ("probe", "root", 0, ["probe"])
    assert labels(split.only_a) == ["fw.forward_cpu"] and labels(split.only_b) == ["fw.forward_gpu"]
    assert split.only_a[0].nodes == 2
    assert split.fragments[0].kind == "symbols" and "probe step" in split.fragments[0].note


def test_split_deep_reports_the_common_path():
    a = root(n("api", n("dispatch", n("impl", n("kernel_a", n("leaf"))))))
    b = root(n("api", n("dispatch", n("impl", n("kernel_b")))))
    (split,) = diff_trees(a, b, k=K).splits
    assert split.path == ["probe", "fw.api", "fw.dispatch", "fw.impl"]
    assert split.depth == 3
    assert labels(split.only_a) == ["fw.kernel_a"] and split.only_a[0].nodes == 2
    assert labels(split.only_b) == ["fw.kernel_b"]


def test_several_independent_splits_in_order():
    a = root(n("load", n("read_a")), n("compute", n("x_a")), n("store", n("same")))
    b = root(n("load", n("read_b")), n("compute", n("x_b")), n("store", n("same")))
    assert splits(diff_trees(a, b, k=K)) == [
        (0, "fw.load", ["fw.read_a"], ["fw.read_b"]),
        (0, "fw.compute", ["fw.x_a"], ["fw.x_b"]),
    ]


def test_independent_splits_nearest_the_root_come_first():
    # a deep, incidental split met first in depth-first order must not hide the
    # shallower decision that follows it
    a = root(n("setup", n("cache", n("lookup", n("hit")))), n("dispatch", n("jit")))
    b = root(n("setup", n("cache", n("lookup", n("miss")))), n("dispatch", n("eager")))
    assert splits(diff_trees(a, b, k=K)) == [
        (0, "fw.dispatch", ["fw.jit"], ["fw.eager"]),
        (0, "fw.lookup", ["fw.hit"], ["fw.miss"]),
    ]


def test_nested_splits_are_grouped_under_the_first_decision():
    # forward decides (A calls cpu_helper, B gpu_helper); both still call `common`,
    # whose own children then differ: a consequence, nested under the first split.
    a = root(n("forward", n("cpu_helper"), n("common", n("inner", n("eigen_kernel")))), n("other", n("x")))
    b = root(n("forward", n("gpu_helper"), n("common", n("inner", n("cudnn_kernel")))), n("other", n("y")))
    result = diff_trees(a, b, k=K)
    assert splits(result) == [
        (0, "fw.forward", ["fw.cpu_helper"], ["fw.gpu_helper"]),
        (1, "fw.inner", ["fw.eigen_kernel"], ["fw.cudnn_kernel"]),
        (0, "fw.other", ["fw.x"], ["fw.y"]),
    ]
    first = result.splits[0]
    assert first.children[0].path == ["probe", "fw.forward", "fw.common", "fw.inner"]


def test_reordered_children_are_not_a_split():
    a = root(n("f", n("a"), n("b", n("b1"), n("b2")), n("c")))
    b = root(n("f", n("c"), n("b", n("b2"), n("b1")), n("a")))
    result = diff_trees(a, b, k=K)
    assert result.splits == [] and result.shared == 7


def test_same_identity_siblings_are_merged():
    # two <genexpr> of one function (different lines) on A, one on B: same identity
    a = root(n("f", n("<genexpr>", n("g"), line=3), n("<genexpr>", n("h"), line=4)))
    b = root(n("f", n("<genexpr>", n("g"), n("h"), line=3)))
    assert diff_trees(a, b, k=K).splits == []


def test_garbage_collector_callbacks_are_not_splits():
    # gc.callbacks run wherever the collector triggers (seen in real JAX traces)
    a = root(n("f", n("g"), n("_xla_gc_callback", module="jax._src.lib")))
    b = root(n("f", n("g")))
    result = diff_trees(a, b, k=K)
    assert result.splits == [] and result.ignored_a == 1


def test_deep_trees_need_no_recursion():
    depth = 20_000

    def chain(last):
        node = n(last)
        for i in range(depth):
            node = n(f"f{i % 7}", node)
        return root(node)

    result = diff_trees(chain("kernel_a"), chain("kernel_b"), k=K)
    (split,) = result.splits
    assert split.depth == depth and len(split.path) == depth + 1
    json.dumps(result_json(result))


def result_json(layer):
    from tracer.processing.diff.result import _splits_json

    return _splits_json(layer.splits)


# ----------------------------------------------------------------------------- sampling


def sampled_pair(noise_a, noise_b=0, total=800):
    def tree(noise, kernel):
        kids = [native("at::native::conv2d", native(kernel, count=total - 10), count=total - 10)]
        if noise:
            kids.append(native("at::native::rare_path", count=noise))
        return root(*kids, count=total)

    return tree(noise_a, "dnnl::impl::cpu::x64::jit_avx2_conv_fwd_kernel_f32::execute"), \
        tree(noise_b, "dnnl::impl::cpu::x64::jit_avx2_conv_fwd_kernel_f32::execute")


def test_sampling_noise_below_threshold_is_not_a_split():
    a, b = sampled_pair(noise_a=3)  # 3 of 800 samples
    result = diff_trees(a, b, "native", k=K)
    assert result.sampled and result.threshold == 0.02
    assert result.splits == []
    assert result.ignored_a == 1 and result.samples_a == 800


def test_sampling_difference_above_threshold_is_a_split():
    a, b = sampled_pair(noise_a=120)
    (split,) = diff_trees(a, b, "native", k=K).splits
    (branch,) = split.only_a
    assert branch.label == "at::native::rare_path" and branch.share == pytest.approx(0.15)
    assert branch.other_share == 0.0


def test_threshold_is_explicit_and_changes_the_answer():
    a, b = sampled_pair(noise_a=10)  # 1.25% of 800 samples: under the default 2%
    assert diff_trees(a, b, "native", k=K).splits == []
    result = diff_trees(a, b, "native", threshold=0.001, k=K)
    assert result.threshold == 0.001 and len(result.splits) == 1


def test_one_sided_frame_is_a_split_only_if_the_miss_is_not_chance():
    # 3 of 138 samples against 0 of 50: the other side misses a 2.2% frame in 33% of runs
    assert miss_chance(0, 50, 3 / 138) == pytest.approx((1 - 3 / 138) ** 50)
    a, b = sampled_pair(noise_a=3, total=138), sampled_pair(noise_a=0, total=50)[1]
    result = diff_trees(a[0], b, "native", k=K)
    assert result.alpha == family_alpha(5) and result.splits == [] and result.ignored_a == 1
    # the same share against 800 samples on the other side is no accident (p = 2e-8)
    a, b = sampled_pair(noise_a=3, total=138)[0], sampled_pair(noise_a=0, total=800)[1]
    (split,) = diff_trees(a, b, "native", k=K).splits
    assert split.only_a[0].label == "at::native::rare_path"
    # and a real kernel split over few samples stays one: 66 of 138 against 0 of 50
    assert miss_chance(0, 50, 66 / 138) < 1e-12 and miss_chance(2, 50, 0.5) == pytest.approx(1.13e-12, rel=0.01)


def test_one_sided_frames_are_tested_as_a_family():
    # p = 0.9 ** 50 = 0.005: under ALPHA for one frame, not once every frame above the
    # threshold is tested (here 5: at ALPHA each, one diff in twenty would split by chance)
    def tree(extra):
        kids = [native("at::native::conv2d", count=45)] + ([native("at::native::check", count=5)] if extra else [])
        return root(n("fw.conv2d", *kids, count=50), count=50)

    assert miss_chance(0, 50, 5 / 50) == pytest.approx(0.00515, rel=0.01) and miss_chance(0, 50, 5 / 50) < ALPHA
    result = diff_trees(tree(True), tree(False), "native", sampled=True, k=K)
    assert result.alpha == pytest.approx(ALPHA / 5) and result.splits == [] and result.ignored_a == 1


def test_sampled_python_frames_split_only_in_the_python_layer():
    # a short Python call caught by 5 of 50 samples on one side: not a native split
    # when the traces have a python layer, which records every call
    def tree(extra):
        kids = [native("at::native::conv2d", count=35)] + ([n("fw.check", kind="python", count=15)] if extra else [])
        return root(n("fw.conv2d", *kids, count=50), count=50)

    a, b = tree(True), tree(False)
    assert len(diff_trees(a, b, "native", sampled=True, k=K).splits) == 1  # p = 0.7 ** 50 = 2e-8
    result = diff_trees(a, b, "native", sampled=True, python_elsewhere=True, k=K)
    assert result.splits == [] and result.ignored_a == 1
    stats = {"layers": {"native": {"sampled": True}}}
    ta = Trace(META, [Run("forward", "warm", {"python": root(), "native": a}, stats)])
    tb = Trace(META, [Run("forward", "warm", {"python": root(), "native": b}, stats)])
    (layer,) = diff_traces(ta, tb, layers=("native",), k=K).layers
    assert layer.splits == [] and layer.ignored_a == 1 and layer.consequences == 0
    # without a python layer the Python frame is native evidence: a split, though set
    # aside, because below it both sides reach the same kernels
    ta.runs[0].layers.pop("python")
    tb.runs[0].layers.pop("python")
    (layer,) = diff_traces(ta, tb, layers=("native",), k=K).layers
    assert layer.splits == [] and layer.ignored_a == 0 and layer.consequences == 1


def test_frame_present_on_both_sides_but_rare_on_one():
    a, b = sampled_pair(noise_a=200, noise_b=4)
    (split,) = diff_trees(a, b, "native", k=K).splits
    assert split.only_a[0].share == pytest.approx(0.25) and split.only_a[0].other_share == pytest.approx(0.005)
    assert split.only_b == []


def test_sampled_flag_in_run_stats():
    a, b = sampled_pair(noise_a=3)
    for t in (a, b):  # op-level frames: not native, so sampling comes from the stats
        for _, node in t.walk():
            if node.frame.kind == "native":
                node.frame = Frame("op", "", node.frame.name)
    ta = Trace(META, [Run("forward", "warm", {"op": a}, {"layers": {"op": {"sampled": True}}})])
    tb = Trace(META, [Run("forward", "warm", {"op": b}, {"layers": {"op": {"sampled": True}}})])
    (layer,) = diff_traces(ta, tb, k=K).layers
    assert layer.sampled and layer.splits == []
    # the stats of one side are enough
    tb = Trace(META, [Run("forward", "warm", {"op": b}, {})])
    assert diff_traces(ta, tb, k=K).layers[0].sampled


# ----------------------------------------------------------------------------- normalisation

SAME = [
    (("native", "foo(int) [clone .isra.0]"), ("native", "foo(int)")),
    (("native", "at::native::conv.constprop.1"), ("native", "at::native::conv.cold")),
    (("native", "std::__cxx11::basic_string<char> f[abi:cxx11]()"), ("native", "std::basic_string<char> f()")),
    (("native", "(anonymous namespace)::run"), ("native", "{anonymous}::run")),
    (("native", "std::vector<std::vector<int> >"), ("native", "std::vector<std::vector<int>>")),
    (("native", "kernel+0x1a"), ("native", "kernel")),
    (("native", "0x7f12deadbeef"), ("native", "0x55aa00001234")),
    (("python", "<lambda at 0x7f0012>"), ("python", "<lambda at 0x55ff34>")),
    (("op", "__inference_conv2d_1234"), ("op", "__inference_conv2d_99")),
    (("op", "convolution.3"), ("op", "convolution.12")),
    (("op", "Conv2D_1"), ("op", "Conv2D")),
    (("c", "pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1._get_tracing_state"),
     ("c", "pybind11_detail_function_record_v2_clang_libcpp._get_tracing_state")),
]
DIFFERENT = [
    (("python", "forward_cpu"), ("python", "forward_gpu")),
    (("op", "conv2d"), ("op", "conv3d")),
    (("native", "jit_avx2_conv"), ("native", "jit_avx512_core_conv")),
    (("python", "Module.cold"), ("python", "Module")),  # C++ clone rules never touch Python names
    (("python", "f_1"), ("python", "f_2")),
]


@pytest.mark.parametrize("x, y", SAME)
def test_normalised_identities_match(x, y):
    assert identity(Frame(x[0], "", x[1]), k=K) == identity(Frame(y[0], "", y[1]), k=K)


@pytest.mark.parametrize("x, y", DIFFERENT)
def test_different_functions_stay_different(x, y):
    assert identity(Frame(x[0], "", x[1]), k=K) != identity(Frame(y[0], "", y[1]), k=K)


def test_normalisation_prevents_false_splits():
    a = root(n("f", native("conv_impl.isra.0", count=1, lib="libtorch_cpu.so"),
               n("<lambda at 0x7f00aa>"), n("__inference_step_17", kind="op"), file="a.py", line=3))
    b = root(n("f", native("conv_impl.constprop.2", count=1, lib="libtorch_cpu.so.2.1"),
               n("<lambda at 0x55bb01>"), n("__inference_step_4242", kind="op"), file="a.py", line=9))
    assert diff_trees(a, b, sampled=False, k=K).splits == []


def test_unsymbolised_frames_are_identified_by_library():
    a = native("0x7f0001", count=1, lib="libdnnl.so.3")
    b = native("0x55aa02", count=1, lib="libdnnl.so.2")
    c = native("0x7f0001", count=1, lib="[jit]")
    assert identity(a.frame, k=K) == identity(b.frame, k=K) != identity(c.frame, k=K)


# ----------------------------------------------------------------------------- tags


@pytest.mark.parametrize("name, lib, expect_lib, expect_isa", [
    ("dnnl::impl::cpu::x64::jit_avx512_core_bf16_1x1_conv_kernel::execute", "libtorch_cpu.so", "oneDNN",
     "avx512_core_bf16"),
    ("jit_avx2_conv_fwd_kernel_f32::generate", "libdnnl.so.3", "oneDNN", "avx2"),
    ("ideep::convolution_forward::compute", "libtorch_cpu.so", "oneDNN", ""),
    ("mkl_blas_avx2_sgemm_kernel_0", "libmkl_core.so", "MKL", "avx2"),
    ("sgemm_kernel_HASWELL", "libopenblas.so.0", "OpenBLAS", "avx2"),
    ("Eigen::internal::TensorExecutor<Expr, Eigen::ThreadPoolDevice>::run", "_pywrap_tensorflow.so", "Eigen", ""),
    ("tensorflow::ConvOp<Eigen::ThreadPoolDevice, float>::Compute", "_pywrap_tensorflow.so", "TensorFlow core", ""),
    ("xla::cpu::CpuExecutable::ExecuteComputeFunction", "xla_extension.so", "XLA", ""),
    ("mshadow::expr::MapPlan<float>", "libmxnet.so", "mshadow", ""),
    ("cudnn::cnn::conv_kernel", "libcudnn_engines_precompiled.so.9", "cuDNN", ""),
    ("cublasLtMatmul", "libcublasLt.so.12", "cuBLAS", ""),
    ("cudaLaunchKernel", "libcudart.so.12", "CUDA runtime", ""),
    ("at::native::add_kernel", "libtorch_cpu.so", "torch core", ""),
    ("MXImperativeInvoke", "libmxnet.so", "MXNet core", ""),
    ("__memcpy_avx_unaligned_erms", "libc.so.6", "libc", "avx"),
    ("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0", "libpython", ""),
    ("dnnl::impl::cpu::aarch64::jit_sve_512_conv_kernel::execute", "libdnnl.so", "oneDNN", "sve"),
    ("arm_compute::NEConvolutionLayer::run", "libarm_compute.so", "Arm Compute Library", ""),
    ("brgemm_kernel_amx_tile", "libdnnl.so", "oneDNN", "amx"),
    ("dnnl::impl::cpu::x64::jit_generator::create_kernel", "libdnnl.so", "oneDNN", "x64"),
    ("0x7f00beef", "[jit]", "JIT code", "jit"),
    ("0x7f00beef", "", "JIT code", "jit"),
    ("some_symbol", "libfoo.so.1.2", "libfoo", ""),
    # numpy's C core and bundled BLAS, TensorFlow's Python bindings, by shared object
    ("PyArray_MatrixProduct2", "_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "NumPy", ""),
    ("sgemm_kernel_HASWELL", "libscipy_openblas64_-ff651d7f.so", "OpenBLAS", "avx2"),
    ("TFE_Py_FastPathExecute_C", "lib_pywrap_tensorflow_common.so", "TensorFlow core", ""),
    ("pybind11::cpp_function::dispatcher", "_dtypes.so", "TensorFlow core", ""),
    ("clock_gettime", "[vdso]", "libc", ""),
])
def test_native_tags(name, lib, expect_lib, expect_isa):
    f = Frame("native", "", name, lib=lib)
    assert (library_of(f, k=K), isa_of(f, k=K)) == (expect_lib, expect_isa)


def test_libraries_are_listed_by_what_a_port_replaces():
    libs = ["libc", "torch core", "libstdc++", "oneDNN", "MKL", "OpenMP", "libfoo"]
    assert sorted(libs, key=lambda lib: library_order(lib, K)) == \
        ["MKL", "oneDNN", "torch core", "libfoo", "libc", "libstdc++", "OpenMP"]


@pytest.mark.parametrize("frame, expect", [
    (Frame("op", "", "aten::mkldnn_convolution"), "oneDNN"),
    (Frame("op", "", "_MklNativeConv2D"), "oneDNN"),
    (Frame("op", "", "aten::cudnn_convolution"), "cuDNN"),
    (Frame("op", "", "aten::_slow_conv2d_forward"), ""),
    (Frame("c", "cupy._core._kernel", "ElementwiseKernel.__call__"), "CuPy"),
    (Frame("python", "chainer.functions.connection.convolution_2d", "Convolution2DFunction._forward_ideep"), "oneDNN"),
    (Frame("python", "torch.cuda", "is_available"), "CUDA runtime"),
    (Frame("python", "fw", "forward"), ""),
])
def test_op_and_python_tags(frame, expect):
    assert library_of(frame, k=K) == expect


# ----------------------------------------------------------------------------- deciding code

SOURCE = [
    "def forward(self, x):",
    "    xp = get_array_module(x)",
    "    if xp is numpy:",
    "        y = self.forward_cpu(x)",
    "    else:",
    "        y = self.forward_gpu(x)",
    "    return y",
]


def forward_trees():
    a = root(n("Conv.forward", n("Conv.forward_cpu", call_lines=[13]), file="fw/conv.py", line=10,
               lines=[11, 12, 13, 16]))
    b = root(n("Conv.forward", n("Conv.forward_gpu", call_lines=[15]), file="fw/conv.py", line=10,
               lines=[11, 12, 15, 16]))
    return a, b


def test_deciding_fragment_marks_the_lines_of_each_side():
    a, b = forward_trees()
    (split,) = diff_trees(a, b, sources_a={("fw/conv.py", 10): SOURCE}, k=K).splits
    (frag,) = split.fragments
    assert frag.kind == "source" and frag.side == "AB" and frag.decision_line == 12
    marks = {cl.line: (cl.ran, cl.call, cl.decision) for cl in frag.lines}
    assert marks[12] == ("AB", "", True)
    assert marks[13] == ("A", "A", False)
    assert marks[15] == ("B", "B", False)
    assert marks[10] == ("", "", False)  # the def line, for context
    assert [cl.text.strip() for cl in frag.lines if cl.line == 12] == ["if xp is numpy:"]


def test_deciding_fragment_for_two_versions_of_the_source():
    a, b = forward_trees()
    other = SOURCE[:2] + ["    # a comment added in another version"] + SOURCE[2:]
    (split,) = diff_trees(a, b, sources_a={("fw/conv.py", 10): SOURCE},
                          sources_b={("fw/conv.py", 10): other}, k=K).splits
    assert [f.side for f in split.fragments] == ["A", "B"]


def test_native_split_names_symbols_and_says_source_is_unavailable():
    a = root(native("at::native::conv", native("dnnl::impl::cpu::x64::jit_avx2_conv::execute", count=700), count=800),
             count=800)
    b = root(native("at::native::conv", native("at::native::slow_conv2d_forward_out_cpu", count=700), count=800),
             count=800)
    (split,) = diff_trees(a, b, "native", k=K).splits
    (frag,) = split.fragments
    assert frag.kind == "symbols" and "not available in wheels" in frag.note
    assert frag.a_names == ["dnnl::impl::cpu::x64::jit_avx2_conv::execute"]
    assert split.classification == "library choice"
    assert split.only_a[0].libraries == ["oneDNN"] and split.only_a[0].isa == ["avx2"]


# ----------------------------------------------------------------------------- classification


def frames(*names, kind="native", lib="", module=""):
    return [Frame(kind, module, name, lib=lib) for name in names]


@pytest.mark.parametrize("a, b, expect", [
    (frames("forward_cpu", kind="python"), frames("forward_gpu", kind="python"), "device dispatch"),
    (frames("at::native::conv"), frames("cudnn::conv_kernel", lib="libcudnn.so.9"), "device dispatch"),
    (frames("_cpp_pjit", "pjit_call_impl", kind="python"), frames("apply_primitive", kind="python"), "compilation"),
    (frames("dnnl::impl::conv_fwd"), frames("Eigen::internal::TensorExecutor::run"), "library choice"),
    (frames("jit_avx512_core_conv::execute", lib="libdnnl.so"), frames("jit_avx2_conv::execute", lib="libdnnl.so"),
     "ISA-specific code"),
    (frames("__memcpy_avx_unaligned", lib="libc.so.6"), frames("at::native::fill"), "allocation/transfer"),
    (frames("__memcpy_avx_unaligned", lib="libc.so.6"), frames("__memmove_sse2", lib="libc.so.6"), "other"),
    (frames("_copy_from", "to", kind="python"), [], "allocation/transfer"),
    (frames("forward_ideep_path_cpu", kind="c"), frames("forward_plain", kind="c"), "library choice"),
    (frames("helper_a", kind="python"), frames("helper_b", kind="python"), "other"),
    # oneDNN's generated kernels (jit_uni_softmax_fwd_t) are not model compilation, even
    # when the frame holding the name is a std::function wrapper in the framework's library
    (frames("tensorflow::SoftmaxOp<Eigen::ThreadPoolDevice, float>::Compute", lib="libtensorflow_cc.so.2"),
     frames("tensorflow::MklSoftmaxOp<Eigen::ThreadPoolDevice, float>::Compute",
            "std::_Function_handler<void (int), dnnl::impl::cpu::x64::jit_uni_softmax_fwd_t::execute() const::"
            "{lambda(int)#1}>::_M_invoke", lib="libtensorflow_cc.so.2"), "library choice"),
])
def test_classification_rules(a, b, expect):
    assert classify(a, b, k=K)[0] == expect


# ----------------------------------------------------------------------------- traces

META = {"framework": "fw", "framework_version": "1.0", "primitive": "conv2d", "api": "functional", "device": "cpu",
        "variant": "default", "shape": [2, 3, 8, 8], "machine": {"arch": "x86_64", "cpu": "test"}}


def trace(tree, **meta):
    return Trace({**META, **meta}, [Run("forward", "warm", {"python": tree})], {("fw/conv.py", 10): SOURCE})


def test_diff_of_a_trace_with_itself_has_no_split():
    a, _ = forward_trees()
    t = trace(a)
    result = diff_traces(t, t, k=K)
    assert result.split_count == 0 and result.differs == {}


def test_mismatched_traces_are_refused_unless_forced():
    a, b = forward_trees()
    with pytest.raises(DiffError, match="different primitives .*--force"):
        diff_traces(trace(a), trace(b, primitive="relu"), k=K)
    result = diff_traces(trace(a), trace(b, framework="other"), force=True, k=K)
    assert result.split_count == 1 and "different frameworks" in result.warnings[0]


def test_missing_run_or_layer_is_a_clear_error():
    a, b = forward_trees()
    with pytest.raises(DiffError, match="trace A has no warm backward run"):
        diff_traces(trace(a), trace(b), pass_="backward", k=K)
    with pytest.raises(DiffError, match="no native layer in both traces"):
        diff_traces(trace(a), trace(b), layers=("native",), k=K)
    with pytest.raises(DiffError, match="threshold"):
        diff_traces(trace(a), trace(b), threshold=2, k=K)


def test_differences_and_json():
    a, b = forward_trees()
    result = diff_traces(trace(a), trace(b, variant="gpu-ish", device="gpu"), k=K)
    assert result.differs == {"device": ["cpu", "gpu"], "variant": ["default", "gpu-ish"]}
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["pass"] == "forward" and doc["split_count"] == 1
    (split,) = doc["layers"][0]["splits"]
    assert split["classification"] == "device dispatch" and split["children"] == []
    assert "a_root" not in doc["layers"][0]


def test_two_builds_of_one_release_are_no_version_difference():
    """torch's x86 CPU build (+cpu) and its aarch64 CUDA build (+cu130) are one release:
    the builds differ, the versions do not; another release does."""
    a, _ = forward_trees()
    same = diff_traces(trace(a, framework_version="2.13.0+cpu"), trace(a, framework_version="2.13.0+cu130"), k=K)
    assert same.differs == {"framework_build": ["cpu", "cu130"]}
    other = diff_traces(trace(a, framework_version="2.13.0+cpu"), trace(a, framework_version="2.9.1"), k=K)
    assert other.differs["framework_version"] == ["2.13.0", "2.9.1"]


def test_console_rendering_shows_decision_and_threshold():
    a, b = forward_trees()
    console = Console(record=True, width=120, color_system=None)
    print_diff(diff_traces(trace(a), trace(b, device="gpu"), k=K), console, ("a.json", "b.json"))
    text = console.export_text()
    assert "split in fw.Conv.forward" in text and "[device dispatch]" in text
    assert "threshold 2.0%" in text
    assert re.search(r"12 +◆ +if xp is numpy:", text)
    assert re.search(r"13  A +y = self.forward_cpu\(x\)  →A", text)
    assert "A only: fw.Conv.forward_cpu" in text and "B only: fw.Conv.forward_gpu" in text


# ----------------------------------------------------------------------------- candidates

CAND_SOURCE = [
    "    def forward(self, inputs):",
    "        xp = backend.get_array_module(*inputs)",
    "        if xp is numpy:",
    "            return self.forward_cpu(inputs)",
    "        else:",
    "            return self.forward_gpu(inputs)",
]
BRANCHES = [
    "    def apply(self, x):",
    "        if x.ndim == 4:",
    "            x = x.reshape(2)",
    "        y = fast(x) if self._use_cudnn else slow(x)",
    "        try:",
    "            import cupy",
    "        except ImportError:",
    "            cupy = None",
    "        if isinstance(x, cuda.ndarray):",
    "            return self.on_gpu(x)",
    "        return self.on_cpu(x)",
]


GUARD = [
    "    def check(self, device):",
    "        if callable(device):",
    "            raise RuntimeError('functions are not devices')",
    "        return place(device)",
]


def candidate_trace():
    tree = root(
        n("Conv.forward", n("Conv.forward_cpu", call_lines=[103]), file="fw/conv.py", line=100, lines=[101, 102, 103]),
        n("F.apply", n("slow", call_lines=[203]), n("F.on_cpu", call_lines=[210]), file="fw/f.py", line=200,
          lines=[201, 203, 204, 205, 206, 207, 208, 210]),
        n("G.check", n("place", call_lines=[303]), file="fw/g.py", line=300, lines=[301, 303]),
    )
    return Trace(META, [Run("forward", "warm", {"python": tree})],
                 {("fw/conv.py", 100): CAND_SOURCE, ("fw/f.py", 200): BRANCHES, ("fw/g.py", 300): GUARD})


def test_candidates_name_the_taken_and_untaken_arms():
    cands = find_candidates(candidate_trace())
    first = cands[0]
    assert (first.function, first.line, first.kind, first.condition) == ("fw.Conv.forward", 102, "if", "xp is numpy")
    assert first.matched == ["numpy", "xp"]
    arms = {a.label: a for a in first.arms}
    assert arms["if"].ran and arms["if"].calls == ["self.forward_cpu"] and arms["if"].observed == ["self.forward_cpu"]
    assert arms["else"].ran is False and arms["else"].calls == ["self.forward_gpu"]
    assert first.taken == ["if"] and first.untaken == ["else"]


def test_candidates_other_branch_kinds():
    cands = find_candidates(candidate_trace())[1:]
    by_line = {c.line: c for c in cands}
    assert 201 not in by_line  # `x.ndim == 4` is not about the device
    ifexp = by_line[203]
    assert ifexp.kind == "ifexp" and ifexp.condition == "self._use_cudnn"
    assert [(a.label, a.ran) for a in ifexp.arms] == [("then", False), ("else", True)]
    tried = by_line[204]
    assert tried.kind == "try" and "cupy" in tried.matched
    assert [(a.label, a.ran) for a in tried.arms] == [("try", True), ("except ImportError", True)]
    typed = by_line[208]
    assert typed.condition == "isinstance(x, cuda.ndarray)"
    assert [(a.label, a.ran, a.calls) for a in typed.arms] == [("if", False, ["self.on_gpu"]),
                                                               ("after the if", True, ["self.on_cpu"])]


def test_a_branch_that_only_raises_on_the_other_arm_is_a_guard():
    cands = find_candidates(candidate_trace())
    (guard,) = [c for c in cands if c.guard]
    assert guard.function == "fw.G.check" and guard.condition == "callable(device)"
    assert [(a.label, a.ran, a.raises) for a in guard.arms] == [("if", False, True), ("after the if", True, False)]
    assert not any(c.guard for c in cands if c is not guard) and guard.to_json()["guard"] is True


def test_candidates_render():
    console = Console(record=True, width=120, color_system=None)
    print_candidates(find_candidates(candidate_trace()), console, None)
    text = console.export_text()
    assert "xp is numpy" in text and "✗ not taken" in text and "self.forward_gpu" in text
    assert "1 more only raise on the arm not taken (input checks), not shown" in text and "callable(device)" not in text


# ----------------------------------------------------------------------------- graphs


def test_call_graph_and_merged_graph_sides():
    a = root(n("f", n("shared_leaf"), n("cpu_only", n("deep_a"))))
    b = root(n("f", n("shared_leaf"), n("gpu_only")))
    g = call_graph(a, k=K)
    assert g.number_of_nodes() == 5 and g.number_of_edges() == 4
    m = merged_graph(a, b, k=K)
    side = {data["label"]: data["side"] for _, data in m.nodes(data=True)}
    assert side == {"probe": "shared", "fw.f": "shared", "fw.shared_leaf": "shared", "fw.cpu_only": "A-only",
                    "fw.deep_a": "A-only", "fw.gpu_only": "B-only"}
    assert [data["label"] for _, data in m.nodes(data=True) if data["split"]] == ["fw.f"]
    # from a diff result: same graph, same split
    result = diff_trees(a, b, k=K)
    assert set(merged_graph(result, k=K).nodes) == set(m.nodes)


def test_merged_graph_respects_the_sampling_threshold():
    a, b = sampled_pair(noise_a=3)
    m = merged_graph(diff_trees(a, b, "native", k=K), k=K)
    assert not any(d["split"] for _, d in m.nodes(data=True))
    assert all(d["side"] == "shared" for _, d in m.nodes(data=True))


# ----------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    a, b = forward_trees()
    save(trace(a), d / "a.json")
    save(trace(b, device="gpu"), d / "b.json.gz")
    save(trace(b, primitive="relu"), d / "relu.json")
    save(candidate_trace(), d / "one.json")
    (d / "corrupt.json").write_text('{"format": "dltrace-trace", "version": 1, "meta"')
    return d


def test_cli_json(saved):
    proc = dltrace("diff", str(saved / "a.json"), str(saved / "b.json.gz"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "diff" and doc["split_count"] == 1 and doc["threshold"] == 0.02
    assert doc["layers"][0]["splits"][0]["frame"] == "fw.Conv.forward"


def test_cli_text(saved):
    proc = dltrace("diff", str(saved / "a.json"), str(saved / "b.json.gz"), "--layer", "python")
    assert proc.returncode == 0, proc.stderr
    assert "split in fw.Conv.forward" in proc.stdout and "device dispatch" in proc.stdout


def test_cli_single_trace_candidates(saved):
    proc = dltrace("diff", str(saved / "one.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "candidates"
    first = doc["candidates"][0]
    assert first["untaken"] == ["else"] and first["arms"][1]["calls"] == ["self.forward_gpu"]
    assert first["dispatches"] and first["untaken_calls"] == ["self.forward_gpu"]
    proc = dltrace("diff", str(saved / "one.json"))
    assert proc.returncode == 0 and "Candidate split points" in proc.stdout


@pytest.mark.parametrize("args, expected", [
    (["corrupt.json", "a.json"], "corrupt or truncated trace"),
    (["a.json", "missing.json"], "cannot read"),
    (["a.json", "relu.json"], "different primitives (A: conv2d, B: relu); use --force"),
    (["a.json", "b.json.gz", "--layer", "native"], "no native layer in both traces"),
    (["a.json", "b.json.gz", "--threshold", "1.5"], "threshold 1.5"),
    (["a.json", "b.json.gz", "--pass", "backward"], "no warm backward run"),
])
def test_cli_errors_are_one_line(saved, args, expected):
    args = [str(saved / a) if a.endswith((".json", ".gz")) else a for a in args]
    assert expected in one_line_error(dltrace("diff", *args))


def test_cli_force(saved):
    proc = dltrace("diff", str(saved / "a.json"), str(saved / "relu.json"), "--force", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "different primitives" in json.loads(proc.stdout)["warnings"][0]


@pytest.mark.parametrize("frame, tag", [
    (Frame("native", "", "mxnet::op::MKLDNNConvolutionForward::Execute", lib="libmxnet.so"), "oneDNN"),
    (Frame("native", "", "tensorflow::MklConvOp<Eigen::ThreadPoolDevice, float>::Compute",
           lib="_pywrap_tensorflow_internal.so"), "oneDNN"),
    (Frame("native", "", "tensorflow::Conv2DOp<Eigen::ThreadPoolDevice, float>::Compute",
           lib="_pywrap_tensorflow_internal.so"), "TensorFlow core"),
    (Frame("op", "xla", "fusion.1"), "XLA"),
    (Frame("op", "xla", "convolution"), "XLA"),
])
def test_framework_onednn_integrations_and_xla_ops(frame, tag):
    assert library_of(frame, k=K) == tag


def test_native_kernels_are_the_computing_leaves():
    tree = root(native("at::native::conv2d",
                       native("malloc", count=30, lib="libc.so.6"),
                       native("[unknown]", count=20, lib="libtorch_cpu.so"),
                       native("at::native::im2col", count=25),
                       native("dnnl::impl::cpu::x64::jit_avx2_convolution_fwd_t::execute", count=10),
                       native("at::native::rare", count=1), count=86), count=100)
    assert native_kernels(tree, k=K) == [("dnnl::impl::cpu::x64::jit_avx2_convolution_fwd_t::execute", 10),
                                    ("at::native::im2col", 25)]


def test_the_deciding_statement_is_the_last_shared_branch_above_the_lines_one_side_ran():
    source = ["def conv(x):", "    w = x.weight", "    if x.is_mkldnn:", "        return mkldnn(x)",
              "    return thnn(x)"]
    frame = Frame("python", "fw.conv", "conv", "fw/conv.py", 10)
    frag = source_fragment(frame, source, {10, 11, 12, 13}, {10, 11, 12, 14}, set(), set(), "AB",
                           ["mkldnn"], ["thnn"])
    assert frag.kind == "source" and frag.decision_line == 12
    assert [(c.line, c.ran, c.decision) for c in frag.lines] == [
        (10, "AB", False), (11, "AB", False), (12, "AB", True), (13, "A", False), (14, "B", False)]
    # no source for an op: the names on each side, said why
    ga, gb = [Node(Frame("op", "aten", "aten::conv2d"), 1, 1)], [Node(Frame("op", "aten", "aten::conv2d"), 1, 1)]
    (names,) = fragments(ga, gb, [], [], ["a"], ["b"], {}, {})
    assert names.kind == "symbols" and names.decision_line is None and "op-level records" in names.note


def test_a_native_branch_reaches_what_computed_never_a_helper():
    """A native branch's "reaches" follows the kernel cells' rule (cpu_kernel.computes):
    a stack ending in a helper (write, a refcount release) or unnamed code counts for the
    computing frame above it, a stack reaching none counts for nothing (issue 60: MXNet's
    "reaches: [unknown], write, std::_Sp_counted_base<, ...")."""
    conv = "dnnl::impl::cpu::x64::jit_avx2_conv_fwd_kernel_f32::execute"

    def tree(onednn):
        if onednn:
            branch = native("at::native::mkldnn_convolution",
                            native(conv, native("write", count=300, lib="libc.so.6"),
                                   native("[unknown]", count=200, lib=""), count=500),
                            native("c10::intrusive_ptr_target::release", count=100, lib="libc10.so"), count=600)
        else:
            branch = native("at::native::slow_conv2d", native("sgemm_kernel", count=600, lib="libopenblas.so"),
                            count=600)
        return root(native("at::native::conv2d", branch, count=600), count=600)

    (split,) = diff_trees(tree(True), tree(False), "native", sampled=True, k=K).splits
    (a,) = split.only_a
    # the helpers' and the unnamed samples counted for the frame above them that computes
    assert a.hot == [conv, "at::native::mkldnn_convolution"]
    text = _printed(split)
    assert "write" not in text and "[unknown]" not in text and "intrusive_ptr" not in text
    # a python or op layer's leaves are its calls, listed as before
    (op,) = diff_trees(root(n("fw.a", n("fw.helper"))), root(n("fw.b", n("fw.other"))), "python", k=K).splits
    assert op.only_a[0].hot == ["fw.fw.helper"]  # module.name


def _printed(split):
    """The split's branches as the diff's console prints them."""
    from tracer.render.diff_console import _branch

    return "\n".join(_branch(side, b, False).plain for side, bs in (("A", split.only_a), ("B", split.only_b))
                     for b in bs)
