"""`dltrace import`: real GPU profiler files recorded by other people (reference/imported/,
see its PROVENANCE.md) become dltrace traces whose op layer has the CPU probe's shape.

Every assertion on a reference file is a fact read from that file (the op the
dispatcher chose, the kernels it launched, the GPU it ran on), so these tests
check the importer against real NVIDIA and AMD recordings on a machine without a
GPU. The bad-input tests go through the real command: one line, never a traceback.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer.contract import Exit
from tracer.importers import Imported, ImportFailed, import_file
from tracer.importers.provenance import provenance
from tracer.processing.tags import is_gpu_lib, is_vendor_lib, library_of
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node, Run, Trace, load, save

K = knowledge()

#: Under pytest-xdist (make test-fast), this module's tests run on one worker, so the
#: reference files are imported once, not once per worker.
pytestmark = pytest.mark.xdist_group("kineto-reference-imports")

REF = Path(__file__).resolve().parent.parent / "tracer" / "reference" / "imported"
XPLANE = REF / "jax-conv3d-mi300x.xplane.pb"
#: What each Kineto reference file holds: primitive -> passes (facts of the files).
BOTH = ("forward", "backward")
EXPECTED = {
    "alexnet-a100": {"dense": ("forward",), "conv2d": ("forward",), "relu": ("forward",), "maxpool2d": ("forward",)},
    "mlp-train-mi250": {"dense": BOTH, "relu": BOTH},
    "mlp-train-rtx2080ti": {"dense": BOTH, "relu": BOTH, "softmax": BOTH},
    "resnet-train-mi300x": {p: BOTH for p in ("dense", "conv2d", "relu", "maxpool2d", "batchnorm")},
    "resnet-train-rtx2080ti": {p: BOTH for p in ("dense", "conv2d", "relu", "maxpool2d", "batchnorm")},
    "resnet-train-v100": {p: BOTH for p in ("dense", "conv2d", "relu", "maxpool2d", "batchnorm")},
    "vit-h100": {"dense": ("forward",), "conv2d": ("forward",), "tanh": ("forward",)},
    "vit-mi300x": {"dense": ("forward",), "conv2d": ("forward",), "tanh": ("forward",)},
}
GPUS = {"alexnet-a100": "NVIDIA A100-PG509-200", "mlp-train-mi250": "AMD Radeon Graphics",
        "mlp-train-rtx2080ti": "NVIDIA GeForce RTX 2080 Ti", "resnet-train-mi300x": "AMD Instinct MI300X",
        "resnet-train-rtx2080ti": "NVIDIA GeForce RTX 2080 Ti", "resnet-train-v100": "Tesla V100-SXM2-32GB",
        "vit-h100": "NVIDIA H100 80GB HBM3", "vit-mi300x": "AMD Instinct MI300X VF"}


@pytest.fixture(scope="module")
def imported() -> dict[str, dict[str, Imported]]:
    """Every Kineto reference file imported once: source -> primitive -> result."""
    return {name: {r.primitive: r for r in import_file(REF / f"{name}.kineto.json.gz", "torch", "pytest")}
            for name in EXPECTED}


def op_root(imported, source: str, primitive: str, pass_: str = "forward") -> Node:
    root = imported[source][primitive].trace.layer(pass_, "op")
    assert root is not None, f"{source} {primitive}: no {pass_} op layer"
    return root


def chain(root: Node, *names: str) -> Node:
    """The node reached from ``root`` through children named ``names``, in order."""
    node = root
    for name in names:
        found = [c for c in node.children if c.frame.name == name]
        assert found, f"no {name!r} under {node.frame.name!r} (children: {[c.frame.name[:60] for c in node.children]})"
        node = found[0]
    return node


def kernel_libs(node: Node) -> set[str]:
    """Library tags of the GPU kernels directly under an op (memcpy and memset left out)."""
    return {library_of(c.frame, k=K) for c in node.children
            if c.frame.module in ("cuda", "hip") and not c.frame.name.startswith(("Memcpy", "Memset"))}


# ----------------------------------------------------------------------------- every reference file


@pytest.mark.slow
def test_every_kineto_reference_file_imports_with_its_primitives_and_passes(imported, tmp_path):
    for source, expected in EXPECTED.items():
        got = {p: tuple(r.passes) for p, r in imported[source].items()}
        assert got == expected, source
        for primitive, r in imported[source].items():
            meta = r.trace.meta
            assert (meta["framework"], meta["api"], meta["device"], meta["primitive"]) == \
                ("torch", "imported", "gpu", primitive)
            assert meta["variant"] == source and meta["emulated"] is False
            assert meta["machine"]["gpu"] == GPUS[source] == r.gpu
            assert meta["machine"]["vendor"] == ("AMD" if "mi" in source else "NVIDIA")
            assert [run.phase for run in r.trace.runs] == ["warm"] * len(expected[primitive])
            # each trace survives the trace format's own checks
            path = tmp_path / f"{source}-{primitive}.json"
            save(r.trace, path)
            back = load(path)
            assert back.layer("forward" if "forward" in r.passes else "backward", "op").size() > 1


def test_provenance_names_the_source_repository_commit_and_license(imported):
    prov = imported["alexnet-a100"]["conv2d"].trace.meta["provenance"]
    assert prov["source"] == "alexnet-a100.kineto.json.gz" and prov["imported_by"] == "dltrace import"
    assert prov["origin"] == ("facebookresearch/HolisticTraceAnalysis@f4d0062c:tests/data/critical_path/alexnet/"
                              "benchmark_result_2869224_1695835535_trace.json.gz")
    assert (prov["license"].startswith("MIT (Copyright (c) Meta Platforms")
            and "HolisticTraceAnalysis-LICENSE" in prov["license"])
    assert len(prov["sha256"]) == 64
    tracelens = imported["vit-h100"]["dense"].trace.meta["provenance"]
    assert tracelens["repository"] == "AMD-AGI/TraceLens" and tracelens["commit"] == "171dd747"
    assert "Advanced Micro Devices" in tracelens["license"] and "never timings" in tracelens["terms"]
    param = imported["mlp-train-rtx2080ti"]["softmax"].trace.meta["provenance"]
    assert param["origin"] == "facebookresearch/param@1e115ffc:et_replay/tests/inputs/linear_kineto.json.gz"


def test_meta_keeps_recorded_versions_and_never_the_recorders_environment(imported):
    vit = imported["vit-h100"]["conv2d"].trace.meta
    assert vit["framework_version"] == "2.6.0+cu124" and vit["gpu_software"]["cuda_runtime_version"] == 12040
    assert vit["machine"]["arch"] == "x86_64" and vit["shape"] == [4, 3, 224, 224] and vit["dtype"] == "c10::BFloat16"
    amd = imported["vit-mi300x"]["conv2d"].trace.meta
    assert (amd["framework_version"] == "2.7.0+gitf717b2a"
            and amd["gpu_software"]["torch_env.miopen_runtime_version"] == "3.4.0")
    # files without the information say so instead of guessing
    alex = imported["alexnet-a100"]["conv2d"].trace.meta
    assert alex["framework_version"] == "unknown" and alex["machine"]["arch"] == "unknown" and alex["shape"] == []
    # the headers also hold an access token, host and user names: none of it is copied
    for source in ("vit-h100", "vit-mi300x", "resnet-train-v100"):
        text = json.dumps([r.trace.meta for r in imported[source].values()])
        for secret in ("HF_TOKEN", "hf_", "host_name", "twshared", "username", "HOSTNAME", "KUBERNETES"):
            assert secret not in text, (source, secret)


# ----------------------------------------------------------------------------- the paths each GPU took


def test_alexnet_a100_conv2d_reaches_cudnn_convolution_with_cudnn_kernels(imported):
    conv = chain(op_root(imported, "alexnet-a100", "conv2d"), "aten::conv2d", "aten::convolution", "aten::_convolution",
                 "aten::cudnn_convolution")
    assert library_of(conv.frame, k=K) == "cuDNN" and "cuDNN" in kernel_libs(conv)
    assert all(c.frame.module == "cuda" for c in conv.children if c.frame.name.startswith("cudnn_ampere"))
    assert conv.count == 10  # 5 convolutions x (warm-up + measured) forward: no ProfilerStep, the whole file
    stats = imported["alexnet-a100"]["conv2d"].trace.runs[0].stats["layers"]["op"]
    assert stats["step"] == "whole file" and stats["instances"] == 10


def test_vit_mi300x_conv2d_reaches_miopen_convolution_with_miopen_kernels(imported):
    conv = chain(op_root(imported, "vit-mi300x", "conv2d"), "aten::conv2d", "aten::convolution", "aten::_convolution",
                 "aten::miopen_convolution")
    assert library_of(conv.frame, k=K) == "MIOpen" and kernel_libs(conv) == {"MIOpen"}
    assert any(c.frame.name.startswith("igemm_fwd_gtcx3_nhwc_bf16") and c.frame.module == "hip" for c in conv.children)
    # the bias add that follows is PyTorch's own HIP kernel
    add = chain(conv, "aten::add_")
    assert kernel_libs(add) == {"PyTorch HIP kernels"}


def test_vit_h100_dense_runs_cublas_cutlass_kernels_and_its_conv_cudnn(imported):
    addmm = chain(op_root(imported, "vit-h100", "dense"), "aten::linear", "aten::addmm")
    # the CUTLASS GEMMs under addmm are cuBLASLt's choice: cuBLAS's, as its log would say
    assert kernel_libs(addmm) == {"cuBLAS"}
    assert any("cutlass_80_tensorop" in c.frame.name for c in addmm.children), [c.frame.name for c in addmm.children]
    conv = chain(op_root(imported, "vit-h100", "conv2d"), "aten::conv2d", "aten::convolution", "aten::_convolution",
                 "aten::cudnn_convolution")
    assert any(c.frame.name.startswith("void cutlass__5x_cudnn::Kernel") for c in conv.children)
    assert kernel_libs(conv) == {"cuDNN"}


def test_mlp_mi250_dense_reaches_addmm_with_a_hipblaslt_kernel_forward_and_backward(imported):
    addmm = chain(op_root(imported, "mlp-train-mi250", "dense"), "aten::linear", "aten::addmm")
    assert "hipBLASLt" in kernel_libs(addmm)
    assert imported["mlp-train-mi250"]["dense"].trace.meta["shape"] == [5, 128]
    back = op_root(imported, "mlp-train-mi250", "dense", "backward")
    mm = chain(back, "autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm")
    assert kernel_libs(mm) == {"hipBLASLt"}
    # aten::linear's aten::t links to TBackward0 by its own flow: the CPU probe's backward has it too
    chain(back, "autograd::engine::evaluate_function: TBackward0", "TBackward0")
    assert imported["mlp-train-mi250"]["dense"].trace.runs[1].stats["layers"]["op"]["linked_by"] == "fwdbwd flows"


def test_resnet_v100_batchnorm_reaches_cudnn_batch_norm_and_has_a_backward_run(imported):
    bn = chain(op_root(imported, "resnet-train-v100", "batchnorm"), "aten::batch_norm", "aten::_batch_norm_impl_index",
               "aten::cudnn_batch_norm")
    assert kernel_libs(bn) == {"cuDNN"} and bn.count == 53  # ResNet-50: 53 batch norms in one step
    back = op_root(imported, "resnet-train-v100", "batchnorm", "backward")
    node = chain(back, "autograd::engine::evaluate_function: CudnnBatchNormBackward0", "CudnnBatchNormBackward0",
                 "aten::cudnn_batch_norm_backward")
    assert kernel_libs(node) == {"cuDNN"}
    runs = imported["resnet-train-v100"]["batchnorm"].trace.runs
    assert [r.pass_ for r in runs] == ["forward", "backward"]
    assert {r.stats["layers"]["op"]["step"] for r in runs} == {"ProfilerStep#105"}  # the last of 101..105


def test_resnet_mi300x_uses_miopen_for_conv_and_pytorch_kernels_for_bf16_batchnorm(imported):
    conv = chain(op_root(imported, "resnet-train-mi300x", "conv2d"), "aten::conv2d", "aten::convolution",
                 "aten::_convolution", "aten::miopen_convolution")
    assert {"MIOpen", "rocBLAS", "Composable Kernel"} <= kernel_libs(conv)
    bn = chain(op_root(imported, "resnet-train-mi300x", "batchnorm"), "aten::batch_norm",
               "aten::_batch_norm_impl_index", "aten::native_batch_norm")
    assert kernel_libs(bn) == {"PyTorch HIP kernels"}
    # activation checkpointing reruns convolutions inside the backward pass: those are not forward instances
    stats = imported["resnet-train-mi300x"]["conv2d"].trace.runs[0].stats["layers"]["op"]
    assert stats["instances"] == 20 and stats["recomputed_in_backward_left_out"] == 19
    relu_back = imported["resnet-train-mi300x"]["relu"].trace.runs[1].stats["layers"]["op"]
    assert relu_back["forward_ops_recomputed_inside"] > 0


def test_traces_without_flow_events_link_backward_nodes_by_name(imported):
    r = imported["resnet-train-rtx2080ti"]["conv2d"]
    assert r.trace.runs[1].stats["layers"]["op"]["linked_by"] == "autograd node names"
    back = chain(op_root(imported, "resnet-train-rtx2080ti", "conv2d", "backward"),
                 "autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0",
                 "aten::convolution_backward")
    assert "cuDNN" in kernel_libs(back)
    soft = chain(op_root(imported, "mlp-train-rtx2080ti", "softmax"), "aten::softmax", "aten::_softmax")
    assert kernel_libs(soft) == {"PyTorch CUDA kernels"}


def test_kernel_tags_come_from_the_tag_table():
    cases = {
        ("cuda", "void cudnn::ops::nchwToNhwcKernel<float>", ""): "cuDNN",
        ("cuda", "volta_sgemm_128x64_nn", ""): "cuBLAS",
        ("cuda", "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16>(x)", ""): "CUTLASS",
        ("cuda", "triton_poi_fused_add_0", ""): "Triton",
        ("hip", "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32", ""): "hipBLASLt",
        ("hip", "Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0", ""): "rocBLAS",
        ("hip", "naive_conv_fwd_nchw_float_double_float", ""): "MIOpen",
        ("hip", "MIOpenBatchNormFwdTrainSpatial", ""): "MIOpen",
        ("hip", "void at::native::vectorized_elementwise_kernel<4>(int)", "PyTorch HIP kernels"): "PyTorch HIP kernels",
        ("cuda", "void at::native::vectorized_elementwise_kernel<4>(int)", "PyTorch CUDA kernels"):
            "PyTorch CUDA kernels",
    }
    for (module, name, lib), tag in cases.items():
        assert library_of(Frame("op", module, name, lib=lib), k=K) == tag, name
    assert all(is_vendor_lib(lib, k=K) and is_gpu_lib(lib, k=K)
               for lib in ("hipBLASLt", "CUTLASS", "Triton", "PyTorch CUDA kernels", "PyTorch HIP kernels"))


# ----------------------------------------------------------------------------- the diff against the CPU probe


def cpu_conv2d() -> Trace:
    """The op layer `dltrace probe torch conv2d --layers op` records on CPU (torch 2.13, oneDNN)."""
    def op(name: str, *kids: Node, count: int = 1, module: str = "aten", lib: str = "") -> Node:
        return Node(Frame("op", module, name, lib=lib), count, 1000, children=list(kids))

    tree = Node(Frame("root", "", "conv2d.forward"), 1, 532701, children=[
        op("aten::conv2d", op("aten::convolution", op("aten::_convolution", op(
            "aten::mkldnn_convolution", op("aten::empty", count=2), op("aten::as_strided_"), op("aten::resize_")))))])
    back = Node(Frame("root", "", "conv2d.backward"), 1, 1000, children=[
        op("autograd::engine::evaluate_function: ConvolutionBackward0",
           op("ConvolutionBackward0", op("aten::convolution_backward", op("aten::empty", count=4)), module="torch"),
           module="torch")])
    meta = {"framework": "torch", "framework_version": "2.13.0+cpu", "primitive": "conv2d", "api": "functional",
            "device": "cpu", "variant": "default", "shape": [2, 3, 8, 8], "machine": {"arch": "x86_64", "cpu": "test"}}
    return Trace(meta, [Run("forward", "warm", {"op": tree}), Run("backward", "warm", {"op": back})])


@pytest.mark.parametrize("source, chosen", [("alexnet-a100", "aten::cudnn_convolution"),
                                            ("vit-mi300x", "aten::miopen_convolution")])
def test_diff_against_the_cpu_probe_splits_at_aten_convolution(imported, source, chosen):
    from tracer.processing.diff import diff_traces

    result = diff_traces(cpu_conv2d(), imported[source]["conv2d"].trace, "forward", "warm", ("op",), force=True, k=K)
    layer = next(ld for ld in result.layers if ld.layer == "op")
    first = layer.splits[0]
    assert first.frame == "aten::_convolution"
    assert first.path == ["conv2d.forward", "aten::conv2d", "aten::convolution", "aten::_convolution"]
    assert [b.label for b in first.only_a] == ["aten::mkldnn_convolution"]
    assert chosen in [b.label for b in first.only_b]


def test_backward_diff_aligns_the_autograd_nodes(imported):
    from tracer.processing.diff import diff_traces

    result = diff_traces(cpu_conv2d(), imported["resnet-train-v100"]["conv2d"].trace, "backward", "warm", ("op",),
                         force=True, k=K)
    layer = next(ld for ld in result.layers if ld.layer == "op")
    assert layer.shared >= 4  # root > evaluate_function > ConvolutionBackward0 > aten::convolution_backward
    assert any(s.frame == "aten::convolution_backward" for _, s in layer.all_splits())


# ----------------------------------------------------------------------------- schemas and sources


def _rewrite(src: Path, dst: Path, cats: dict[str, str]) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("cat") in cats:
            e["cat"] = cats[e["cat"]]
    dst.write_text(json.dumps(doc))


def test_old_schema_categories_import_the_same_paths(tmp_path):
    """torch 1.8-era files name the categories Operator, Kernel and Runtime: the real
    AlexNet events, recategorised so, give the same conv2d path and kernels."""
    old = tmp_path / "alexnet-old.json"
    _rewrite(REF / "alexnet-a100.kineto.json.gz", old,
             {"cpu_op": "Operator", "kernel": "Kernel", "cuda_runtime": "Runtime"})
    r = {x.primitive: x for x in import_file(old, "torch")}["conv2d"]
    conv = chain(r.trace.layer("forward", "op"), "aten::conv2d", "aten::convolution", "aten::_convolution",
                 "aten::cudnn_convolution")
    assert "cuDNN" in kernel_libs(conv)
    assert r.trace.meta["provenance"]["schema"] == "Operator"
    # not the reference file's bytes: its name and hash only, no borrowed origin
    assert "origin" not in r.trace.meta["provenance"]


def test_plain_json_imports_like_gzip(tmp_path):
    plain = tmp_path / "mlp-train-mi250.kineto.json"
    plain.write_bytes(gzip.decompress((REF / "mlp-train-mi250.kineto.json.gz").read_bytes()))
    got = {r.primitive: r.passes for r in import_file(plain, "torch")}
    assert got == {"dense": ["forward", "backward"], "relu": ["forward", "backward"]}


def test_malformed_events_are_left_out_and_counted(tmp_path):
    doc = json.loads(gzip.decompress((REF / "mlp-train-mi250.kineto.json.gz").read_bytes()))
    doc["traceEvents"] += [5, "x",
                           {"ph": "X", "cat": "cpu_op", "name": ["aten::relu"], "ts": 1, "dur": 1, "pid": 1, "tid": 1},
                           {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": "1", "dur": float("nan"),
                            "pid": 1, "tid": 1}]
    (tmp_path / "t.json").write_text(json.dumps(doc))
    r = import_file(tmp_path / "t.json", "torch")
    assert r[0].trace.meta["provenance"]["events_skipped_malformed"] == 4


def test_hostile_names_are_kept_as_recorded_and_printed_inert(tmp_path):
    evil = "evil\x1b]0;pwned\x07\u202e" + "A" * 5000
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 1, "dur": 10, "pid": 1, "tid": 1,
         "args": {"Input Dims": "oops", "Input type": [5]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 3, "dur": 1, "pid": 1, "tid": 1,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": evil, "ts": 5, "dur": 1, "pid": 0, "tid": 7, "args": {"correlation": 7}},
    ]
    src = tmp_path / "evil.json"
    src.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "GPU\x1b[31m"}],
                               "metadata": ["not", "a", "dict"]}))
    proc = dltrace("import", str(src), "--framework", "torch", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "GPU\\x1b[31m" in proc.stdout
    trace = load(tmp_path / "out" / "relu-imported.json")
    relu = chain(trace.layer("forward", "op"), "aten::relu")
    assert [c.frame.name for c in relu.children] == [evil] and trace.meta["shape"] == []


# ----------------------------------------------------------------------------- the command


def test_import_command_writes_one_trace_per_primitive(tmp_path):
    proc = dltrace("import", str(REF / "mlp-train-mi250.kineto.json.gz"), "--framework", "torch", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(
        "dense  forward+backward  AMD Radeon Graphics  4 kernels (4 launches)")
    folder = tmp_path / "imported" / "mlp-train-mi250"
    assert sorted(p.name for p in folder.iterdir()) == ["dense-imported.json", "relu-imported.json"]
    meta = load(folder / "dense-imported.json").meta
    assert (meta["command"].startswith("dltrace import")
            and meta["provenance"]["source"] == "mlp-train-mi250.kineto.json.gz")


def test_several_files_go_to_one_folder_each(tmp_path):
    files = [str(REF / "mlp-train-mi250.kineto.json.gz"), str(REF / "vit-mi300x.kineto.json.gz")]
    proc = dltrace("import", *files, "--framework", "torch", "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["mlp-train-mi250", "vit-mi300x"]


def _no_primitives(path: Path) -> None:
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": 4, "dur": 2, "pid": 1, "tid": 1}]}))


@pytest.mark.parametrize("make, why", [
    (lambda p: p.write_text("hello, world"), "not a Kineto trace (not JSON"),
    (lambda p: p.write_bytes((REF / "alexnet-a100.kineto.json.gz").read_bytes()[:5000]), "corrupt or truncated gzip"),
    (lambda p: p.write_bytes(b"\x1f\x8b" + b"not deflate" * 20), "corrupt or truncated gzip"),
    (lambda p: p.write_text("[" * 100000 + "]" * 100000), "nested too deeply"),
    (lambda p: p.write_text(json.dumps({"traceEvents": {"ph": "X"}})), "no traceEvents list"),
    (lambda p: p.write_text(json.dumps({"schemaVersion": 1})), "no traceEvents list"),
    (lambda p: p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "x"}, 7]})),
     "2 of them malformed, no host op"),
    (_no_primitives, "none of dltrace's primitives"),
    (lambda p: p.write_bytes(b""), "empty file"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, make, why):
    bad = tmp_path / "bad.json"
    make(bad)
    line = one_line_error(dltrace("import", str(bad), "--framework", "torch", "-o", str(tmp_path / "out")))
    assert str(bad) in line and why in line
    assert not list((tmp_path / "out").glob("*.json"))


def test_no_primitives_lists_what_the_file_holds(tmp_path):
    _no_primitives(tmp_path / "t.json")
    with pytest.raises(ImportFailed, match=r"most frequent: aten::add ×1, aten::mul ×1"):
        import_file(tmp_path / "t.json", "torch")


def test_unwritable_output_is_found_before_the_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_line_error(dltrace("import", str(REF / "vit-h100.kineto.json.gz"), "--framework", "torch",
                                  "-o", str(blocker / "out")))
    assert "cannot write" in line


def test_a_framework_without_profiler_formats_is_a_usage_error_before_any_work(tmp_path):
    # chainer's entry declares no profiles: nothing is read and no folder is made
    line = one_line_error(dltrace("import", str(REF / "vit-h100.kineto.json.gz"), "--framework", "chainer",
                                  "-o", str(tmp_path / "o")), code=Exit.USAGE)
    assert "chainer has no profiler format to import" in line and "torch, tensorflow, mxnet, jax" in line
    assert not (tmp_path / "o").exists()
    assert "unknown framework 'paddle'" in one_line_error(dltrace("import", str(XPLANE), "--framework", "paddle"),
                                                             code=Exit.USAGE)


def test_a_missing_file_and_a_profile_of_the_other_kind(tmp_path):
    assert "cannot read" in one_line_error(dltrace("import", str(tmp_path / "nope.json"), "--framework", "torch",
                                                   "-o", str(tmp_path / "o")))
    line = one_line_error(dltrace("import", str(XPLANE), "--framework", "torch", "-o", str(tmp_path / "o")))
    assert "binary data, not JSON; an XPlane .pb is imported with --framework jax" in line
    line = one_line_error(dltrace("import", str(REF / "vit-h100.kineto.json.gz"), "--framework", "jax",
                                  "-o", str(tmp_path / "o")))
    assert "not an XPlane protobuf (it is gzip" in line


# ----------------------------------------------------------------------------- JAX XPlane


def _jax_ready() -> bool:
    from tracer import envs, registry

    try:
        return envs.status(registry.load()["jax"]).ready
    except Exception:  # noqa: BLE001 - a registry without jax: the reader is not there
        return False


@pytest.fixture(scope="module")
def xplane_profile(frameworks):
    # make test sets the jax environment up: without it this fails, it does not skip
    assert _jax_ready(), "the jax environment is not set up (dltrace env setup jax): JAX reads XPlane files"
    from tracer import registry
    from tracer.importers.xplane import profile_of, read_xplane

    dump, _ = read_xplane(XPLANE, "jax", registry.load()["jax"].profile_vocab["xplane"].reader)
    return profile_of(dump, XPLANE)


def test_xplane_is_read_by_jax_and_names_jax_op_hlo_op_and_kernels(xplane_profile):
    from tracer.importers.kernels import kernel_lib
    from tracer.importers.xplane import split_op

    prof = xplane_profile
    assert prof.vendor == "AMD" and prof.devices == 8 and prof.device == "/device:GPU:0"
    assert prof.gpu == "AMD GPU (compute capability 9.4, 304 cores)"
    conv = [k for k in prof.kernels if split_op(k.op_path)[1] == "conv_general_dilated"]
    assert {k.hlo_op for k in conv} >= {"cudnn-conv.1"} and {k.hlo_module for k in conv} == {"jit_forward_3d_conv"}
    assert split_op(conv[0].op_path)[0] == "jit:forward_3d_conv"
    libs = {k.name.split("_")[0]: kernel_lib(k.name, "AMD") for k in conv if k.hlo_op == "cudnn-conv.1"}
    assert libs == {"Im3d2Col.kd": "MIOpen", "Cijk": "rocBLAS"}


def test_xplane_3d_convolution_is_not_taken_for_conv2d(tmp_path):
    proc = dltrace("import", str(XPLANE), "--framework", "jax", "-o", str(tmp_path / "o"))
    line = one_line_error(proc)
    if not _jax_ready():
        assert "dltrace env setup jax" in line
        return
    assert ("none of dltrace's primitives" in line
            and "conv_general_dilated is not 2-D here (jit_forward_3d_conv)" in line)


def test_xplane_trees_nest_jax_op_hlo_op_kernel():
    """The tree builder on a small hand-written reading (not a recording): a 2-D
    convolution's kernels under the JAX function, op and HLO instruction."""
    from tracer import registry
    from tracer.importers.xplane import Kernel, Profile, _slices, _tree, primitive_ops

    prof = Profile("/device:GPU:0", 1, "AMD", "AMD GPU", [
        Kernel("naive_conv_fwd_nchw_float", 1000, "jit(_conv2d)/conv_general_dilated", "cudnn-conv", "jit__conv2d"),
        Kernel("naive_conv_fwd_nchw_float", 1500, "jit(_conv2d)/conv_general_dilated", "cudnn-conv", "jit__conv2d"),
        Kernel("Cijk_Ailk_Bljk_SB_MT64x64", 700, "jit(_conv2d)/transpose(jvp(conv_general_dilated))", "cudnn-conv.2",
               "jit__conv2d"),
    ])
    slices, refused = _slices(prof, primitive_ops(registry.load()["jax"].profile_ops["xplane"]))
    assert not refused and set(slices["conv2d"]) == {"forward", "backward"}
    tree = _tree("conv2d", "forward", slices["conv2d"]["forward"], "AMD", "jax")
    kernel = chain(tree, "jit:_conv2d", "conv_general_dilated", "cudnn-conv", "naive_conv_fwd_nchw_float")
    assert (kernel.count, kernel.time_ns, library_of(kernel.frame, k=K)) == (2, 2500, "MIOpen")


