"""TensorFlow's transformer primitives on the real framework (CPU): the numbers of each
case at both levels against a numpy reference made here from base's seeded data (the
table of the contract: torch's formulas), the ops TensorFlow's profiler names for
each, what each case says TensorFlow and keras chose, and the bf16 variant: every
primitive at both levels in bfloat16, and the kernels its library layer reaches.

Three TensorFlow processes in all: the float32 traces, the values, the bf16 traces."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.test_ctrace import runner_env

from tracer import envs
from tracer.contract import PRIMITIVES
from tracer.derive import derive
from tracer.runner import CaseSpec, run_probe
from tracer.trace import Trace

NEW = [p for p, prim in PRIMITIVES.items() if prim.family == "transformer"]
APIS = ("functional", "layer")


def _ready(frameworks):
    fw = frameworks["tensorflow"]
    assert envs.status(fw).ready, "tensorflow: environment not set up (dltrace env setup tensorflow)"
    return fw


def _traces(fw, specs: list[CaseSpec], out: Path, variant: str = "default") -> dict[tuple[str, str], Trace]:
    traces = {}
    for res in run_probe(fw, specs, out, variant=variant, timeout=600, command="transformer primitives test"):
        assert res.error is None, f"{res.spec.primitive} {res.spec.api} ({variant}): {res.error}\n{res.detail}"
        traces[(res.spec.primitive, res.spec.api)] = res.load()
    return traces


@pytest.fixture(scope="module")
def tf_traces(frameworks, tmp_path_factory) -> dict[tuple[str, str], Trace]:
    """(primitive, api) -> its float32 trace (python and op layers), one probe process."""
    fw = _ready(frameworks)
    return _traces(fw, [CaseSpec(p, api, layers=("python", "op")) for p in NEW for api in APIS],
                   tmp_path_factory.mktemp("tf-transformer"))


@pytest.fixture(scope="module")
def tf_values(frameworks) -> dict[str, dict]:
    """"PRIMITIVE-API" -> {"got": its outputs and gradients, from the probe's own cases,
    "want": the numpy reference}, run in TensorFlow's environment by tests/tf_prim_values.py."""
    fw = _ready(frameworks)
    proc = subprocess.run([str(envs.python_for(fw)), str(Path(__file__).with_name("tf_prim_values.py")),
                           *(f"{p}:{api}" for p in NEW for api in APIS)],
                          capture_output=True, text=True, timeout=600, env=runner_env(fw))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def bf16_traces(frameworks, tmp_path_factory) -> dict[tuple[str, str], Trace]:
    """Every primitive (the nine and the six) at both levels in the bf16 variant, with the
    library layer, one probe process."""
    fw = _ready(frameworks)
    assert fw.variants["bf16"].env == {"DLTRACE_DTYPE": "bfloat16"} and fw.variants["bf16"].switches == "precision"
    return _traces(fw, [CaseSpec(p, api, layers=("python", "op", "library")) for p in PRIMITIVES for api in APIS],
                   tmp_path_factory.mktemp("tf-bf16"), variant="bf16")


def _flat(v) -> list[float]:
    return [x for item in v for x in _flat(item)] if isinstance(v, list) else [float(v)]


def _close(got, want, what: str, rel: float = 1e-4, abs_: float = 1e-5) -> None:
    g, w = _flat(got), _flat(want)
    assert len(g) == len(w), (what, len(g), len(w))
    assert g == pytest.approx(w, rel=rel, abs=abs_), what


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("primitive", NEW)
def test_every_new_primitive_computes_the_contracts_numbers(tf_values, primitive, api):
    """Against tests/prim_reference.py (numpy, float64, torch's formulas on base's data)."""
    got, want = tf_values[f"{primitive}-{api}"]["got"], tf_values[f"{primitive}-{api}"]["want"]
    if primitive == "adam":  # an update is about lr = 1e-3 per element: far above the tolerance
        for step, (g, w) in enumerate(zip(got["steps"], want["steps"])):
            _close(g, w, f"adam {api} step {step + 1}", rel=1e-5, abs_=1e-6)
        return
    _close(got["out"], want["out"], f"{primitive} {api} forward")
    assert len(got["grads"]) == len(want["grads"]), (primitive, api, got["grad_types"])
    for i, (g, w) in enumerate(zip(got["grads"], want["grads"])):
        _close(g, w, f"{primitive} {api} gradient {i}")
    if primitive == "embedding":  # TensorFlow's gradient of a lookup: the rows and their ids, not a table
        assert got["grad_types"] == ["IndexedSlices"]


