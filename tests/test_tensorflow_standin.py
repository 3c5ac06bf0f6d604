"""TensorFlow's stand-in PluggableDevice and `dltrace scaffold tensorflow`: a device
built here with g++ against the wheel's own headers, whose one generic kernel records
each op and re-runs it on TensorFlow's CPU kernels; the skeleton is a PluggableDevice
of its own registering exactly what reached it, and its check builds it and proves it.
One session-scoped LeNet skeleton, written and checked by the real command; the tests
read it, check edited copies of it, and compare its list with a stand-in probe of
their own. Then a variable's ops (an embedding's gather, Adam's update) run on the
stand-in, and a tf.function's graph (a Keras train_step) whose vocabulary lookup it
places on the host: one session-scoped skeleton of it, not checked whole (its check
runs a process per op), built once and run without one kernel."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import dltrace, edited_skeleton, one_line_error, skeleton_ops
from tests.test_ctrace import runner_env
from tracer import envs
from tracer.contract import STANDIN_LIB, Exit
from tracer.paths import PACKAGE
from tracer.trace import load


@pytest.fixture(scope="session")
def tf_lenet_skeleton(frameworks, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("scaffold-tf") / "lenet"
    return folder, dltrace("scaffold", "tensorflow", "--model", "lenet", "-o", str(folder), "--check", timeout=1200)


def _edited(skeleton: Path, tmp_path: Path, old: str, new: str) -> Path:
    return edited_skeleton(skeleton, tmp_path, "mydevice/kernels.cc", old, new)


def _check(folder: Path) -> subprocess.CompletedProcess:
    return dltrace("scaffold", "tensorflow", "-o", str(folder), "--check", timeout=1200)


def test_the_tensorflow_lenet_skeleton_passes_its_check(tf_lenet_skeleton):
    folder, proc = tf_lenet_skeleton
    assert proc.returncode == Exit.OK, proc.stderr
    ops = skeleton_ops(folder)
    for api in ("functional", "layer"):
        assert re.search(rf"lenet \({api}\): 2 steps match the CPU: the loss, 10 gradients and the parameters "
                         "after the update", proc.stdout), proc.stdout
    assert f"{len(ops)} ops, each needed" in proc.stdout, proc.stdout
    assert "/device:MYDEVICE:0" in proc.stdout
    # the device is dltrace's own stand-in source; kernels.cc registers exactly ops.txt
    assert (folder / "mydevice" / "device.cc").read_bytes() == \
        (PACKAGE / "probes" / "tensorflow_standin.cc").read_bytes()
    source = (folder / "mydevice" / "kernels.cc").read_text()
    registered = re.findall(r'^    \{"(\w+)", (\w+), ', source, re.M)
    assert list(dict.fromkeys(op for op, _ in registered)) == list(ops)
    assert {"Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "MatMul", "MaxPoolGrad",
            "SparseSoftmaxCrossEntropyWithLogits"} <= set(ops)
    assert not {"ReadVariableOp", "AssignSubVariableOp", "VarHandleOp", "Identity"} & set(ops)  # TensorFlow's own
    # one registration per op and element type it ran in (float32: TF_FLOAT, 1)
    assert '{"Conv2D", Conv2D_kernel, "T", static_cast<TF_DataType>(1)},' in source
    manifest = json.loads((folder / "scaffold.json").read_text())
    assert manifest["device_type"] == "MYDEVICE" and manifest["made_by"]["evidence"] == "run on the stand-in device"
    assert "NOT RUN" not in (folder / "README.md").read_text()


def test_the_list_is_the_standin_probes(tf_lenet_skeleton, tmp_path):
    folder, _ = tf_lenet_skeleton
    reached: dict[str, set[str]] = {}
    for api in ("functional", "layer"):
        out = tmp_path / f"{api}.json"
        proc = dltrace("probe", "tensorflow", "lenet", "--api", api, "--device", "standin", "--layers", "python,op",
                       "-o", str(out), timeout=600)
        assert proc.returncode == 0, proc.stderr
        t = load(out)
        assert t.info.standin is not None and t.info.standin.unit and "PluggableDevice" in t.info.standin.unit
        for pass_, ops in t.info.standin.reached.items():
            reached.setdefault(pass_, set()).update(ops)
        marked = {n.frame.name for _, n in t.run("forward", "warm").layers["op"].walk() if n.frame.lib == STANDIN_LIB}
        assert "Conv2D" in marked and marked <= set(t.info.standin.reached["forward"])
    ops = skeleton_ops(folder)
    assert set(ops) == set().union(*reached.values())
    for op, passes in ops.items():
        assert set(passes) == {p for p in ("setup", "forward", "backward") if op in reached.get(p, set())}, op


def test_a_skeleton_without_one_registration_fails_its_check_naming_it(tf_lenet_skeleton, tmp_path):
    folder, _ = tf_lenet_skeleton
    text = (folder / "mydevice" / "kernels.cc").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith('    {"MaxPoolGrad", '))
    copy = _edited(folder, tmp_path, line + "\n", "")
    said = one_line_error(_check(copy), Exit.ERROR)
    assert "MaxPoolGrad has no kernel on device:MYDEVICE:0" in said, said


def test_a_kernel_that_computes_otherwise_fails_the_check(tf_lenet_skeleton, tmp_path):
    folder, _ = tf_lenet_skeleton
    copy = _edited(folder, tmp_path, "void Relu_kernel(void* kernel, TF_OpKernelContext* ctx) "
                   "{ dltrace_compute(kernel, ctx); }",
                   "void Relu_kernel(void* kernel, TF_OpKernelContext* ctx) {\n"
                   "  TF_Tensor* in = nullptr; TF_Status* s = TF_NewStatus(); TF_GetInput(ctx, 0, &in, s);\n"
                   "  TF_SetOutput(ctx, 0, in, s); TF_DeleteTensor(in); TF_DeleteStatus(s);\n}")
    said = one_line_error(_check(copy), Exit.ERROR)
    wrong = r"lenet \(functional\): the (output|gradients|parameters) of step 1 differ from the CPU's"
    assert re.search(wrong, said), said


def test_a_skeleton_that_does_not_build_is_one_line(tf_lenet_skeleton, tmp_path):
    folder, _ = tf_lenet_skeleton
    copy = _edited(folder, tmp_path, "namespace {", "namespace { this is not C++;")
    said = one_line_error(_check(copy), Exit.ERROR)
    assert "the skeleton does not build" in said and "error" in said, said


def test_a_pass_the_standin_cannot_place_fails_the_probe_naming_the_op(frameworks, tmp_path):
    """An op with no kernel on the stand-in device (a hash table: a resource that is no
    variable) fails the forward pass there: exit 1 naming the pass and the op, never a
    list without it."""
    workload = Path(__file__).parent / "workloads" / "tf_hash_table.py"
    line = one_line_error(dltrace("probe", "tensorflow", "--workload", str(workload), "--device", "standin",
                                  "--layers", "op", "-o", str(tmp_path / "t.json"), timeout=600), Exit.ERROR)
    assert "running forward()" in line and "HashTableV2" in line and "STANDIN" in line, line
    assert not (tmp_path / "t.json").exists()


WORKLOADS = Path(__file__).parent / "workloads"


def test_a_variables_ops_run_on_the_standin_as_on_the_cpu(frameworks, tmp_path):
    """An embedding's gather and Adam's updates take a variable (a resource): the stand-in
    runs them on its own variables (tensorflow_standin_vars.cc), so they are on the list
    from a run, the first step's slot initialisation (Fill) with them; and two steps give
    the CPU's loss, gradients and parameters (the skeleton check's comparison, on
    dltrace's own stand-in)."""
    workload = WORKLOADS / "tf_embedding_adam.py"
    out = tmp_path / "t.json"
    proc = dltrace("probe", "tensorflow", "--workload", str(workload), "--device", "standin", "--layers", "op",
                   "-o", str(out), timeout=600)
    assert proc.returncode == Exit.OK, proc.stderr
    standin = load(out).info.standin
    assert standin is not None
    assert "ResourceGather" in standin.reached["forward"]
    assert {"ResourceApplyAdam", "ResourceScatterAdd", "Fill"} <= set(standin.reached["backward"])
    script = ("from tracer.probes import tensorflow_skeleton as sk, tensorflow_standin\n"
              "from tracer.probes.skeleton_check import Spec\n"
              f"user = {{'name': 'tf_embedding_adam', 'file': {str(workload)!r}, 'function': 'workload'}}\n"
              "device = tensorflow_standin.install()\n"
              "print(sk.check_case(Spec('tf_embedding_adam', 'user', (), user), device, set()))\n")
    fw = frameworks["tensorflow"]
    ran = subprocess.run([str(envs.python_for(fw)), "-c", script], capture_output=True, text=True, timeout=600,
                         env=runner_env(fw), stdin=subprocess.DEVNULL)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "tf_embedding_adam (user): 2 steps match the CPU: the loss, 2 gradients and the parameters after the " \
           "update" in ran.stdout, ran.stdout


