"""`dltrace scaffold tensorflow` / `dltrace scaffold jax`: the must-implement list as the
skeleton of the interface's registration table, NOT RUN. One session-scoped skeleton
each, written by the real command; the TensorFlow list is compared with the report's
computation over a probe of its own, and both C++ files are parsed by a compiler
against the headers the TensorFlow wheel ships (syntax only: nothing is built or run)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer import envs
from tracer.contract import Exit
from tracer.process.backend_needs import backend_needs
from tracer.process.scorecard import interface_entries
from tracer.trace import load


def _ops(folder: Path) -> list[str]:
    return [line.split()[0] for line in (folder / "ops.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="session")
def tf_lenet(frameworks, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("tables") / "tf-lenet"
    return folder, dltrace("scaffold", "tensorflow", "--model", "lenet", "-o", str(folder), timeout=600)


@pytest.fixture(scope="session")
def jax_prims(frameworks, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("tables") / "jax-prims"
    return folder, dltrace("scaffold", "jax", "--primitives", "conv2d,dense", "-o", str(folder), timeout=600)


def _syntax(frameworks, source: Path) -> subprocess.CompletedProcess:
    """The file parsed by g++ against the C API headers of TensorFlow's wheel (which also
    ships xla/pjrt/c/pjrt_c_api.h): syntax and types only, nothing built."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler on this machine to parse the skeleton with")
    python = envs.python_for(frameworks["tensorflow"])
    include = subprocess.run([str(python), "-c", "import tensorflow as tf; print(tf.sysconfig.get_include())"],
                             capture_output=True, text=True, timeout=300).stdout.strip().splitlines()[-1]
    return subprocess.run([compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-parameter",
                           f"-I{include}", str(source)], capture_output=True, text=True, timeout=120)


def test_the_tensorflow_table_is_the_reports_list(tf_lenet, frameworks, tmp_path):
    """ops.txt is the report's registry figure over LeNet's two levels (a probe of its own:
    backend_needs over the CPU traces' kernel registry, interface entries only)."""
    folder, proc = tf_lenet
    assert proc.returncode == Exit.OK, proc.stderr
    traces = []
    for api in ("functional", "layer"):
        out = tmp_path / f"{api}.json"
        probe = dltrace("probe", "tensorflow", "lenet", "--api", api, "--layers", "python,op", "-o", str(out))
        assert probe.returncode == 0, probe.stderr
        traces.append(load(out))
    needs = backend_needs(traces)
    assert needs is not None
    assert _ops(folder) == interface_entries(needs.must_implement)
    assert {"Conv2D", "Conv2DBackpropFilter", "MatMul", "SparseSoftmaxCrossEntropyWithLogits"} <= set(_ops(folder))
    assert f"kernels.cc registers {len(_ops(folder))} ops" in proc.stdout and "NOT RUN" in proc.stdout


def test_each_op_has_its_registration_block(tf_lenet):
    """One TF_NewKernelBuilder ... TF_RegisterKernelBuilder block per op and signature, for
    the device type, with the dtypes the step ran (Conv2D: T=float32)."""
    folder, _ = tf_lenet
    source = (folder / "kernels.cc").read_text()
    blocks = re.findall(r'TF_NewKernelBuilder\("(\w+)", kDeviceType, nullptr, &Compute\1, nullptr\);\n'
                        r'((?:.*TF_KernelBuilder_TypeConstraint.*\n.*Check.*\n)*)'
                        r'\s*TF_RegisterKernelBuilder\("(\w+)", builder, status\);', source)
    assert sorted({op for op, _, _ in blocks}) == sorted(_ops(folder))
    assert 'constexpr char kDeviceType[] = "MYDEVICE";' in source
    conv = next(c for op, c, _ in blocks if op == "Conv2D")
    assert 'TF_KernelBuilder_TypeConstraint(builder, "T", TF_FLOAT, status);' in conv
    assert len({kernel for _, _, kernel in blocks}) == len(blocks)  # each registration its own kernel name
    assert len(re.findall(r"// TODO: your kernel", source)) == len(_ops(folder))


def test_the_tensorflow_readme_says_not_run(tf_lenet):
    folder, _ = tf_lenet
    readme = (folder / "README.md").read_text()
    assert readme.startswith("# mydevice: a TensorFlow PluggableDevice's kernel registrations (NOT RUN)")
    assert "neither compiled nor run" in readme and "dltrace scaffold tensorflow --model lenet" in readme
    assert re.search(r"TensorFlow 2\.\d+", readme)
    manifest = json.loads((folder / "scaffold.json").read_text())
    assert manifest["run"] is False and manifest["made_by"]["evidence"] == "registry"


def test_the_tensorflow_skeleton_parses_against_tensorflows_headers(tf_lenet, frameworks):
    folder, _ = tf_lenet
    proc = _syntax(frameworks, folder / "kernels.cc")
    assert proc.returncode == 0, proc.stderr


def test_the_jax_table_names_the_stablehlo_ops(jax_prims, frameworks):
    folder, proc = jax_prims
    assert proc.returncode == Exit.OK, proc.stderr
    ops = _ops(folder)
    assert {"stablehlo.convolution", "stablehlo.dot_general"} <= set(ops)
    assert all(op.startswith(("stablehlo.", "chlo.", "mhlo.")) for op in ops), ops
    source = (folder / "pjrt_plugin.cc").read_text()
    assert re.findall(r'^    \{"([\w.@ ]+)", ', source, re.M) == ops  # kMustLower: the same ops, in order
    for entry in ("GetPjrtApi", "PJRT_Client_Create", "PJRT_Client_Compile", "PJRT_LoadedExecutable_Execute"):
        assert entry in source
    readme = (folder / "README.md").read_text()
    assert "NOT RUN" in readme and "neither compiled nor run" in readme
    assert json.loads((folder / "scaffold.json").read_text())["run"] is False


def test_the_jax_skeleton_parses_against_the_pjrt_header(jax_prims, frameworks):
    folder, _ = jax_prims
    proc = _syntax(frameworks, folder / "pjrt_plugin.cc")
    assert proc.returncode == 0, proc.stderr


# ----------------------------------------------------------------------------- bad input (no framework)

@pytest.mark.parametrize("framework, interface", [("tensorflow", "PluggableDevice"), ("jax", "PJRT plugin")])
def test_check_on_a_table_is_a_usage_error(tmp_path, framework, interface):
    line = one_line_error(dltrace("scaffold", framework, "--model", "lenet", "-o", str(tmp_path / "x"), "--check"),
                          Exit.USAGE)
    assert "--check" in line and interface in line and "NOT RUN" in line and "cannot be built or run here" in line
    assert not (tmp_path / "x").exists()
    line = one_line_error(dltrace("scaffold", framework, "-o", str(tmp_path / "x"), "--check"), Exit.USAGE)
    assert "NOT RUN" in line