# ----------------------------------------------------------------------------- the op layer


def ops(trace: Trace, pass_: str) -> Counter[str]:
    """TensorFlow's ops in the profiler's host trace (module "tensorflow"), not the eager
    runtime's records around them (tensorflow.eager: tf.constant, KernelAndDeviceFunc::Run)."""
    tree = trace.layer(pass_, "op")
    assert tree is not None, (trace.meta["primitive"], pass_)
    out: Counter[str] = Counter()
    for _, n in tree.walk():
        if n.frame.kind == "op" and n.frame.module == "tensorflow":
            out[n.frame.name] += n.count
    return out


def test_the_op_layer_names_tensorflows_own_ops(tf_traces):
    for api in APIS:
        def f(p: str) -> Counter[str]:
            return ops(tf_traces[(p, api)], "forward")

        def b(p: str) -> Counter[str]:
            return ops(tf_traces[(p, api)], "backward")

        assert {"Mean", "SquaredDifference", "Rsqrt"} <= set(f("layernorm")) and b("layernorm")["RsqrtGrad"] == 1
        assert f("gelu")["Erfc"] == 1 and b("gelu")["Exp"] == 1  # exact gelu: x * erfc(-x / sqrt 2) / 2
        assert f("attention")["BatchMatMulV2"] == 2 and f("attention")["Softmax"] == 1, f("attention")
        assert b("attention")["BatchMatMulV2"] == 4
        # the loss op computes its gradient in the forward: the backward only scales it
        assert f("crossentropy")["SparseSoftmaxCrossEntropyWithLogits"] == 1
        assert "SparseSoftmaxCrossEntropyWithLogits" not in b("crossentropy")
        # the lookup's gradient stays sparse: no dense scatter into a table
        assert not {"UnsortedSegmentSum", "ScatterNd", "TensorScatterAdd"} & set(b("embedding")), b("embedding")
    assert ops(tf_traces[("embedding", "functional")], "forward")["ResourceGather"] == 1
    assert ops(tf_traces[("embedding", "layer")], "forward")["GatherV2"] == 1  # keras.ops.take reads the table
    # Adam: the fused kernel at the functional level, keras' update in separate ops at the layer
    assert set(ops(tf_traces[("adam", "functional")], "forward")) == {"ResourceApplyAdam"}
    keras_adam = ops(tf_traces[("adam", "layer")], "forward")
    assert "ResourceApplyAdam" not in keras_adam and keras_adam["Sqrt"] >= 1 and keras_adam["AssignSubVariableOp"] == 1
    for api in APIS:
        t = tf_traces[("adam", api)]
        assert tuple(t.meta["passes"]) == ("forward",) and t.layer("backward") is None


def test_the_dispatch_table_knows_the_new_ops(tf_traces):
    table = tf_traces[("adam", "functional")].meta["dispatch"]["ops"]
    assert "CPU" in table["ResourceApplyAdam"]["kernels"] and not table["ResourceApplyAdam"]["new_backend"]
    table = tf_traces[("crossentropy", "functional")].meta["dispatch"]["ops"]
    assert "CPU" in table["SparseSoftmaxCrossEntropyWithLogits"]["kernels"]


