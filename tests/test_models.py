"""The models' training steps in the survey and on the models page: a model's
must-implement list comes from the stand-in run of the whole step (torch), in the unit
of the framework's primitives, and names the entries no primitive needed; each level of
LeNet is measured; the index and survey.json carry the same figures. Framework tier:
reads the session survey (tests/conftest.py)."""

from __future__ import annotations

import json
import re

import pytest

from tracer.contract import MODELS
from tracer.trace import load


@pytest.fixture(scope="module")
def page(survey_report):
    return (survey_report.parent / "models.html").read_text()


@pytest.fixture(scope="module")
def doc(survey_report):
    return json.loads((survey_report.parent / "survey.json").read_text())["report"]["models"]


def _row(page: str, model: str, framework: str) -> str:
    m = re.search(rf'<tr class="model-row" data-model="{model}" data-framework="{framework}">(.*?)</tr>', page, re.S)
    assert m, f"no row for {model} in {framework}"
    return m.group(1)


def test_every_declared_model_has_a_row_per_framework_that_runs_it(frameworks, page, doc):
    for fw in frameworks.values():
        for model in fw.models:
            _row(page, model, fw.name)
            assert fw.name in doc[model]["frameworks"]


def test_torch_lenet_needs_what_reached_the_standin_backend(survey_report, doc):
    """The count is the stand-in run's: every op that reached the backend in the setup,
    forward and backward of either level, read back from the traces themselves."""
    traces = survey_report.parent / "traces" / "torch" / "standin-default"
    reached: set[str] = set()
    for api in MODELS["lenet"].apis:
        t = load(traces / f"lenet-{api}.json")
        assert t.info.standin is not None and t.info.model["api"] == api
        reached |= {op for ops in t.info.standin.reached.values() for op in ops}
    torch = doc["lenet"]["frameworks"]["torch"]["implement"]
    assert torch["evidence"] == "run" and "stand-in backend" in torch["unit"]
    assert set(torch["items"]) <= reached and int(torch["value"]) == len(torch["items"])
    assert {"aten::convolution_overrideable", "aten::convolution_backward_overrideable",
            "aten::nll_loss_forward.output"} <= set(torch["items"])


def test_jax_lenet_needs_what_its_stand_in_executed_with_the_compilers_list_beside(survey_report, doc):
    """JAX's count is its stand-in run's (the StableHLO ops the step's programs executed,
    op by op), with the compiler's list and the differences both ways beside it."""
    traces = survey_report.parent / "traces" / "jax" / "standin-default"
    reached: set[str] = set()
    for api in MODELS["lenet"].apis:
        t = load(traces / f"lenet-{api}.json")
        assert t.info.standin is not None and set(t.info.standin.reached) == {"forward", "backward"}
        reached |= {op for ops in t.info.standin.reached.values() for op in ops}
    jax = doc["lenet"]["frameworks"]["jax"]["implement"]
    assert jax["evidence"] == "run" and "StableHLO" in jax["unit"]
    assert set(jax["items"]) == reached and int(jax["value"]) == len(jax["items"])
    assert {"stablehlo.convolution", "stablehlo.reduce_window", "stablehlo.select_and_scatter"} <= reached
    beside = jax["beside"]
    assert beside["evidence"] in ("compiled", "lowered") and int(beside["value"]) > 0
    assert set(beside["run_only"]) <= reached and not set(beside["other_only"]) & reached
    # the differences are the lists' own: what the run has that the compiler's list lacks, and back
    read = {op for op in reached if op not in beside["run_only"]} | set(beside["other_only"])
    assert len(read) == int(beside["value"])


def test_beyond_the_primitives_is_the_loss_and_the_update_not_the_conv(doc):
    # LeNet's loss is the crossentropy primitive's; what is left is the SGD update written by hand
    lenet = doc["lenet"]["frameworks"]["torch"]["beyond_primitives"]
    assert lenet and all(op.startswith(("aten::sub", "aten::add", "aten::mul")) for op in lenet), lenet
    assert not any("convolution" in op or "max_pool2d" in op or "nll_loss" in op for op in lenet), lenet
    # the transformer family (layer norm, GELU, attention, embedding, cross-entropy, Adam)
    # covers what the encoder block needs: GELU, layer norm, the embedding's gradient and
    # Adam's moment updates are what the primitives' stand-in runs needed already
    transformer = doc["transformer"]["frameworks"]["torch"]["beyond_primitives"]
    assert not any(op.startswith(("aten::gelu", "aten::embedding_dense_backward", "aten::addcdiv", "aten::lerp"))
                   or "layer_norm" in op for op in transformer), transformer


def test_the_layer_level_adds_python_not_ops(doc, page):
    """torch.nn and torch.optim add Python calls around the same ops: the layer level of
    LeNet makes more Python calls than the functional level, and about the same op records."""
    # one row per level: the GPU machine's own CPU path (recorded beside its GPU path) is not this survey's
    assert sorted(lv["api"] for lv in doc["lenet"]["frameworks"]["torch"]["levels"]) == ["functional", "layer"]
    levels = {lv["api"]: lv for lv in doc["lenet"]["frameworks"]["torch"]["levels"]}
    fn, layer = levels["functional"], levels["layer"]
    assert layer["python_calls"] > 2 * fn["python_calls"] > 0
    assert abs(layer["distinct_ops"] - fn["distinct_ops"]) <= 10
    assert fn["seconds"] > 0 and layer["seconds"] > 0
    assert 'id="plot-python"' in page and 'id="overhead-table"' in page


def test_each_level_records_the_frameworks_defaults(doc, page):
    layer = next(lv for lv in doc["cifar"]["frameworks"]["torch"]["levels"] if lv["api"] == "layer")
    assert "kaiming_uniform" in layer["defaults"]["initialisation"]
    assert layer["defaults"]["threads"] >= 1
    assert "kaiming_uniform" in page


def test_each_step_names_its_gpu_path_and_its_evidence(doc, page):
    """torch's and JAX's model steps were recorded on an H100 (tracer/reference/recorded);
    Chainer's GPU path is read from its source; each row says which."""
    torch = doc["lenet"]["frameworks"]["torch"]["gpu"]
    assert {g["api"] for g in torch if g["evidence"] == "recorded"} == {"functional", "layer"}
    assert all("cuDNN" in g["libraries"] for g in torch if g["evidence"] == "recorded")
    assert {g["evidence"] for g in doc["lenet"]["frameworks"]["chainer"]["gpu"]} == {"source"}
    assert 'class="small gpu-step"' in page and "NVIDIA H100 80GB HBM3" in page


def test_the_index_links_each_model(survey_report):
    index = survey_report.read_text()
    assert 'id="index-models"' in index and 'href="models.html#lenet"' in index
