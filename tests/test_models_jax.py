"""JAX's training steps of the models (tracer/probes/jax_models.py), traced once per
module through the real runner in JAX's environment: what each pass runs, what the
op layer says it compiled, and what the case says JAX chose or lacked; and a few real
steps of each, whose losses must fall, the functional LeNet's being torch's (both are
made from the same seeded parameters)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import model_losses

from tests.test_ctrace import runner_env
from tracer import envs
from tracer.contract import CIFAR, CLASSES, LENET, MODELS, PASSES, TRANSFORMER
from tracer.runner import CaseSpec, run_probe
from tracer.trace import Node, Trace

ROOT = Path(__file__).resolve().parent.parent
CASES = [(m, api) for m in MODELS for api in MODELS[m].apis]
STEPS = 5


def _traces(fw, specs, out: Path, variant: str = "default") -> dict[tuple[str, str], Trace]:
    results = run_probe(fw, specs, out, variant=variant, timeout=900)
    for r in results:
        assert r.error is None, f"{r.spec.slug()} ({variant}): {r.error}\n{r.detail}"
    return {(r.spec.primitive, r.spec.api): r.load() for r in results}


@pytest.fixture(scope="module")
def jax_fw(frameworks):
    fw = frameworks["jax"]
    assert envs.status(fw).ready, "jax: environment not set up (dltrace env setup jax)"
    return fw


@pytest.fixture(scope="module")
def traces(jax_fw, tmp_path_factory) -> dict[tuple[str, str], Trace]:
    """(model, api) -> the jitted training step's trace (python and op layers)."""
    specs = [CaseSpec(m, api, layers=("python", "op")) for m, api in CASES]
    return _traces(jax_fw, specs, tmp_path_factory.mktemp("jax-models"))


@pytest.fixture(scope="module")
def eager(jax_fw, tmp_path_factory) -> Trace:
    """LeNet at stax's level with jit off (the nojit variant)."""
    out = tmp_path_factory.mktemp("jax-models-nojit")
    return _traces(jax_fw, [CaseSpec("lenet", "layer", layers=("python", "op"))], out, "nojit")[("lenet", "layer")]


