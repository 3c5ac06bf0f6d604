"""How far a weaker class of GPU evidence agrees with a recording (tracer.analysis.agreement),
on cells made here: same op and library count, AMD profiles are not set against an
NVIDIA recording, and every entry of a class is one comparison."""

from __future__ import annotations

from tracer.analysis.agreement import agreement, gpu_vendor, kernel_family
from tracer.analysis.gpu_cells import GpuCell, GpuEvidence


def ev(cls: str, label: str, gpu: str, op: str, kernel: str, lib: str, ops: list[str]) -> GpuEvidence:
    return GpuEvidence(cls, label, "here", gpu, "1", op, [kernel], lib, ops=ops)


REC = ev("recorded", "gpu", "NVIDIA H100 80GB HBM3", "aten::cudnn_convolution", "sm90_xmma_fprop_x", "cuDNN",
         ["aten::conv2d", "aten::cudnn_convolution", "aten::add_"])


def test_each_entry_of_a_class_counts_against_a_recording_of_its_vendor():
    cells = [GpuCell("conv2d", "forward", None, [
        REC,
        ev("imported", "gpu a100", "NVIDIA A100", "aten::cudnn_convolution", "sm80_xmma_fprop_y", "cuDNN",
           ["aten::conv2d", "aten::cudnn_convolution", "aten::relu"]),
        ev("imported", "gpu v100", "Tesla V100-SXM2-16GB", "aten::_convolution", "volta_scudnn_z", "cuDNN",
           ["aten::_convolution"]),
        ev("imported", "gpu mi300x", "AMD Instinct MI300X", "aten::miopen_convolution", "igemm_fwd", "MIOpen", []),
        ev("registered", "gpu registered", "", "aten::cudnn_convolution", "CUDA: cudnn_convolution", "cuDNN",
           ["aten::conv2d", "aten::cudnn_convolution", "aten::add_"]),
    ])]
    imported, registered = agreement(cells)
    assert (imported.evidence, imported.cells, imported.same_op, imported.same_library) == ("imported", 2, 1, 2)
    assert imported.same_family == 1  # sm80_xmma and sm90_xmma are one family; volta_scudnn another
    assert imported.ops_recorded == 6 and imported.ops_found == 2 and imported.ops_named == 4
    assert [d[2] for d in imported.disagree] == ["recorded aten::cudnn_convolution (cuDNN); "
                                                 "imported aten::_convolution (cuDNN)"]
    assert (registered.cells, registered.same_op, registered.recall, registered.precision) == (1, 1, 1.0, 1.0)


def test_no_recording_no_agreement():
    cell = GpuCell("relu", "forward", None, [ev("registered", "gpu registered", "", "aten::relu", "CUDA: relu",
                                                "PyTorch CUDA kernels", ["aten::relu"])])
    assert agreement([cell]) == []


def test_names():
    assert gpu_vendor("AMD Radeon Graphics") == gpu_vendor("AMD Instinct MI300X") == "AMD"
    assert gpu_vendor("Tesla V100-SXM2-32GB") == gpu_vendor("NVIDIA H100 80GB HBM3") == "NVIDIA"
    assert gpu_vendor("") == ""
    assert kernel_family("custom-call:__cudnn$convForward") == "cudnn"
    assert kernel_family("CUDA: cudnn_convolution") == "cudnn"
    assert kernel_family("sm80_xmma_fprop_implicit_gemm") == kernel_family("sm90_xmma_dgrad") == "xmma"
    assert kernel_family("void cutlass::Kernel2<cutlass_80_simt_sgemm>") == "cutlass"
