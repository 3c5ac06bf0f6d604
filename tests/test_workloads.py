"""Your own workload (`--workload FILE.py`, docs/workloads.md) on the real frameworks:
workloads written from the docs alone (tests/workloads/) probe, audit and scaffold in
torch and TensorFlow; every example in examples/ runs in its framework; torchvision's
ResNet-18's skeleton trains it and each op is needed; a survey adds a workload's rows
and its per-op table; a bad workload is one line naming the user's file and line.
The traces are recorded once per session and shared."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer.contract import STANDIN_LIB, Exit
from tracer.trace import Trace, load

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "workloads"
TORCH_MLP = HERE / "torch_mlp.py"
TF_MLP = HERE / "tf_keras_mlp.py"


def _ops(trace: Trace, pass_: str) -> set[str]:
    tree = trace.layer(pass_, "op")
    assert tree is not None, pass_
    return {n.frame.name for _, n in tree.walk() if n.frame.kind == "op"}


@pytest.fixture(scope="session")
def workload_traces(frameworks, tmp_path_factory) -> dict[str, Path]:
    """The docs-only workloads probed by the real command: torch on the CPU (four layers)
    and its stand-in device, TensorFlow on the CPU."""
    out = tmp_path_factory.mktemp("workloads")
    runs = {"torch-cpu": ("torch", TORCH_MLP, ()), "torch-standin": ("torch", TORCH_MLP, ("--device", "standin")),
            "tf-cpu": ("tensorflow", TF_MLP, ("--layers", "python,op,library"))}
    paths = {}
    for key, (fw, file, extra) in runs.items():
        path = out / f"{key}.json"
        proc = dltrace("probe", fw, "--workload", str(file), *extra, "-o", str(path))
        assert proc.returncode == Exit.OK, proc.stderr
        paths[key] = path
    return paths


def test_a_torch_workload_from_the_docs_is_traced_in_four_layers(workload_traces):
    t = load(workload_traces["torch-cpu"])
    assert (t.meta["primitive"], t.meta["api"], t.meta["passes"]) == ("torch_mlp", "user", ["forward", "backward"])
    assert t.meta["model"]["workload"] == {"file": "torch_mlp.py", "function": "workload", "single_step": False}
    assert all(t.layer(p, layer) is not None for p in ("forward", "backward") for layer in ("python", "op"))
    assert {"aten::linear", "aten::relu_", "aten::dropout"} <= _ops(t, "forward")
    # the backward pass is the gradients and Adam's update, as the workload's backward(loss) runs them
    assert any(op.startswith("Optimizer.step#Adam") for op in _ops(t, "backward"))
    assert t.meta["native"].get("pyspy_samples", 0) > 0 or "error" in t.meta["native"]


def test_the_standin_run_of_a_workload_names_what_no_builtin_case_reaches(workload_traces):
    """torch's in-place ReLU and dropout reach the stand-in backend (no built-in case
    reaches them: test_a_survey_adds_the_workloads_rows sets them against the built-in ones)."""
    t = load(workload_traces["torch-standin"])
    reached = {op for ops in t.meta["standin"]["reached"].values() for op in ops}
    assert {"aten::relu_", "aten::addmm.out"} <= reached, reached
    assert any("bernoulli" in op or "dropout" in op for op in reached), reached
    assert any(n.frame.lib == STANDIN_LIB for _, n in t.layer("forward", "op").walk())


def test_a_tensorflow_workload_from_the_docs_is_traced(workload_traces):
    t = load(workload_traces["tf-cpu"])
    assert t.meta["framework"] == "tensorflow" and t.meta["api"] == "user"
    assert t.meta["device_string"] == "/CPU:0"
    forward, backward = _ops(t, "forward"), _ops(t, "backward")
    assert {"MatMul", "Relu"} <= forward, forward
    # the gradients, then Keras 3's Adam, written from TensorFlow's ops: its variables assigned
    assert "ReluGrad" in backward and {"AssignSubVariableOp", "AssignVariableOp"} <= backward, backward


def test_a_single_step_callable_is_one_pass(frameworks, tmp_path):
    path = tmp_path / "step.json"
    proc = dltrace("probe", "torch", "--workload", f"{TORCH_MLP}:whole_step", "--layers", "python,op",
                   "-o", str(path))
    assert proc.returncode == Exit.OK, proc.stderr
    t = load(path)
    assert t.meta["primitive"] == "torch_mlp-whole_step" and t.meta["passes"] == ["forward"]
    assert t.meta["model"]["workload"]["single_step"] is True
    # the one pass is the whole step: the network, its backward and Adam's update
    assert {"aten::relu_"} <= _ops(t, "forward") and any("Adam" in op for op in _ops(t, "forward"))


@pytest.mark.parametrize("framework, name", [("torch", "resnet18"), ("tensorflow", "mobilenet_v2"),
                                             ("mxnet", "resnet18_v1"), ("chainer", "resnet50"),
                                             ("jax", "mobilenet_v2"), ("jax", "flax_cnn")])
def test_every_example_runs_in_its_framework(frameworks, framework, name, tmp_path):
    """Each example, a real model from its framework's own zoo, with what it needs
    installed (frameworks.yaml extras), gives both passes' Python and op layers."""
    ex = frameworks[framework].examples[name]
    assert ex.path.is_file() and ex.path.is_relative_to(ROOT / "examples")
    path = tmp_path / "t.json"
    proc = dltrace("probe", framework, "--workload", str(ex.path), "--layers", "python,op", "-o", str(path),
                   timeout=900)
    assert proc.returncode == Exit.OK, proc.stderr
    t = load(path)
    assert t.meta["primitive"] == name and t.meta["passes"] == ["forward", "backward"]
    for pass_ in ("forward", "backward"):
        assert len(_ops(t, pass_)) > 3, (pass_, t.meta.get("runs"))
    # a real network's step: its convolutions reach the op layer in the framework's own names
    conv = {"torch": "aten::convolution", "tensorflow": "Conv2D", "mxnet": "Convolution",
            "chainer": "Convolution2DFunction.forward", "jax": "conv_general_dilated"}[framework]
    assert any(conv in op for op in _ops(t, "forward")), sorted(_ops(t, "forward"))[:40]


