"""Real probes on the real frameworks (CPU): every primitive, both passes, cold and
warm, at each API level, and every variant; the trees show each framework's path."""

from __future__ import annotations

import pytest

from tracer.contract import PRIMITIVES
from tracer.processing.summary import summarize

FRAMEWORKS = ["torch", "tensorflow", "chainer", "mxnet", "jax"]


def trace_of(cpu_traces, fw, primitive="conv2d", api="functional", variant="default"):
    res = cpu_traces[(fw, variant, primitive, api)]
    assert res.error is None, f"{fw} {primitive} {api} {variant}: {res.error}\n{res.detail}"
    return res.load()


def names(tree, kind=None):
    return {n.frame.label for _, n in tree.walk() if kind is None or n.frame.kind == kind}


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_primitive_every_api_both_passes(cpu_traces, frameworks, fw):
    for primitive in PRIMITIVES:
        for api in frameworks[fw].apis:
            t = trace_of(cpu_traces, fw, primitive, api)
            assert (t.meta["framework"], t.meta["primitive"], t.meta["api"], t.meta["device"]) == \
                (fw, primitive, api, "cpu")
            assert t.meta["machine"]["arch"] and "python" in t.meta["machine"]
            assert {r.pass_ for r in t.runs} == set(PRIMITIVES[primitive].passes)
            for pass_ in PRIMITIVES[primitive].passes:  # an optimizer step (adam) has only a forward
                for phase in ("cold", "warm"):
                    tree = t.layer(pass_, "python", phase)
                    assert tree is not None and tree.frame.name == f"{primitive}.{pass_}"
                    # each primitive reaches the framework: Python frames or a C hand-off; a warm
                    # call of a jitted JAX function alone (its Adam update) is C++ that CPython
                    # 3.11's profile hook does not report: then its op layer has the program
                    seen = summarize(tree).python_functions + summarize(tree).c_handoffs
                    assert seen > 0 or (fw == "jax" and phase == "warm" and t.layer(pass_, "op", phase)), \
                        (fw, primitive, api, pass_, phase)
                st = t.run(pass_, "warm").stats
                assert st["untraced_s"] > 0 and st["traced_s"] > 0


def test_torch_conv2d_is_a_c_builtin_and_the_module_adds_python(cpu_traces):
    f = trace_of(cpu_traces, "torch").layer("forward")
    assert summarize(f).python_functions == 0
    assert names(f, "c") == {"torch._VariableFunctionsClass.conv2d"}
    lyr = trace_of(cpu_traces, "torch", api="layer").layer("forward")
    assert {"torch.nn.modules.conv.Conv2d.forward",
            "torch.nn.modules.conv.Conv2d._conv_forward"} <= names(lyr, "python")
    assert "torch._VariableFunctionsClass.conv2d" in names(lyr, "c")
    b = trace_of(cpu_traces, "torch").layer("backward")
    assert "torch._C._EngineBase.run_backward" in names(b, "c")


def test_tensorflow_conv2d_hands_off_to_the_eager_runtime(cpu_traces):
    f = trace_of(cpu_traces, "tensorflow").layer("forward")
    py = names(f, "python")
    assert any(n.endswith("nn_ops.conv2d") or n.endswith("convolution_v2") for n in py), py
    assert any("TFE_Py_FastPathExecute" in n or "TFE_Py_Execute" in n for n in names(f, "c")), names(f, "c")


def test_chainer_conv2d_takes_the_numpy_branch(cpu_traces):
    f = trace_of(cpu_traces, "chainer").layer("forward")
    py = names(f, "python")
    assert any(n.endswith("Convolution2DFunction.forward_cpu") for n in py), py
    assert not any(n.endswith("forward_gpu") for n in py)
    assert any(n.startswith("numpy") for n in names(f, "c")), names(f, "c")


def test_mxnet_generated_op_wrappers_are_traced(cpu_traces):
    f = trace_of(cpu_traces, "mxnet").layer("forward")
    gen = [n.frame for _, n in f.walk() if n.frame.kind == "python" and n.frame.file == "<string>"]
    assert any(fr.name == "Convolution" for fr in gen), [fr.label for fr in gen]
    assert any("MXImperativeInvoke" in n or "imperative_invoke" in n.lower() for n in names(f)), names(f)


def test_jax_conv2d_goes_through_jit_dispatch(cpu_traces):
    f = trace_of(cpu_traces, "jax").layer("forward")
    assert any(n.startswith("jax._src") for n in names(f, "python"))


@pytest.mark.parametrize("fw, variant", [("torch", "onednn-off"), ("tensorflow", "onednn-off"), ("mxnet", "onednn-off"),
                                         ("jax", "nojit"), ("tensorflow", "bf16"), ("chainer", "fp16"),
                                         ("mxnet", "bf16")])
def test_variants_run_and_are_recorded(cpu_traces, frameworks, fw, variant):
    spec = frameworks[fw].variants[variant]
    # a reduced-precision variant runs the first API level (survey.plan): the kernels, not the Python
    for api in frameworks[fw].apis[:1] if spec.switches == "precision" else frameworks[fw].apis:
        t = trace_of(cpu_traces, fw, api=api, variant=variant)
        assert t.meta["variant"] == variant
        assert t.meta["variant_env"] == spec.env
        assert t.meta["variant_set"] == spec.set  # read back after setting: the switch took effect
        assert t.layer("forward") is not None and t.layer("backward") is not None


def test_jax_nojit_runs_a_different_python_path(cpu_traces):
    jit = names(trace_of(cpu_traces, "jax").layer("forward"), "python")
    eager = names(trace_of(cpu_traces, "jax", variant="nojit").layer("forward"), "python")
    assert jit != eager
    assert any("pjit" in n for n in jit)


def test_cold_path_keeps_one_time_initialisation_apart(cpu_traces):
    # jax's first call traces and compiles the function; the warm call reuses it.
    t = trace_of(cpu_traces, "jax")
    cold, warm = names(t.layer("forward", phase="cold")), names(t.layer("forward"))
    assert any("compile" in n for n in cold - warm), sorted(cold - warm)[:20]
    assert not any(n.endswith("compiler.backend_compile") or n.endswith("backend_compile_and_load") for n in warm)


CPU_ONLY = '''import torch


def workload(device):
    w = torch.randn(4, 4, requires_grad=True)  # never moved to the device it is given
    x = torch.randn(2, 4)
    return (lambda: (x @ w).relu().sum()), (lambda loss: loss.backward())
'''


@pytest.mark.frameworks
def test_a_workload_that_puts_nothing_on_the_standin_says_so_not_an_empty_list(tmp_path):
    """An empty list would read as a backend that needs nothing."""
    from tests.conftest import dltrace, one_line_error

    (tmp_path / "cpu_only.py").write_text(CPU_ONLY)
    proc = dltrace("probe", "torch", "--workload", str(tmp_path / "cpu_only.py"), "--device", "standin", timeout=120)
    assert "its step put nothing on the standin device (no op reached it)" in one_line_error(proc)
