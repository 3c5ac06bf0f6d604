"""The six transformer primitives (layernorm, gelu, attention, embedding, crossentropy,
adam) in torch (both API levels, the CPU and the stand-in device) and JAX: the numbers
each computes against a numpy reference and against each other, in float32 and bfloat16
(tests/transformer_prims.py, run in each framework's environment), the framework's own ops
in the op layer, and the derived GPU readings (torch: registered, JAX: compiled).

One probe process per framework and device traces all cases (session fixtures)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import dltrace, one_line_error
from tests.test_ctrace import runner_env
from tests.test_standin import KNOWN
from tracer import envs
from tracer.contract import CANDIDATE_MODULE, PRIMITIVES, STANDIN_LIB, Exit
from tracer.derive import derive
from tracer.runner import CaseResult, CaseSpec, run_probe
from tracer.trace import Trace

NEW = [p for p, prim in PRIMITIVES.items() if prim.family == "transformer"]
APIS = {"torch": ("functional", "layer"), "jax": ("functional",)}
#: elementwise |got - want| <= atol + rtol * |want|, per element type: bfloat16 keeps 8 bits
#: of mantissa, and its inputs are the float32 data rounded
TOLERANCE = {"float32": (1e-5, 1e-4), "bfloat16": (2e-2, 2e-2)}
#: the differentiated arguments: the input and the parameters (the embedding: its table only)
GRADIENTS = {"layernorm": 3, "gelu": 1, "attention": 3, "embedding": 1, "crossentropy": 1, "adam": 0}


def _ready(fw) -> None:
    if not envs.status(fw).ready:
        pytest.fail(f"{fw.name}: environment not set up (dltrace env setup {fw.name})")


@pytest.fixture(scope="session")
def numbers(frameworks) -> dict[str, dict[str, dict[str, Any]]]:
    """framework -> dtype -> "PRIMITIVE-API" -> outputs, gradients and their numpy reference."""
    out = {}
    for name, apis in APIS.items():
        fw = frameworks[name]
        _ready(fw)
        cases = [f"{p}:{a}" for a in apis for p in NEW]
        proc = subprocess.run([str(envs.python_for(fw)), str(Path(__file__).with_name("transformer_prims.py")),
                               fw.probe, fw.devices["cpu"], "float32,bfloat16", *cases],
                              capture_output=True, text=True, timeout=600, env=runner_env(fw))
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[name] = json.loads(proc.stdout.splitlines()[-1])
    return out


def _specs(apis: tuple[str, ...]) -> list[CaseSpec]:
    return [CaseSpec(p, a, passes=PRIMITIVES[p].passes, layers=("python", "op")) for a in apis for p in NEW]


@pytest.fixture(scope="session")
def traces(frameworks, tmp_path_factory) -> dict[tuple[str, str, str, str], CaseResult]:
    """(framework, device, primitive, api) -> its trace: torch on the CPU and on the
    stand-in device, JAX on the CPU, each one probe process for all its cases."""
    root = tmp_path_factory.mktemp("transformer-prims")
    out = {}
    for name, device in (("torch", "cpu"), ("torch", "standin"), ("jax", "cpu")):
        fw = frameworks[name]
        _ready(fw)
        specs = _specs(APIS[name])
        for spec, res in zip(specs, run_probe(fw, specs, root / f"{name}-{device}", device, timeout=900)):
            out[(name, device, spec.primitive, spec.api)] = res
    return out


def _close(got: list[float], want: list[float], dtype: str) -> str | None:
    """Where ``got`` is not ``want`` within the dtype's tolerance, or None."""
    if len(got) != len(want):
        return f"{len(got)} values against {len(want)}"
    atol, rtol = TOLERANCE[dtype]
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if abs(g - w) > atol + rtol * abs(w)]
    return None if not bad else f"{len(bad)} of {len(got)} differ, first at {bad[0]}"


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("fw, api", [("torch", "functional"), ("torch", "layer"), ("jax", "functional")])
@pytest.mark.parametrize("primitive", NEW)
def test_outputs_and_gradients_match_numpy(numbers, fw, api, primitive, dtype):
    c = numbers[fw][dtype][f"{primitive}-{api}"]
    assert _close(c["out"], c["ref_out"], dtype) is None, ("output", _close(c["out"], c["ref_out"], dtype))
    # every differentiated argument has its gradient, in the reference's order (adam: none)
    assert len(c["grads"]) == len(c["ref_grads"]) == GRADIENTS[primitive]
    for i, (got, want) in enumerate(zip(c["grads"], c["ref_grads"])):
        assert _close(got, want, dtype) is None, (f"gradient {i}", _close(got, want, dtype))


@pytest.mark.parametrize("fw, api", [("torch", "functional"), ("torch", "layer"), ("jax", "functional")])
def test_each_adam_call_is_one_more_step(numbers, fw, api):
    # in float32 every step moves every entry by ~lr (1e-3), well beyond the tolerance: a step not
    # taken, or taken twice, fails the comparison with the reference (two steps) above
    c = numbers[fw]["float32"][f"adam-{api}"]
    n = len(c["out"]) // 2
    for got in (c["out"], c["ref_out"]):
        assert min(abs(a - b) for a, b in zip(got[:n], got[n:2 * n])) > 5 * sum(TOLERANCE["float32"])