REDACTED = ("vit-h100.kineto.json.gz", "vit-mi300x.kineto.json.gz")


def test_reference_copies_are_unchanged_with_their_licenses():
    shared = REF.parents[2] / "shared" / "gpu-traces"  # the originals, beside the project when at hand
    assert (REF / "PROVENANCE.md").exists() and (REF / "licenses" / "TraceLens-LICENSE").exists()
    assert len(list(REF.glob("*.kineto.json.gz"))) == 10 and XPLANE.exists()
    for name in REDACTED:  # no access token republished
        text = gzip.decompress((REF / name).read_bytes()).decode()
        assert "HF_TOKEN" not in text and not re.search(r"hf_[A-Za-z0-9]{20}", text)
    if shared.exists():  # the copies are the originals, byte for byte, or redact.py's copy of them
        sys.path.insert(0, str(REF))
        from redact import redact

        for f in shared.rglob("*"):
            if not f.is_file():
                continue
            copy = REF / f.relative_to(shared)
            if f.name == "PROVENANCE.md":  # the copy adds what this repository changed, and why
                assert copy.read_text().startswith(f.read_text().rstrip("\n")), f
            elif f.name in REDACTED:
                original = redact(json.loads(gzip.decompress(f.read_bytes())))
                assert json.loads(gzip.decompress(copy.read_bytes())) == original, f
                assert provenance(f.name, hashlib.sha256(f.read_bytes()).hexdigest(), "kineto")["origin"]
            else:
                assert copy.read_bytes() == f.read_bytes(), f
