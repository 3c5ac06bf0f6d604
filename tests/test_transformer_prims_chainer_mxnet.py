"""Chainer's and MXNet's six transformer primitives (layer norm, GELU, attention,
embedding, cross-entropy, Adam) at both API levels: the numbers equal a NumPy
reference computed from tracer.probes.base's data (tests/transformer_values.py, one
process per framework), the op layer names each framework's own ops and functions,
Adam is forward only, and each framework's reduced-precision variant (chainer's fp16:
NumPy has no bfloat16; MXNet's bf16) runs every primitive it can, with the same
numbers to that precision, and says in one line why it cannot run the others."""

from __future__ import annotations

import json
import math
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tracer import envs
from tracer.contract import PASSES, PRIMITIVES
from tracer.runner import CaseSpec, run_probe
from tracer.trace import Trace

NEW = ("layernorm", "gelu", "attention", "embedding", "crossentropy", "adam")
APIS = ("functional", "layer")
#: the variant each framework computes in reduced precision, and the type it sets
REDUCED = {"chainer": ("fp16", "float16"), "mxnet": ("bf16", "bfloat16")}
#: |got - reference| <= ATOL + RTOL |reference|, per element type
TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (1e-2, 5e-3), "bfloat16": (2e-2, 2e-2)}


def _values(fw, cases: list[str], env: dict[str, str] | None = None) -> dict[str, dict]:
    """Each PRIM:API case's numbers and its reference, from one process in ``fw``'s environment."""
    from tests.test_ctrace import runner_env  # a test module that itself reads conftest's fixtures

    if not envs.status(fw).ready:
        pytest.fail(f"{fw.name}: environment not set up (dltrace env setup {fw.name})")
    proc = subprocess.run([str(envs.python_for(fw)), str(Path(__file__).with_name("transformer_values.py")),
                           fw.probe, fw.devices["cpu"], *cases],
                          capture_output=True, text=True, timeout=600, env={**runner_env(fw), **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module", params=["chainer", "mxnet"])
def fw_values(request, frameworks) -> tuple[str, dict[str, dict]]:
    name = request.param
    return name, _values(frameworks[name], [f"{p}:{a}" for p in NEW for a in APIS])


@pytest.fixture(scope="module", params=["chainer", "mxnet"])
def fw_reduced(request, frameworks) -> tuple[str, dict[str, dict]]:
    """Every primitive at both levels in the framework's reduced-precision variant (its env, from frameworks.yaml)."""
    name = request.param
    fw = frameworks[name]
    variant, _ = REDUCED[name]
    return name, _values(fw, [f"{p}:{a}" for p in PRIMITIVES for a in APIS], dict(fw.variants[variant].env))


@pytest.fixture(scope="module", params=["chainer", "mxnet"])
def fw_traces(request, frameworks, tmp_path_factory) -> tuple[str, dict[tuple[str, str], Trace], dict[str, str]]:
    """The new primitives traced (python and op layers), both passes asked for, one probe process
    per framework, MXNet's backward unbulked (so that its profiler names each backward operator):
    (framework, traces, case -> error)."""
    name = request.param
    cases = [CaseSpec(p, a, passes=PASSES, layers=("python", "op")) for p in NEW for a in APIS]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MXNET_EXEC_BULK_EXEC_TRAIN", "0")
        results = run_probe(frameworks[name], cases, tmp_path_factory.mktemp(f"{name}-transformer"), warmup=1,
                            timeout=600)
    traces, errors = {}, {}
    for r in results:
        if r.error is None:
            traces[(r.spec.primitive, r.spec.api)] = r.load()
        else:
            errors[r.spec.slug()] = r.error
    return name, traces, errors


def _close(got: list[float], want: list[float], dtype: str) -> float:
    """The largest excess over the tolerance (<= 0: all within it)."""
    rtol, atol = TOLERANCE[dtype]
    assert len(got) == len(want), (len(got), len(want))
    return max((abs(g - w) - atol - rtol * abs(w) for g, w in zip(got, want)), default=0.0)


def _agrees(case: str, result: dict, dtype: str) -> None:
    assert result["error"] == "", f"{case}: {result['error']}"
    assert result["dtype"] == dtype, (case, result["dtype"])
    ref = result["reference"]
    assert set(ref) <= set(result["values"]), (case, sorted(result["values"]))
    for name, want in ref.items():
        assert any(w != 0 for w in want) and all(math.isfinite(v) for v in result["values"][name]), (case, name)
        excess = _close(result["values"][name], want, dtype)
        assert excess <= 0, f"{case} {name}: off the NumPy reference by {excess:.3g} beyond the {dtype} tolerance"


def test_the_six_compute_the_reference_numbers_at_both_levels(fw_values):
    """Outputs and the gradients of every input and parameter (the table's only, never the
    ids'), and Adam's first two steps (torch's update: each call one more step)."""
    name, values = fw_values
    for case, result in values.items():
        _agrees(f"{name} {case}", result, "float32")
    assert set(values["embedding-functional"]["values"]) == {"out", "grad table"}
    for api in APIS:
        steps = values[f"adam-{api}"]["values"]
        assert steps["step 1"] != steps["step 2"]
        # its forward is the update: a backward is refused in one line (a probe's ProbeError)
        assert values[f"adam-{api}"]["backward_error"] == \
            "ProbeError: an optimizer step has no backward pass: its forward is the update"


def test_the_reduced_precision_variant_runs_each_primitive_or_says_why_in_one_line(fw_reduced):
    """chainer computes every primitive in float16 (NumPy's; it has no bfloat16); MXNet in
    bfloat16 those it has kernels for: dense and conv2d among them (oneDNN's bf16 kernels,
    the reason for the variant); each other case is one line naming the type."""
    name, values = fw_reduced
    _, dtype = REDUCED[name]
    ran = {c for c, r in values.items() if not r["error"]}
    for case, result in values.items():
        if result["error"]:
            assert "\n" not in result["error"] and f"in {dtype}" in result["error"], (case, result["error"])
            continue
        if "reference" in result:
            _agrees(f"{name} {case}", result, dtype)
        else:
            assert result["dtype"] == dtype, (case, result["dtype"])
    if name == "chainer":
        assert ran == set(values), sorted(set(values) - ran)
    else:
        assert {"dense-functional", "dense-layer", "conv2d-functional", "conv2d-layer"} <= ran
        assert len(ran) >= 20, sorted(set(values) - ran)


def _ops(trace: Trace, pass_: str) -> Counter[str]:
    root = trace.layer(pass_, "op")
    assert root is not None, f"no op layer for {pass_}"
    return Counter(n.frame.name for depth, n in root.walk() if depth)


#: Each framework's own ops (functions) a primitive's passes reach, per level where they differ.
OPS = {
    "chainer": {
        "layernorm": ({"LayerNormalization.forward"}, {"LayerNormalization.backward"}),
        "gelu": ({"Erf.forward", "Mul.forward"}, {"Erf.backward"}),
        "attention": ({"MatMul.forward", "Softmax.forward"}, {"MatMul.backward", "_SoftmaxGrad.forward"}),
        "embedding": ({"EmbedIDFunction.forward"}, {"EmbedIDGrad.forward"}),
        "crossentropy": ({"SoftmaxCrossEntropy.forward"}, {"_SoftmaxCrossEntropyGrad_NoDoubleBackprop.forward"}),
        "adam-functional": ({"AdamRule.update"}, set()),
        "adam-layer": ({"Adam.update", "AdamRule.update"}, set()),
    },
    "mxnet": {
        "layernorm": ({"LayerNorm"}, {"_backward_LayerNorm"}),
        "gelu": ({"LeakyReLU"}, {"_backward_LeakyReLU"}),
        "attention": ({"batch_dot", "softmax"}, {"batch_dot", "_backward_softmax"}),  # batch_dot's gradient: batch_dots
        "embedding": ({"Embedding"}, {"_backward_Embedding"}),
        "crossentropy-functional": ({"softmax_cross_entropy"}, {"_backward_softmax_cross_entropy"}),
        "crossentropy-layer": ({"log_softmax", "pick"}, {"_backward_log_softmax", "_backward_pick"}),
        "adam": ({"adam_update"}, set()),
    },
}


def test_the_op_layer_names_the_frameworks_own_ops_and_adam_is_forward_only(fw_traces):
    name, traces, errors = fw_traces
    assert not errors, errors
    for (prim, api), trace in traces.items():
        forward, backward = OPS[name].get(f"{prim}-{api}") or OPS[name][prim]
        assert forward <= set(_ops(trace, "forward")), (prim, api, _ops(trace, "forward"))
        if prim == "adam":
            assert tuple(trace.meta["passes"]) == ("forward",)  # the runner asks a step for its forward only
            assert trace.layer("backward") is None
            assert "update" in trace.meta
        else:
            assert backward <= set(_ops(trace, "backward")), (prim, api, _ops(trace, "backward"))
        assert trace.meta["dtype"] == "float32"


def test_what_is_built_from_primitives_is_said(fw_traces):
    """Chainer 7 has neither GELU nor attention, MXNet 1.9 no attention operator or block:
    each case says how it was built; a primitive the framework has is not marked built."""
    name, traces, _ = fw_traces
    built = {(p, a): t.meta.get("built_from_primitives", {}) for (p, a), t in traces.items()}
    assert all("attention" in built[("attention", a)] for a in APIS)
    assert all("gelu" in built[("gelu", a)] for a in APIS) == (name == "chainer")
    assert not any(built[(p, a)] for p in ("layernorm", "embedding", "adam") for a in APIS)
    assert "erf" in json.dumps(traces[("gelu", "functional")].meta["defaults"])