@pytest.fixture(scope="module")
def programs(jax_fw, tmp_path_factory) -> dict[str, dict[str, dict[str, list[str]]]]:
    """MODEL@API -> pass -> the op layer's XLA:cpu instructions and those of the programs
    XLA compiled while the step ran (its own dump): the hand-written level and the stax
    level with the most programs' ops (the four models' agree; two keep the test short)."""
    tmp = tmp_path_factory.mktemp("jax-model-programs")
    proc = subprocess.run([str(envs.python_for(jax_fw)), str(ROOT / "tests" / "jax_step_programs.py"),
                           str(tmp / "dump"), "cpu", "lenet@functional", "transformer@layer"],
                          capture_output=True, text=True, timeout=600, env=runner_env(jax_fw), cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _losses(fw, cases: list[tuple[str, str]]) -> dict[str, list[float]]:
    return model_losses(fw, cases, STEPS)


def op_counts(node: Node) -> Counter[str]:
    """How often each op occurs below ``node`` (a merged node's count included)."""
    counts: Counter[str] = Counter()
    for _, n in node.walk():
        if n is not node:
            counts[n.frame.name] += n.count
    return counts


def child(node: Node, name: str) -> Node:
    (found,) = [c for c in node.children if c.frame.name == name]
    return found


def test_every_model_runs_forward_and_backward_with_its_programs(traces):
    for (model, api), t in traces.items():
        assert (t.meta["primitive"], t.meta["api"], t.meta["model"]["name"]) == (model, api, model)
        assert t.meta["jit"] is True and t.meta["parameters"] > 1000
        for pass_ in PASSES:
            assert t.layer(pass_, "python") is not None
            op = t.layer(pass_, "op")
            loss = child(op, f"jit:{model}_loss")  # forward: the loss's program; backward: its transpose
            assert loss.children, (model, api, pass_)
            assert child(op, "XLA:cpu").children, (model, api, pass_)
        # the update is a program of the backward pass only
        updates = {"functional": "jit:sgd_update", "layer": "jit:optimizer_update"}
        assert updates[api] in {c.frame.name for c in t.layer("backward", "op").children}
        assert not any("update" in c.frame.name for c in t.layer("forward", "op").children)


def dense(i: int, o: int) -> int:
    return i * o + o


def test_networks_have_the_contracts_parameters(traces):
    """The same networks as every framework's (torch's nn modules count the same)."""
    L, C, T = LENET, CIFAR, TRANSFORMER
    lenet = dense(25, L["conv1"]) + dense(L["conv1"] * 25, L["conv2"]) + dense(L["conv2"] * 25, L["fc1"]) + \
        dense(L["fc1"], L["fc2"]) + dense(L["fc2"], CLASSES)
    k = C["k"] * C["k"]
    cifar = dense(3 * k, C["conv1"]) + dense(C["conv1"] * k, C["conv1"]) + dense(C["conv1"] * k, C["conv2"]) + \
        dense(C["conv2"] * k, C["conv2"]) + dense(C["conv2"] * 8 * 8, C["fc"]) + dense(C["fc"], CLASSES)
    e, seq = T["embed"], MODELS["transformer"].shape[1]
    transformer = (T["vocab"] + seq) * e + dense(e, 3 * e) + dense(e, e) + 3 * 2 * e + dense(e, T["mlp"]) + \
        dense(T["mlp"], e) + dense(e, T["vocab"])
    want = {"lenet": lenet, "cifar": cifar, "transformer": transformer}
    for (model, api), t in traces.items():
        assert t.meta["parameters"] == want[model], (model, api)


def test_lenet_backward_computes_the_convolutions_gradients_and_subtracts_the_update(traces):
    for api in ("functional", "layer"):
        op = traces[("lenet", api)].layer("backward", "op")
        loss = op_counts(child(op, "jit:lenet_loss"))
        # conv2's gradients of its input and its weight, conv1's of its weight only: the
        # images are data, never differentiated
        assert loss["conv_general_dilated"] == 3, (api, loss)
        assert loss["select_and_scatter_add"] == 2  # the max pools' gradients
        assert op_counts(child(traces[("lenet", api)].layer("forward", "op"), "jit:lenet_loss"))[
            "conv_general_dilated"] == 2
        xla = op_counts(child(op, "XLA:cpu"))
        assert xla["convolution"] == 3, xla
        update = op_counts(child(op, "jit:sgd_update" if api == "functional" else "jit:optimizer_update"))
        assert update["sub"] == 10 and update["mul"] == 10, update  # p - lr * g, ten parameters
        assert xla["subtract"] >= 10 and xla["multiply"] >= 10, xla


def test_op_layer_is_every_program_the_step_compiled(programs):
    for workload, passes in programs.items():
        for pass_, got in passes.items():
            assert got["ran"], (workload, pass_, "XLA compiled nothing while the step ran")
            assert got["recorded"] == got["ran"], (workload, pass_, got)


def test_layer_level_is_stax_in_nhwc_with_its_own_initialisation(traces):
    lenet = traces[("lenet", "layer")].meta["model"]["defaults"]
    assert lenet["layout"].startswith("NHWC") and "stax" in lenet["api"] and "example library" in lenet["api"]
    assert "glorot_normal" in lenet["initialisation"] and "optimizers.sgd" in lenet["optimizer"]
    assert traces[("lenet", "functional")].meta["model"]["defaults"]["layout"].startswith("NCHW")
    cifar = traces[("cifar", "layer")]
    assert "momentum" in cifar.meta["model"]["defaults"]["optimizer"]
    # stax.Dropout draws its masks in the step's program: three dropout layers
    fwd = op_counts(child(cifar.layer("forward", "op"), "jit:cifar_loss"))
    assert fwd["jit:_bernoulli"] == 3 and fwd["random_bits"] >= 3, fwd
    # momentum: v = mass * v + g and p - lr * v per parameter (eight conv and dense tensors each)
    upd = op_counts(child(cifar.layer("backward", "op"), "jit:optimizer_update"))
    assert upd["sub"] == 12 and upd["add"] >= 12, upd


def test_transformer_says_what_it_built_from_primitives_and_runs_them(traces):
    t = traces[("transformer", "layer")]
    built = t.meta["model"]["built_from_primitives"]
    assert {"embedding", "layer norm", "multi-head attention"} <= set(built), built
    assert "jax.nn.dot_product_attention" in built["multi-head attention"]
    assert "standardize" in built["layer norm"]
    assert "approximate=True" in t.meta["model"]["defaults"]["gelu"]
    fwd = op_counts(child(t.layer("forward", "op"), "jit:transformer_loss"))
    assert fwd["jit:_take"] == 1 and fwd["gather"] >= 1  # the embedding
    assert fwd["jit:standardize"] == 3 and fwd["rsqrt"] == 3  # three layer norms
    assert fwd["tanh"] == 1 and fwd["exp"] >= 2  # gelu's tanh form; attention's and the loss's softmax
    bwd = t.layer("backward", "op")
    assert op_counts(child(bwd, "jit:transformer_loss"))["scatter-add"] >= 2  # embedding and target gradients
    adam = op_counts(child(bwd, "jit:optimizer_update"))
    assert adam["sqrt"] >= 1 and adam["pow"] >= 1, adam  # Adam's second moment and bias correction


def test_nojit_runs_stax_and_the_optimizer_in_python_and_compiles_no_program(eager, traces):
    assert eager.meta["jit"] is False and eager.meta["variant"] == "nojit"
    fwd = {n.frame.label for _, n in eager.layer("forward", "python").walk()}
    bwd = {n.frame.label for _, n in eager.layer("backward", "python").walk()}
    assert any(n.startswith("jax.example_libraries.stax") for n in fwd), sorted(fwd)[:50]
    assert any(n.startswith("jax.example_libraries.optimizers") for n in bwd)
    jitted = {n.frame.label for _, n in traces[("lenet", "layer")].layer("forward", "python").walk()}
    # the jitted step is not retraced: stax's apply functions ran once, when it was compiled
    assert not any(n.startswith("jax.example_libraries.stax") for n in jitted)
    for pass_ in PASSES:
        assert "XLA:cpu" not in {c.frame.name for c in eager.layer(pass_, "op").children}


@pytest.fixture(scope="module")
def jax_losses(jax_fw) -> dict[str, list[float]]:
    return _losses(jax_fw, CASES)


def test_every_model_case_trains(jax_losses):
    assert set(jax_losses) == {f"{m}-{api}" for m, api in CASES}
    for name, losses in jax_losses.items():
        assert len(losses) == STEPS
        assert all(a > b for a, b in zip(losses, losses[1:])), (name, losses)


def test_functional_lenet_computes_torchs_numbers(frameworks, jax_losses):
    torch = _losses(frameworks["torch"], [("lenet", "functional")])
    assert jax_losses["lenet-functional"] == pytest.approx(torch["lenet-functional"], rel=1e-4)