# ----------------------------------------------------------------------------- the skeleton


@pytest.fixture(scope="session")
def resnet_skeleton(frameworks, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("resnet") / "sk"
    example = frameworks["torch"].examples["resnet18"].path
    proc = dltrace("scaffold", "torch", "--workload", str(example), "-o", str(folder), "--check", timeout=900)
    return folder, proc


def test_the_resnet18_skeleton_trains_it(resnet_skeleton):
    """torchvision's ResNet-18 on a backend registering exactly the run's list: two steps
    match the CPU, and each op is needed; the list has what no built-in case reaches."""
    folder, proc = resnet_skeleton
    assert proc.returncode == Exit.OK, proc.stderr
    assert re.search(r"resnet18 \(user\): 2 steps match the CPU: the loss, 62 gradients and the parameters after "
                     r"the update", proc.stdout), proc.stdout
    ops = [line.split()[0] for line in (folder / "ops.txt").read_text().splitlines()
           if line.strip() and not line.startswith("#")]
    assert f"{len(ops)} ops, each needed" in proc.stdout
    assert {"aten::relu_", "aten::mean.out", "aten::native_batch_norm", "aten::convolution_overrideable"} <= set(ops)
    manifest = json.loads((folder / "scaffold.json").read_text())
    assert manifest["cases"][0]["user"]["name"] == "resnet18"


def test_a_skeleton_without_one_registration_fails_naming_it(resnet_skeleton, tmp_path):
    folder, proc = resnet_skeleton
    assert proc.returncode == Exit.OK, proc.stderr
    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    init = (copy / "mydevice" / "kernels.py").read_text()
    # the kernel table names each op once: dropping aten::mean.out's entry removes its registration
    table = re.search(r'^\s*"aten::mean\.out": \w+,\n', init, re.M)
    assert table, "no KERNELS entry for aten::mean.out"
    (copy / "mydevice" / "kernels.py").write_text(init.replace(table.group(0), ""))
    line = one_line_error(dltrace("scaffold", "torch", "-o", str(copy), "--check", timeout=900))
    assert "aten::mean.out" in line or "mean" in line, line


def test_a_tensorflow_workload_scaffolds(frameworks, tmp_path):
    """TensorFlow's PluggableDevice skeleton for a workload written from the docs: one
    registration per op that reached the stand-in and element type it ran in (its check,
    which builds it: tests/test_tensorflow_standin.py)."""
    proc = dltrace("scaffold", "tensorflow", "--workload", str(TF_MLP), "-o", str(tmp_path / "tf"), timeout=900)
    assert proc.returncode == Exit.OK, proc.stderr
    ops = (tmp_path / "tf" / "ops.txt").read_text()
    assert "MatMul" in ops and "ReluGrad" in ops
    kernels = (tmp_path / "tf" / "mydevice" / "kernels.cc").read_text()
    assert '{"MatMul", MatMul_kernel, "T", static_cast<TF_DataType>(1)},' in kernels
    assert "TF_RegisterKernelBuilder" in kernels


# ----------------------------------------------------------------------------- audit and survey


def test_audit_of_a_workload_writes_its_table_as_the_survey_does(workload_survey, tmp_path):
    """Against the survey's built-in traces, the audit's table marks as beyond the built-in
    cases exactly the rows the survey's own export marks (one rule: tracer.analysis.models)."""
    table = tmp_path / "ops.csv"
    proc = dltrace("audit", "torch", "--workload", str(TORCH_MLP), "--traces", str(workload_survey / "traces"),
                   "-o", str(table), timeout=900)
    assert proc.returncode == Exit.OK, proc.stderr
    assert "torch_mlp: what a torch backend must implement" in proc.stdout
    assert "decision sites on torch_mlp's path" in proc.stdout
    rows = list(csv.DictReader(io.StringIO(table.read_text(), newline="")))
    survey = list(csv.DictReader(io.StringIO((workload_survey / "workloads" / "torch_mlp-torch.coverage.csv")
                                             .read_text(), newline="")))
    assert {(r["op"], r["beyond_built_in"]) for r in rows} == {(r["op"], r["beyond_built_in"]) for r in survey}
    assert {r["beyond_built_in"] for r in rows} == {"yes", "no"}  # addmm is dense's; the in-place ReLU no case's
    assert rows and set(rows[0]) == {"op", "name", "overload", "passes", "calls", "also_in", "beyond_built_in",
                                     "incomplete"}
    assert all(r["incomplete"] == "" for r in rows)  # every pass ran whole on the stand-in: the list
    by_op = {r["op"]: r for r in rows}
    assert by_op["aten::relu_"]["passes"] == "forward" and int(by_op["aten::relu_"]["calls"]) >= 1
    assert by_op["aten::addmm.out"]["overload"] == "out"
    assert by_op["aten::relu_"]["beyond_built_in"] == "yes" and by_op["aten::addmm.out"]["beyond_built_in"] == "no"
    cost = r"(×[\d.]+ \(×[\d.]+–×[\d.]+\)|within noise \(×[\d.]+–×[\d.]+\))"
    assert re.search(rf"forward: untraced step [\d.]+ ms; recording cost \(median of paired steps, quartiles\): "
                     rf"python {cost}, op {cost}, native ", proc.stdout), proc.stdout
    assert not re.search(r"(python|op|native) ×0\.", proc.stdout)  # a factor under 1 is never shown as a cost


def test_audit_of_a_tensorflow_workload(frameworks):
    proc = dltrace("audit", "tensorflow", "--workload", str(TF_MLP), "--traces", "/nonexistent", timeout=900)
    assert proc.returncode == Exit.OK, proc.stderr
    assert "tf_keras_mlp: what a tensorflow backend must implement" in proc.stdout
    assert "MatMul" in proc.stdout


@pytest.fixture(scope="session")
def workload_survey(frameworks, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wsurvey")
    proc = dltrace("survey", "torch", "--primitives", "relu,dense", "--models", "lenet", "--no-variants",
                   "--no-native", "--no-arm", "--no-imports", "--no-examples", "--workload", str(TORCH_MLP),
                   "-o", str(out), timeout=1800)
    assert proc.returncode == Exit.OK, proc.stderr
    return out


def test_a_survey_adds_the_workloads_rows(workload_survey):
    page = (workload_survey / "models.html").read_text()
    assert 'id="torch_mlp"' in page and "your workload" in page
    assert "torch_mlp.py" in page and "no built-in case" in page
    index = (workload_survey / "index.html").read_text()
    assert 'href="models.html#torch_mlp"' in index
    doc = json.loads((workload_survey / "survey.json").read_text())
    row = doc["report"]["models"]["torch_mlp"]
    assert row["workload"] == {"file": "torch_mlp.py", "function": "workload"}
    cov = row["frameworks"]["torch"]["coverage"]
    by_op = {r["op"]: r for r in cov["rows"]}
    # the in-place ReLU reaches no built-in case; addmm is dense's and LeNet's too
    assert by_op["aten::relu_"]["also_in"] == [] and "aten::relu_" in row["frameworks"]["torch"]["beyond_primitives"]
    assert {"dense", "lenet"} <= set(by_op["aten::addmm.out"]["also_in"])
    assert (workload_survey / "workloads" / "torch_mlp-torch.coverage.csv").is_file()


# ----------------------------------------------------------------------------- bad workloads

BAD = {
    "raises.py": ("import torch\ndef workload(device):\n    raise ValueError('my model is broken')\n",
                  r"raises\.py:3: calling workload\(device\): ValueError: my model is broken"),
    "returns.py": ("def workload(device):\n    return 42\n",
                   r"returns\.py:1: workload\(device\) returned a int; it must return \(forward, backward\)"),
    "nofunction.py": ("def train(device):\n    pass\n",
                      r"nofunction\.py: no function 'workload' \(it defines: train\)"),
    "syntax.py": ("def workload(device)\n    pass\n", r"syntax\.py:1: the workload file does not parse"),
    "exits.py": ("import sys\ndef workload(device):\n    sys.exit(3)\n", r"exits\.py:3: calling workload\(device\): "
                                                                       r"SystemExit: 3"),
    "backward.py": ("import torch\ndef workload(device):\n    def forward():\n        return torch.ones(2).sum()\n"
                    "    def backward(loss):\n        raise RuntimeError('no grad')\n    return forward, backward\n",
                    r"backward\.py:6: running backward\(loss\): RuntimeError: no grad"),
    "gpu.py": ("import torch\ndef workload(device):\n"
               "    return (lambda: torch.ones(1, device='cuda')), (lambda l: None)\n",
               r"gpu\.py:3: running forward\(\): AssertionError: Torch not compiled with CUDA enabled"),
    "endless.py": ("import itertools\ndef workload(device):\n"
                   "    return (lambda: 0), (lambda loss: None), itertools.repeat(0)\n",
                   r"endless\.py:2: the parameters workload\(device\) returned are more than 100,000"),
    "spews.py": ("import torch\ndef workload(device):\n    def step():\n        for _ in range(100000):\n"
                 "            print('x' * 100)\n        return torch.ones(1).sum()\n    return step\n", None),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_workload_is_one_line_naming_its_line(frameworks, tmp_path, name):
    text, said = BAD[name]
    file = tmp_path / name
    file.write_text(text)
    proc = dltrace("probe", "torch", "--workload", str(file), "--layers", "python", timeout=300)
    if said is None:  # what it writes is bounded, and the case goes on
        assert proc.returncode == Exit.OK, proc.stderr
        return
    line = one_line_error(proc)
    assert re.search(said, line), line
    assert str(tmp_path) in line  # the user's own file, by its path
    assert "tracer/" not in line  # never dltrace's frames


def test_verbose_shows_the_users_frames_only(frameworks, tmp_path):
    file = tmp_path / "deep.py"
    file.write_text("def helper():\n    raise KeyError('missing layer')\n\ndef workload(device):\n    helper()\n")
    proc = dltrace("probe", "torch", "--workload", str(file), "--verbose")
    assert proc.returncode == Exit.ERROR
    assert f'File "{file}", line 5, in workload' in proc.stderr and f'File "{file}", line 2, in helper' in proc.stderr
    assert "tracer/collect" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("dltrace: error: ")


def test_a_workload_that_never_returns_says_where_it_was(frameworks, tmp_path):
    file = tmp_path / "hangs.py"
    file.write_text("import time\n\ndef workload(device):\n    while True:\n        time.sleep(0.2)\n")
    line = one_line_error(dltrace("probe", "torch", "--workload", str(file), "--timeout", "8"))
    assert "timed out after 8 s" in line and f"stuck in {file}:5" in line, line


def test_a_workload_that_allocates_without_bound_is_stopped(frameworks, tmp_path):
    file = tmp_path / "hog.py"
    file.write_text("def workload(device):\n    hog = []\n    while True:\n        hog.append(bytearray(64 << 20))\n")
    line = one_line_error(dltrace("probe", "torch", "--workload", str(file), env={"DLTRACE_PROBE_MEMORY_GB": "1.5"}))
    assert "used more than 1.5 GiB of memory and was stopped" in line, line


@pytest.mark.parametrize("args, said", [
    (("--workload", "nothere.py"), "nothere.py: no such file"),
    (("--workload", "model.txt"), "give a Python file"),
    (("relu", "--workload", "x.py"), "give relu or --workload, not both"),
    (("--workload", "x.py", "--shape", "2x2"), "a workload makes its own inputs"),
    (("--workload", "lenet.py"), "is a built-in primitive's or model's"),
    (("--workload", "x.py:not-a-name"), "is not a Python function name"),
])
def test_a_wrong_workload_on_the_command_line_is_a_usage_error(tmp_path, args, said):
    (tmp_path / "x.py").write_text("def workload(device):\n    pass\n")
    (tmp_path / "lenet.py").write_text("def workload(device):\n    pass\n")
    line = one_line_error(dltrace("probe", "torch", *args, cwd=tmp_path), Exit.USAGE)
    assert said in line, line
