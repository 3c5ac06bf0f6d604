"""Chainer's and MXNet's training steps of the models, traced once per framework: the
op layer holds the step (the convolution's backward, the optimizer's update), the
levels differ as written (the update by hand against the optimizer), and each case
says what the framework chose by default and what was built from its primitives."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tracer.contract import MODELS, check_shape
from tracer.runner import CaseSpec, run_probe
from tracer.trace import Node, Trace

CASES = [CaseSpec(m, api, layers=("python", "op")) for m in MODELS for api in MODELS[m].apis]


def _traces(frameworks, fw: str, out: Path, cases: list[CaseSpec] = CASES) -> dict[tuple[str, str], Trace]:
    results = run_probe(frameworks[fw], cases, out, warmup=1, timeout=600)
    for r in results:
        assert r.error is None, f"{fw} {r.spec.primitive} {r.spec.api}: {r.error}\n{r.detail}"
    return {(r.spec.primitive, r.spec.api): r.load() for r in results}


@pytest.fixture(scope="module")
def chainer_models(frameworks, tmp_path_factory) -> dict[tuple[str, str], Trace]:
    return _traces(frameworks, "chainer", tmp_path_factory.mktemp("chainer-models"))


@pytest.fixture(scope="module")
def mxnet_models(frameworks, tmp_path_factory) -> dict[tuple[str, str], Trace]:
    return _traces(frameworks, "mxnet", tmp_path_factory.mktemp("mxnet-models"))


@pytest.fixture(scope="module")
def mxnet_unbulked(frameworks, tmp_path_factory) -> Trace:
    """MXNet's LeNet with the backward's bulk execution off, which the process reads
    from its environment (the runner passes this one's on)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MXNET_EXEC_BULK_EXEC_TRAIN", "0")
        traces = _traces(frameworks, "mxnet", tmp_path_factory.mktemp("mxnet-unbulked"),
                         [CaseSpec("lenet", "layer", passes=("backward",), layers=("python", "op"))])
    return traces[("lenet", "layer")]


def ops(trace: Trace, pass_: str) -> Counter[str]:
    """Op name -> calls, over the whole op layer of the warm step."""
    root = trace.layer(pass_, "op")
    assert root is not None, f"no op layer for {pass_}"
    counts: Counter[str] = Counter()
    for depth, n in root.walk():
        if depth:
            counts[n.frame.name] += n.count
    return counts


def python_labels(trace: Trace, pass_: str) -> set[str]:
    root = trace.layer(pass_)
    assert root is not None
    return {n.frame.label for _, n in root.walk()}


def children(trace: Trace, pass_: str, name: str) -> list[Node]:
    root = trace.layer(pass_, "op")
    assert root is not None
    return [c for _, n in root.walk() if n.frame.name == name for c in n.children]


def model(trace: Trace) -> dict:
    return trace.meta["model"]


# ----------------------------------------------------------------------------- both


def test_a_cnn_takes_other_batches_but_only_its_own_images():
    """Their dense layers are sized for their images: another size is refused in one line,
    before a framework fails with its own multi-line shape error."""
    assert check_shape("lenet", (2, 1, 28, 28)) is None and check_shape("cifar", (1, 3, 32, 32)) is None
    assert check_shape("lenet", (8, 1, 32, 32)) == \
        "lenet takes 1x28x28 images (its dense layers are sized for them), got 1x32x32"
    assert "3x32x32 images" in (check_shape("cifar", (4, 1, 32, 32)) or "")
    assert check_shape("transformer", (2, 40)) is None  # the positions are made for the sequence


def test_every_model_case_is_one_training_step_of_the_same_network(chainer_models, mxnet_models):
    for traces in (chainer_models, mxnet_models):
        assert set(traces) == {(c.primitive, c.api) for c in CASES}
        for (name, api), tr in traces.items():
            m = model(tr)
            assert (m["name"], m["api"]) == (name, api)
            assert m["passes"]["backward"] == "the gradients and the optimizer's update"
            assert {"layout", "initialisation", "optimizer", "threads", "onednn"} <= set(m["defaults"])
        # the two levels of LeNet hold the same parameters
        assert traces[("lenet", "functional")].meta["parameters"] == traces[("lenet", "layer")].meta["parameters"]


def test_chainer_and_mxnet_build_networks_of_the_same_size(chainer_models, mxnet_models):
    for key in chainer_models:
        assert chainer_models[key].meta["parameters"] == mxnet_models[key].meta["parameters"], key
    assert chainer_models[("lenet", "layer")].meta["parameters"] == 61706  # LeNet-5 with 6/16/120/84/10


# ----------------------------------------------------------------------------- chainer


def test_chainer_lenet_backward_runs_the_convolution_gradients(chainer_models):
    for api in ("functional", "layer"):
        tr = chainer_models[("lenet", api)]
        assert {"Convolution2DFunction.forward", "MaxPoolingND.forward", "LinearFunction.forward",
                "SoftmaxCrossEntropy.forward"} <= set(ops(tr, "forward"))
        back = ops(tr, "backward")
        # the weight gradient of both convolutions; the input gradient of the second only
        assert back["Convolution2DGradW.forward"] == 2 and back["Deconvolution2DFunction.forward"] == 1, back


def test_chainer_functional_lenet_updates_by_hand_and_the_layer_level_with_its_optimizer(chainer_models):
    by_hand, layer = chainer_models[("lenet", "functional")], chainer_models[("lenet", "layer")]
    assert not any(name.endswith("Rule.update") for name in ops(by_hand, "backward"))
    assert "chainer.variable.Parameter.cleargrad" in python_labels(by_hand, "backward")
    assert "chainer.optimizer.GradientMethod.update" not in python_labels(by_hand, "backward")
    # chainer.optimizers.SGD: one rule per parameter, under the optimizer's update
    assert [(c.frame.name, c.count) for c in children(layer, "backward", "SGD.update")] == [("SGDRule.update", 10)]


def test_chainer_cifar_has_dropout_and_momentum_sgd(chainer_models):
    tr = chainer_models[("cifar", "layer")]
    assert ops(tr, "forward")["Dropout.forward"] == 3
    assert ops(tr, "backward")["MomentumSGDRule.update"] == 12
    assert ops(tr, "backward")["Convolution2DGradW.forward"] == 4
    d = model(tr)["defaults"]
    assert "momentum=0.9" in d["optimizer"] and "LeCunNormal" in d["initialisation"]
    assert d["onednn"].startswith("iDeep")


def test_chainer_transformer_builds_attention_and_gelu_from_functions(chainer_models):
    tr = chainer_models[("transformer", "layer")]
    built = model(tr)["built_from_primitives"]
    assert "no attention layer in chainer" in built["attention"] and "F.matmul" in built["attention"]
    assert "no GELU" in built["gelu"] and "F.erf" in built["gelu"]
    fwd = ops(tr, "forward")
    assert fwd["MatMul.forward"] == 2 and fwd["Softmax.forward"] == 1 and fwd["Erf.forward"] == 1
    assert fwd["LayerNormalization.forward"] == 3 and fwd["EmbedIDFunction.forward"] == 1
    back = ops(tr, "backward")
    assert back["EmbedIDGrad.forward"] == 1 and back["AdamRule.update"] == 18


# ----------------------------------------------------------------------------- mxnet


def test_mxnet_lenet_forward_runs_the_operators(mxnet_models):
    for api in ("functional", "layer"):
        fwd = ops(mxnet_models[("lenet", api)], "forward")
        assert fwd["Convolution"] == 2 and fwd["Pooling"] == 2 and fwd["FullyConnected"] == 3, fwd
        assert fwd["log_softmax"] == 1 and fwd["pick"] == 1


def test_mxnet_functional_lenet_updates_by_hand_and_the_layer_level_with_its_trainer(mxnet_models):
    by_hand, layer = mxnet_models[("lenet", "functional")], mxnet_models[("lenet", "layer")]
    hand = ops(by_hand, "backward")
    assert hand["_mul_scalar"] == 10 and not any("sgd" in name for name in hand), hand
    assert "mxnet.ndarray.ndarray.NDArray.__isub__" in python_labels(by_hand, "backward")
    assert "mxnet.gluon.trainer.Trainer.step" in python_labels(layer, "backward")
    assert ops(layer, "backward")["multi_sgd_update"] >= 1


def test_mxnet_backward_is_bulked_by_default_and_says_so(mxnet_models):
    tr = mxnet_models[("lenet", "layer")]
    back = ops(tr, "backward")
    assert back["ImperativeBulk"] >= 1 and "_backward_Convolution" not in back
    assert tr.run("backward").stats["layers"]["op"]["backward_bulk"].startswith("on ")
    assert model(tr)["defaults"]["backward_bulk"].startswith("on ")


def test_mxnet_backward_unbulked_names_the_convolution_gradient(mxnet_unbulked):
    back = ops(mxnet_unbulked, "backward")
    assert back["_backward_Convolution"] == 2 and back["_backward_FullyConnected"] == 3, back
    assert back["multi_sgd_update"] >= 1 and "ImperativeBulk" not in back
    assert mxnet_unbulked.run("backward").stats["layers"]["op"]["backward_bulk"].startswith("off ")


def test_mxnet_cifar_has_dropout_and_momentum_sgd(mxnet_models):
    tr = mxnet_models[("cifar", "layer")]
    assert ops(tr, "forward")["Dropout"] == 3 and ops(tr, "forward")["Convolution"] == 4
    assert ops(tr, "backward")["multi_sgd_mom_update"] >= 1
    d = model(tr)["defaults"]
    assert "momentum=0.9" in d["optimizer"] and "Uniform" in d["initialisation"]
    assert d["onednn"].startswith("MKL-DNN (oneDNN) built=True")


def test_mxnet_transformer_builds_attention_from_batch_dot(mxnet_models):
    tr = mxnet_models[("transformer", "layer")]
    built = model(tr)["built_from_primitives"]
    assert "no attention layer in gluon" in built["attention"] and "nd.batch_dot" in built["attention"]
    assert "gelu" not in built  # gluon has GELU (nn.GELU: LeakyReLU act_type='gelu')
    fwd = ops(tr, "forward")
    assert fwd["batch_dot"] == 2 and fwd["softmax"] == 1 and fwd["LeakyReLU"] == 1
    assert fwd["LayerNorm"] == 3 and fwd["Embedding"] == 1
    assert ops(tr, "backward")["adam_update"] == 18
