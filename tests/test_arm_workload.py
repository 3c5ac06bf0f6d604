"""The ARM audit of a user's own model: its workload on an emulated ARM CPU, what
computed each of its ops there (the library layer told apart per op), and packages
added to every environment of a framework (`dltrace env add`).

One emulated run (torch's MLP with Adam on Neoverse-N1, through `dltrace audit
--workload --cpu`) is shared by the tests; ResNet-18 on both default CPUs is the
survey's (its figures are in the CHANGELOG)."""

from __future__ import annotations

import csv
import io
import subprocess

import pytest

from tests.conftest import dltrace, one_line_error
from tracer import envs
from tracer.contract import Exit

WORKLOAD = "tests/workloads/torch_mlp.py"


@pytest.fixture(scope="session")
def mlp_on_n1(frameworks, tmp_path_factory):
    """`audit torch --workload torch_mlp.py --cpu neoverse-n1 -o …` once: (stdout, CSV rows, JSON)."""
    out = tmp_path_factory.mktemp("arm-workload")
    proc = dltrace("audit", "torch", "--workload", WORKLOAD, "--cpu", "neoverse-n1", "--traces", str(out / "none"),
                   "-o", str(out / "mlp.csv"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(io.StringIO((out / "mlp.csv").read_text())))
    return proc.stdout, rows


def test_each_op_says_what_computed_it_here_and_on_the_arm_cpu(mlp_on_n1):
    stdout, rows = mlp_on_n1
    here, arm = "on x86_64 (this machine)", "on neoverse-n1 (emulated)"
    assert here in rows[0] and arm in rows[0]
    by_op = {r["op"]: r for r in rows}
    # the linear layers' GEMMs: MKL here (x86 only), NVPL's BLAS in PyPI's aarch64 build
    addmm = by_op["aten::addmm.out"]
    assert addmm[here].startswith("MKL: SGEMM") and "x86-only" in addmm[here], addmm
    assert addmm[arm].startswith("NVPL: SGEMM") and "in place of x86-only MKL: SGEMM" in addmm[arm], addmm
    # an op no library computes: torch's own kernel, vectorised here, its DEFAULT (NEON) build there
    relu = by_op["aten::relu_"]
    assert relu[here].startswith("own kernel (AVX") and relu[arm].startswith("own kernel (DEFAULT)"), relu
    # a set-up op the CPU runs under no name of its own is said so, never left blank
    assert all(r[arm] for r in rows)
    assert "on ARM: what computed each op" in stdout and "neoverse-n1 (emulated): 0 ops ran reference code" in stdout
    assert "ran the framework's DEFAULT build" in stdout  # torch says which ISA its own kernels dispatched to


def test_env_add_refuses_in_one_line(frameworks):
    assert "is the framework" in one_line_error(dltrace("env", "add", "torch", "torch==2.12.0"), Exit.USAGE)
    assert "not a requirement pip can read" in one_line_error(dltrace("env", "add", "torch", "nope(("), Exit.USAGE)
    # torchvision is torch's extra, pinned to its release: another one would replace it
    line = one_line_error(dltrace("env", "add", "torch", "torchvision==0.27.0"))
    assert "torchvision==0.27.0" in line and "environment" in line and "torchvision" in line.split(":", 2)[-1]


def test_env_add_refuses_a_package_without_an_aarch64_wheel_before_changing_anything(frameworks):
    line = one_line_error(dltrace("env", "add", "torch", "PyQt5==5.15.11"))
    assert "PyQt5==5.15.11" in line and "torch's aarch64 environment" in line and "no aarch64 wheel" in line
    proc = subprocess.run([str(envs.python_for(frameworks["torch"])), "-c", "import PyQt5"], capture_output=True)
    assert proc.returncode != 0  # the x86 environment was not given it either


def test_a_numpy_framework_says_per_op_which_openblas_kernels_each_cpu_got(frameworks, tmp_path):
    """Chainer computes with NumPy: its ops call no vendor library, and the table says whose
    kernels ran, per CPU; the coverage CSV joins its list (the GPU code each FunctionNode
    runs: Convolution2DFunction.forward_gpu) to the node the CPU ran."""
    proc = dltrace("audit", "chainer", "--workload", "tests/workloads/chainer_cnn.py", "--cpu", "neoverse-n1",
                   "--traces", str(tmp_path / "none"), "-o", str(tmp_path / "cnn.csv"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO((tmp_path / "cnn.csv").read_text()))}
    conv = rows["Convolution2DFunction.forward_gpu"]
    here, arm = conv["on x86_64 (this machine)"], conv["on neoverse-n1 (emulated)"]
    assert arm.startswith("own kernel (NumPy; OpenBLAS") and "neoversen1" in arm.lower(), conv
    assert here.startswith("own kernel (NumPy; OpenBLAS") and here != arm, conv
    # the optimizer's update rule is array code, no FunctionNode: its row is the rule's update
    rule = rows["MomentumSGDRule.update_core_gpu"]
    assert rule["on neoverse-n1 (emulated)"].startswith("own kernel (NumPy; OpenBLAS"), rule
    assert "neoverse-n1 (emulated): 0 ops ran reference code" in proc.stdout
    assert "DEFAULT build" not in proc.stdout  # NumPy's kernels have no DEFAULT build to fall to