@pytest.fixture(scope="session")
def tf_graph_skeleton(frameworks, tmp_path_factory) -> Path:
    """A skeleton of a Keras train_step run as a graph (tests/workloads/tf_graph_train_step.py),
    written by the real command, unchecked."""
    folder = tmp_path_factory.mktemp("scaffold-tf-graph") / "graph"
    proc = dltrace("scaffold", "tensorflow", "--workload", str(WORKLOADS / "tf_graph_train_step.py"),
                   "-o", str(folder), timeout=900)
    assert proc.returncode == Exit.OK, proc.stderr
    return folder


def test_a_graphs_host_placements_are_on_its_list(tf_graph_skeleton):
    """The graph ran on the stand-in: its ops reached the device, and the ops it placed on
    the host (the vocabulary's table lookup, beside its CPU table) are recorded per pass,
    in the trace's meta and the skeleton's README, never registered as its kernels."""
    ops = skeleton_ops(tf_graph_skeleton)
    assert {"MatMul", "BiasAddGrad", "SparseSoftmaxCrossEntropyWithLogits"} <= set(ops)
    assert not {"LookupTableFindV2", "HashTableV2"} & set(ops)
    readme = (tf_graph_skeleton / "README.md").read_text()
    assert "| LookupTableFindV2 | forward |" in readme and "| HashTableV2 | setup |" in readme, readme