@pytest.mark.parametrize("fw, api", [("torch", "functional"), ("torch", "layer"), ("jax", "functional")])
def test_gelu_is_the_exact_form(numbers, fw, api):
    # the tanh approximation of the same inputs is outside the float32 tolerance
    c = numbers[fw]["float32"][f"gelu-{api}"]
    assert _close(c["out"], c["ref_out"], "float32") is None
    assert _close(c["out"], c["ref_tanh"], "float32") is not None


@pytest.mark.parametrize("primitive", NEW)
def test_torch_and_jax_compute_the_same_numbers(numbers, primitive):
    t, j = numbers["torch"]["float32"][f"{primitive}-functional"], numbers["jax"]["float32"][f"{primitive}-functional"]
    assert _close(t["out"], j["out"], "float32") is None
    for tg, jg in zip(t["grads"], j["grads"], strict=True):
        assert _close(tg, jg, "float32") is None


def _ops(t: Trace, pass_: str) -> list[str]:
    run = t.run(pass_, "warm")
    assert run is not None, pass_
    return [n.frame.name for _, n in run.layers["op"].walk() if n.frame.kind == "op"]


#: the op each pass must reach, torch (the CPU's aten ops: any of the names)
TORCH_OPS = {
    "layernorm": (("aten::native_layer_norm",), ("aten::native_layer_norm_backward",)),
    "gelu": (("aten::gelu",), ("aten::gelu_backward",)),
    "attention": (("aten::_scaled_dot_product_flash_attention_for_cpu",),
                  ("aten::_scaled_dot_product_flash_attention_for_cpu_backward",)),
    "embedding": (("aten::embedding",), ("aten::embedding_dense_backward",)),
    "crossentropy": (("aten::cross_entropy_loss", "aten::nll_loss_forward"), ("aten::nll_loss_backward",)),
    # torch.optim.Adam's default on the CPU: the for-loop, one tensor at a time
    "adam": (("aten::lerp_", "aten::addcdiv_"), ()),
}


@pytest.mark.parametrize("api", APIS["torch"])
@pytest.mark.parametrize("primitive", NEW)
def test_torch_op_layer_names_its_own_ops(traces, primitive, api):
    t = traces[("torch", "cpu", primitive, api)].load()
    assert t.meta["passes"] == list(PRIMITIVES[primitive].passes)
    forward, backward = TORCH_OPS[primitive]
    fops = _ops(t, "forward")
    assert all(op in fops for op in forward), fops
    if primitive == "adam":
        assert t.run("backward", "warm") is None  # an optimizer step has no backward
        assert t.meta["defaults"]["adam"].startswith("for-loop")
        assert not any(op.startswith("aten::_foreach") or op == "aten::_fused_adam_" for op in fops)
        if api == "layer":
            assert "Optimizer.step#Adam.step" in fops
        return
    bops = _ops(t, "backward")
    assert all(op in bops for op in backward), bops
    if primitive == "attention":  # the layer level is nn.MultiheadAttention: the same SDPA under it
        assert "aten::scaled_dot_product_attention" in fops
    if primitive == "gelu":
        assert "exact" in t.meta["defaults"]["gelu"]


#: what JAX's op layer must name (jaxpr primitives, then compiled HLO opcodes)
JAX_OPS = {
    "layernorm": ({"rsqrt", "reduce_sum"}, {"reduce_sum", "mul"}),
    "gelu": ({"erfc"}, {"mul"}),  # the exact form: x * erfc(-x / sqrt 2) / 2
    "attention": ({"dot_general", "exp", "reduce_max"}, {"dot_general"}),
    "embedding": ({"gather"}, {"scatter-add"}),
    "crossentropy": ({"log", "exp", "gather"}, {"scatter-add"}),
    "adam": ({"sqrt", "pow", "div"}, set()),
}


@pytest.mark.parametrize("primitive", NEW)
def test_jax_op_layer_names_its_jaxpr_and_hlo(traces, primitive):
    t = traces[("jax", "cpu", primitive, "functional")].load()
    assert t.meta["passes"] == list(PRIMITIVES[primitive].passes)
    forward, backward = JAX_OPS[primitive]
    fops = _ops(t, "forward")
    assert forward <= set(fops), fops
    assert "XLA:cpu" in fops
    if primitive == "gelu":
        assert "tanh" not in fops  # approximate=False: never the tanh approximation
    if primitive == "adam":
        assert t.run("backward", "warm") is None
        return
    assert backward <= set(_ops(t, "backward"))




