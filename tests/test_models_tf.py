"""TensorFlow's model training steps on the real framework (CPU): each case traced once
through the harness (python and op layers), and a few real steps of each, run in
TensorFlow's environment, whose losses must fall; the functional LeNet must compute
torch's numbers, since both are made from the same seeded parameters."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import model_losses

from tracer import envs
from tracer.contract import CIFAR, CLASSES, LENET, MODELS, TRANSFORMER
from tracer.runner import CaseSpec, run_probe
from tracer.trace import Trace

CASES = [(m, api) for m in MODELS for api in MODELS[m].apis]
STEPS = 5


@pytest.fixture(scope="module")
def tf_models(frameworks, tmp_path_factory) -> dict[tuple[str, str], Trace]:
    """(model, api) -> its trace, all from one probe process; plus the error of a model
    asked for at a level it is not written at (cifar functional)."""
    fw = frameworks["tensorflow"]
    assert envs.status(fw).ready, "tensorflow: environment not set up (dltrace env setup tensorflow)"
    specs = [CaseSpec(m, api, layers=("python", "op")) for m, api in CASES] + [CaseSpec("cifar", "functional")]
    results = run_probe(fw, specs, tmp_path_factory.mktemp("tf-models"), timeout=600, command="models test")
    out: dict = {}
    for res in results:
        key = (res.spec.primitive, res.spec.api)
        if key == ("cifar", "functional"):
            out[key] = res.error
            continue
        assert res.error is None, f"{key}: {res.error}\n{res.detail}"
        out[key] = res.load()
    return out


def _losses(fw, cases: list[tuple[str, str]]) -> dict[str, list[float]]:
    return model_losses(fw, cases, STEPS)


@pytest.fixture(scope="module")
def tf_losses(frameworks) -> dict[str, list[float]]:
    return _losses(frameworks["tensorflow"], CASES)


def ops(trace: Trace, pass_: str) -> Counter[str]:
    tree = trace.layer(pass_, "op")
    assert tree is not None, (trace.meta["primitive"], pass_, trace.run(pass_, "warm").stats)
    out: Counter[str] = Counter()
    for _, n in tree.walk():
        if n.frame.kind == "op":
            out[n.frame.name] += n.count
    return out


def python_frames(trace: Trace, pass_: str) -> set[str]:
    return {n.frame.label for _, n in trace.layer(pass_).walk()}


def expected_parameters(model: str, seq: int) -> int:
    """The parameter count of the network the contract describes."""

    def dense(i: int, o: int) -> int:
        return i * o + o

    def conv(i: int, o: int, k: int) -> int:
        return i * o * k * k + o

    if model == "lenet":
        L = LENET
        return (conv(1, L["conv1"], L["k"]) + conv(L["conv1"], L["conv2"], L["k"]) + dense(L["conv2"] * 25, L["fc1"])
                + dense(L["fc1"], L["fc2"]) + dense(L["fc2"], CLASSES))
    if model == "cifar":
        C = CIFAR
        return (conv(3, C["conv1"], C["k"]) + conv(C["conv1"], C["conv1"], C["k"])
                + conv(C["conv1"], C["conv2"], C["k"]) + conv(C["conv2"], C["conv2"], C["k"])
                + dense(C["conv2"] * 8 * 8, C["fc"]) + dense(C["fc"], CLASSES))
    T = TRANSFORMER
    e = T["embed"]
    return (T["vocab"] * e + seq * e + 3 * 2 * e + 4 * dense(e, e) + dense(e, T["mlp"]) + dense(T["mlp"], e)
            + dense(e, T["vocab"]))


def test_every_model_case_is_the_contracts_network_and_records_tfs_defaults(tf_models):
    for (model, api) in CASES:
        t = tf_models[(model, api)]
        m = t.meta["model"]
        assert (t.meta["framework"], t.meta["primitive"], t.meta["api"], m["name"], m["api"]) == \
            ("tensorflow", model, api, model, api)
        assert t.meta["parameters"] == expected_parameters(model, MODELS[model].shape[-1]), (model, api)
        d = m["defaults"]
        assert d["layout"].startswith("NHWC") or model == "transformer"
        assert set(d["threads"]) == {"intra_op", "inter_op", "cpus"}
        # what the case says of oneDNN is what the profiler's run saw
        assert d["onednn"]["enabled"] == t.run("forward").stats["layers"]["op"]["onednn_enabled"]
        for pass_ in ("forward", "backward"):
            assert t.layer(pass_).frame.name == f"{model}.{pass_}"
            assert ops(t, pass_), (model, api, pass_)


def test_functional_lenet_is_tf_nn_ops_and_the_update_written_out(tf_models):
    t = tf_models[("lenet", "functional")]
    f, b = ops(t, "forward"), ops(t, "backward")
    assert (f["Conv2D"], f["MaxPool"], f["Relu"], f["MatMul"], f["BiasAdd"]) == (2, 2, 4, 3, 5), f
    assert f["SparseSoftmaxCrossEntropyWithLogits"] == 1
    assert b["Conv2DBackpropFilter"] == 2 and b["MaxPoolGrad"] == 2 and b["BiasAddGrad"] == 5, b
    assert b["AssignSubVariableOp"] == 10  # v.assign_sub(lr * g), one per parameter
    py = python_frames(t, "forward") | python_frames(t, "backward")
    assert "tensorflow.python.ops.nn_ops.conv2d_v2" in py
    assert "tensorflow.python.ops.resource_variable_ops.BaseResourceVariable.assign_sub" in py
    assert not any(n.startswith("keras.") for n in py), "the functional level reaches keras"


def test_layer_lenet_is_keras_layers_and_keras_sgd(tf_models):
    t = tf_models[("lenet", "layer")]
    f, b = ops(t, "forward"), ops(t, "backward")
    assert f["Conv2D"] == 2 and f["SparseSoftmaxCrossEntropyWithLogits"] == 1
    assert b["Conv2DBackpropFilter"] == 2 and b["AssignSubVariableOp"] == 10  # plain SGD: no momentum buffers
    assert "keras.src.models.sequential.Sequential.call" in python_frames(t, "forward")
    assert "keras.src.optimizers.base_optimizer.BaseOptimizer.apply_gradients" in python_frames(t, "backward")
    d = t.meta["model"]["defaults"]
    assert d["initialisation"]["Conv2D.kernel"] == "GlorotUniform"  # keras' own, read from the layers
    assert d["optimizer"]["class"] == "keras.optimizers.SGD" and d["optimizer"]["momentum"] == 0.0


def test_cifar_trains_with_dropout_and_momentum(tf_models):
    t = tf_models[("cifar", "layer")]
    f, b = ops(t, "forward"), ops(t, "backward")
    assert f["Conv2D"] == 4 and f["MaxPool"] == 2
    assert f["StatelessRandomUniformV2"] == 3  # the three Dropout layers draw their masks: training=True
    # SGD with momentum keeps one buffer per parameter (12): it updates it, then the parameter
    assert b["AssignVariableOp"] >= 12 and b["AssignAddVariableOp"] >= 12, b
    assert t.meta["model"]["defaults"]["optimizer"]["momentum"] == pytest.approx(CIFAR["momentum"])


def test_transformer_is_keras_attention_and_says_what_it_built(tf_models):
    t = tf_models[("transformer", "layer")]
    f, b = ops(t, "forward"), ops(t, "backward")
    assert f["Softmax"] == 1  # one attention
    assert f["GatherV2"] == 2  # token and position embeddings
    assert f["Erfc"] == 1  # keras' gelu is the exact one
    assert b["Sqrt"] >= 1 and b["AssignAddVariableOp"] > 0  # Adam's moments
    py = python_frames(t, "forward")
    assert any(n.startswith("keras.src.layers.attention.multi_head_attention.MultiHeadAttention.") for n in py)
    assert any(n.startswith("keras.src.layers.normalization.layer_normalization.") for n in py)
    m = t.meta["model"]
    assert "position embedding" in m["built_from_primitives"]
    init = m["defaults"]["initialisation"]
    assert {"MultiHeadAttention.kernel", "LayerNormalization.gamma", "Embedding.embeddings"} <= set(init)
    assert m["defaults"]["optimizer"]["class"] == "keras.optimizers.Adam"


def test_a_model_at_a_level_it_is_not_written_at_is_a_clear_error(tf_models):
    assert tf_models[("cifar", "functional")] == \
        "ProbeError: cifar is written at the layer level only, not functional"


def test_every_model_case_trains(tf_losses):
    for name, losses in tf_losses.items():
        assert len(losses) == STEPS
        assert all(a > b for a, b in zip(losses, losses[1:])), (name, losses)


def test_functional_lenet_computes_torchs_numbers(frameworks, tf_losses):
    torch = _losses(frameworks["torch"], [("lenet", "functional")])
    assert tf_losses["lenet-functional"] == pytest.approx(torch["lenet-functional"], rel=1e-4)
