"""What a new backend must implement, read from dispatch tables (tracer.analysis.backend_needs),
on synthetic traces: torch's dispatch-key rows, TensorFlow's registry rows, and rows a
probe judged itself (the schema a sixth framework can use without touching the tool)."""

from __future__ import annotations

from tracer.analysis.backend_needs import backend_needs
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node, Run, Trace

K = knowledge()

META = {"primitive": "conv2d", "api": "functional", "device": "cpu", "variant": "default"}


def _trace(framework: str, dispatch: dict[str, object]) -> Trace:
    root = Node(Frame("root", "", "conv2d.forward"), 1)
    return Trace({**META, "framework": framework, "dispatch": dispatch}, [Run("forward", "warm", {"op": root})])


def test_dispatch_key_rows():
    needs = backend_needs([_trace("torch", {"new_backend_key": "PrivateUse1", "ops": {
        "aten::conv2d": {"kernels": ["CompositeImplicitAutograd"]},
        "aten::add.Tensor": {"delegate": "add.out", "delegate_declared": {"CPU": "add_out", "CUDA": "add_out"}},
        "aten::convolution_overrideable": {"kernels": ["CPU"], "declared": {"CPU": "conv_cpu", "Lazy": "x"}},
        "aten::copy_": {"kernels": ["CompositeExplicitAutograd"], "new_backend": True},
    }})], k=K)
    assert needs is not None and needs.key == "PrivateUse1"
    assert needs.must_implement == ["aten::add.out", "aten::convolution_overrideable"]
    assert dict(needs.free) == {"aten::conv2d": "decomposes into other ops", "aten::copy_": "backend-agnostic kernel"}
    assert needs.others == {"aten::add.out": {"CPU": "add_out", "CUDA": "add_out"},
                            "aten::convolution_overrideable": {"CPU": "conv_cpu"}}


def test_rows_the_probe_judged_are_read_as_written():
    needs = backend_needs([_trace("sixth", {"new_backend_key": "CustomDevice", "ops": {
        "conv2d": {"must": True, "implement": ["conv2d_kernel"], "others": {"GPU": "cudnn_conv2d"}},
        "reshape": {"must": False, "free": "a view: any device"},
        "elementwise_add": {"must": True},
    }})], k=K)
    assert needs is not None and needs.key == "CustomDevice"
    assert needs.must_implement == ["conv2d_kernel", "elementwise_add"]
    assert needs.free == [("reshape", "a view: any device")]
    assert needs.others == {"conv2d_kernel": {"GPU": "cudnn_conv2d"}}


def test_no_table_no_needs():
    assert backend_needs([_trace("fw", {"error": "RuntimeError: no registry"})], k=K) is None


def test_a_cpu_librarys_op_is_neither_free_nor_to_implement_and_must_wins_over_free():
    forward = _trace("torch", {"new_backend_key": "PrivateUse1", "ops": {
        "aten::mkldnn_convolution": {"kernels": ["CompositeExplicitAutograd"], "new_backend": True},
        "aten::mm": {"kernels": ["CompositeExplicitAutograd"], "new_backend": True},
    }})
    backward = _trace("torch", {"new_backend_key": "PrivateUse1", "ops": {
        "aten::mm": {"kernels": ["CPU", "CUDA"]},
    }})
    needs = backend_needs([forward, backward], k=K)
    assert needs is not None and needs.cpu_library == ["aten::mkldnn_convolution"]
    assert needs.must_implement == ["aten::mm"] and needs.free == []