@pytest.mark.parametrize("api", APIS["torch"])
@pytest.mark.parametrize("primitive", NEW)
def test_torch_standin_runs_each_new_primitive(traces, primitive, api):
    t = traces[("torch", "standin", primitive, api)].load()
    assert t.meta["device"] == "standin" and t.meta["standin"]["evidence"] == "run on the stand-in device"
    reached = t.meta["standin"]["reached"]
    forward, backward = KNOWN[primitive]  # test_standin: one op each must reach the stand-in
    assert forward in reached["forward"], reached["forward"]
    if backward is None:
        assert "backward" not in reached
        assert t.meta["defaults"]["adam"].startswith("foreach")
    else:
        assert backward in reached["backward"], reached["backward"]
    for pass_ in PRIMITIVES[primitive].passes:
        run = t.run(pass_, "warm")
        assert any(n.frame.lib == STANDIN_LIB for _, n in run.layers["op"].walk())


@pytest.fixture(scope="session")
def derived(frameworks, tmp_path_factory) -> dict[tuple[str, str, str], Trace]:
    """(framework, primitive, api) -> the derived GPU evidence of each new primitive."""
    out = {}
    for name in APIS:
        fw = frameworks[name]
        _ready(fw)
        for res in derive(fw, NEW, tmp_path_factory.mktemp(f"derived-{name}")):
            assert res.error is None, (name, res.spec.primitive, res.error)
            out[(name, res.spec.primitive, res.spec.api)] = res.load()
    return out


def _children(t: Trace, pass_: str, name: str) -> list[Any]:
    run = t.run(pass_, "warm")
    return [n for _, n in run.layers["op"].walk() if n.frame.name == name]


@pytest.mark.parametrize("api", APIS["torch"])
def test_torch_registered_attention_names_sdpa_cuda_choice(derived, api):
    t = derived[("torch", "attention", api)]
    assert t.meta["evidence"] == "registered" and t.meta["device"] == "gpu"
    for pass_, op in (("forward", "aten::_scaled_dot_product_efficient_attention"),
                      ("backward", "aten::_scaled_dot_product_efficient_attention_backward")):
        (node,) = _children(t, pass_, op)
        kernel = node.children[0]
        assert kernel.frame.name == f"CUDA: {op.removeprefix('aten::')}_cuda"
        assert kernel.frame.module == "sdp::select_sdp_backend"
        (others,) = [c for c in node.children if c.frame.name == "other candidates"]
        names = " ".join(c.frame.name for c in others.children)
        assert all(c.frame.module == CANDIDATE_MODULE and not c.frame.lib for c in others.children)
        assert "flash_attention" in names and "cudnn_attention" in names and "math" in names
        # the CPU's own kernel is never in the GPU reading
        assert not _children(t, pass_, "aten::_scaled_dot_product_flash_attention_for_cpu")
    assert "memory-efficient" in t.meta["gpu_evidence"]["runtime_choices"]["scaled dot product attention"]


def test_torch_registered_bf16_attention_is_cudnns(frameworks, tmp_path):
    # in bfloat16 the dtype checks pass for cuDNN and flash: cuDNN comes first with the
    # cuDNN torch's CUDA wheels ship (seen on an H100: torch 2.11.0+cu130, cuDNN 9.19)
    spec = CaseSpec("attention", "functional", passes=("forward", "backward"), layers=("op",))
    (res,) = run_probe(frameworks["torch"], [spec], tmp_path, "cpu", "bf16", kind="gpu-evidence")
    t = res.load()
    for pass_, op in (("forward", "aten::_scaled_dot_product_cudnn_attention"),
                      ("backward", "aten::_scaled_dot_product_cudnn_attention_backward")):
        (node,) = _children(t, pass_, op)
        assert node.children[0].frame.lib == "cuDNN"
        (others,) = [c for c in node.children if c.frame.name == "other candidates"]
        assert any("efficient_attention" in c.frame.name for c in others.children)


def test_torch_registered_adam_is_the_foreach_update(derived):
    t = derived[("torch", "adam", "layer")]
    assert t.meta["passes"] == ["forward"]
    ops = _ops(t, "forward")
    assert "aten::_foreach_addcdiv_" in ops and "aten::lerp_" not in ops
    (node,) = _children(t, "forward", "aten::_foreach_add_")
    assert "foreach_tensor_add_scalar_kernel_cuda_" in node.children[0].frame.name


@pytest.mark.parametrize("primitive", NEW)
def test_jax_derives_each_new_primitive_for_cuda(derived, primitive):
    t = derived[("jax", primitive, "functional")]
    assert t.meta["evidence"] in ("compiled", "lowered")
    for pass_ in PRIMITIVES[primitive].passes:
        ops = _ops(t, pass_)
        assert any(op.startswith("cuda: ") for op in ops), ops  # the lowering rule for cuda
        if t.meta["evidence"] == "compiled":
            assert "XLA:cuda (compiled deviceless, H100 target)" in ops


def test_an_optimizer_step_has_no_backward_to_ask_for():
    line = one_line_error(dltrace("probe", "torch", "adam", "--pass", "backward"), Exit.USAGE)
    assert "adam has no backward pass" in line