def test_a_graph_skeleton_without_a_kernel_fails_naming_the_op_it_put_on_the_host(frameworks, tf_graph_skeleton):
    """In a graph an op with no kernel on the device is no error: the placer puts it on the
    host. A build without MatMul's registration fails the step all the same, naming it
    (the check's own run of one left-out op: what --check's minimality runs per op)."""
    fw = frameworks["tensorflow"]
    script = ("import sys\nfrom pathlib import Path\n"
              "from tracer.probes import tensorflow_skeleton as sk\n"
              "manifest, _ = sk.read_manifest(Path(sys.argv[1]))\n"
              "sk.build(Path(sys.argv[1]), manifest['package'], manifest['device_type'])\n")
    built = subprocess.run([str(envs.python_for(fw)), "-c", script, str(tf_graph_skeleton)], capture_output=True,
                           text=True, timeout=600, env=runner_env(fw), stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(envs.python_for(fw)), str(tf_graph_skeleton / "check.py"), "--without", "MatMul"],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env={**runner_env(fw), "DLTRACE_SKELETON_WITHOUT": "MatMul"})
    assert ran.returncode == Exit.ERROR, ran.stderr[-2000:]
    said = ran.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"tf_graph_train_step \(user\): (\w+, )*MatMul(, \w+)* ran on the host: a graph placed "
                        r"(it|them) there, for want of a kernel on /device:MYDEVICE:0", said), said