def test_each_case_says_what_tensorflow_and_keras_chose(tf_traces):
    meta = {k: t.meta for k, t in tf_traces.items()}
    assert meta[("gelu", "functional")]["defaults"] == {"tf.nn.gelu approximate": False}
    assert meta[("gelu", "layer")]["defaults"] == {"keras.activations.gelu approximate": False}
    built = meta[("attention", "functional")]["built_from_primitives"]["attention"]
    assert "no scaled-dot-product attention op" in built
    assert "keras.layers.Attention" in meta[("attention", "layer")]["built_from_primitives"]["attention"]
    assert "tf.nn.moments" in meta[("layernorm", "functional")]["built_from_primitives"]["layernorm"]
    assert meta[("layernorm", "layer")]["defaults"]["LayerNormalization epsilon"] == pytest.approx(1e-3)
    assert meta[("adam", "layer")]["defaults"]["keras.optimizers.Adam epsilon"] == pytest.approx(1e-7)
    assert "ResourceApplyAdam" in meta[("adam", "functional")]["optimizer"]["call"]
    assert meta[("attention", "functional")]["layout"] == "BxHxLxD"
    assert all(m["dtype"] == "float32" for m in meta.values())


def test_adams_gpu_path_is_derived_from_its_forward_alone(frameworks, tmp_path):
    """An optimizer step has no backward: its derived GPU evidence (the GPU build's kernel
    registry) is of its forward, the fused kernel's GPU registrations."""
    (res,) = derive(_ready(frameworks), ["adam"], tmp_path, ("functional",))
    assert res.error is None, f"{res.error}\n{res.detail}"
    t = res.load()
    assert t.meta["passes"] == ["forward"] and t.layer("backward") is None
    (adam,) = [n for n in t.layer("forward", "op").children if n.frame.name == "ResourceApplyAdam"]
    kernels = [k.frame.name for k in adam.children]
    assert any(k.startswith("GPU ResourceApplyAdam [T=") and "float32" in k for k in kernels), kernels


# ----------------------------------------------------------------------------- bfloat16


#: oneDNN's kernels built for a CPU's bfloat16 instructions: AVX-512 BF16, or AMX where the CPU has it
_BF16_ISA = re.compile(r":(?:avx512_core_bf16|avx512_core_amx\w*|avx10_\d+_512_amx\w*)")


def _library(trace: Trace, pass_: str) -> list[str]:
    tree = trace.layer(pass_, "library")
    return [] if tree is None else [n.frame.name for _, n in tree.walk() if n.frame.kind == "library"]


def test_every_primitive_runs_in_bfloat16_and_reaches_onednns_bf16_kernels(bf16_traces):
    assert len(bf16_traces) == 2 * len(PRIMITIVES)
    for (p, api), t in bf16_traces.items():
        assert (t.meta["variant"], t.meta["dtype"]) == ("bf16", "bfloat16"), (p, api)
        for pass_ in t.meta["passes"]:
            assert ops(t, pass_), (p, api, pass_)
    # Adam in bfloat16 reaches the kernels, and says why its numbers are not Adam's
    assert all("0.999 rounds to 1.0" in bf16_traces[("adam", api)].meta["numerics"] for api in APIS)
    isa = set(bf16_traces[("dense", "functional")].meta["machine"]["isa"])
    dense = _library(bf16_traces[("dense", "functional")], "forward")
    attention = _library(bf16_traces[("attention", "functional")], "backward")
    assert any(n.startswith("matmul ") for n in dense) and any(n.startswith("matmul ") for n in attention)
    if bf16_traces[("dense", "functional")].meta["onednn_enabled"] and "avx512_bf16" in isa:
        # a bf16-capable CPU: the brgemm matmul built for its bf16 instructions, forward and backward
        # (avx512_core_bf16; on a CPU with AMX, oneDNN's AMX kernels: avx512_core_amx, avx10_1_512_amx)
        assert any(n.startswith("matmul brg_matmul:") and _BF16_ISA.search(n) for n in dense), dense
        assert attention and all(n.startswith("matmul brg_matmul:") and _BF16_ISA.search(n) for n in attention), \
            attention
        conv = _library(bf16_traces[("conv2d", "functional")], "backward")
        assert any(_BF16_ISA.search(n) and "backward_weights" in n for n in conv), conv
