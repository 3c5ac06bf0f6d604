"""Bad input gets one clear line, never a traceback. Runs the real `dltrace` command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DLTRACE = str(Path(sys.executable).parent / "dltrace")
CRASHY = """
frameworks:
  crashy:
    import: json
    version: "0"
    probe: tests.crashprobe
    install: [{requirements: [nothing]}]
    devices: {cpu: cpu, gpu: gpu}
    source_roots: [json]
    apis: [functional]
"""


def dltrace(*args, env=None, timeout=120):
    proc = subprocess.run([DLTRACE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(rc, out, err):
    assert rc == 1, (rc, out, err)
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("dltrace: error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["probe", "caffe", "conv2d"], "unknown framework 'caffe' (choose from: torch, tensorflow, chainer, mxnet, jax)"),
        (["probe", "torch", "conv3d"], "unknown primitive 'conv3d' (choose from: dense, conv2d, relu, sigmoid, tanh, softmax, maxpool2d, avgpool2d, batchnorm)"),
        (["probe", "torch", "conv2d", "--device", "tpu"], "unknown device for torch 'tpu' (choose from: cpu, gpu)"),
        (["probe", "jax", "conv2d", "--variant", "onednn-off"], "unknown variant for jax 'onednn-off' (choose from: default, nojit)"),
        (["probe", "jax", "conv2d", "--api", "layer"], "unknown API level for jax 'layer' (choose from: functional)"),
        (["probe", "torch", "conv2d", "--shape", "8xbig"], "shape '8xbig' is not of the form"),
        (["diff-nothing"], None),
    ],
)
def test_unknown_choices(args, expected):
    rc, out, err = dltrace(*args)
    if expected is None:  # click's own usage error for an unknown command
        assert rc == 2 and "No such command" in err and "Traceback" not in err
        return
    assert expected in one_line_error(rc, out, err)


def test_env_not_set_up(tmp_path):
    rc, out, err = dltrace("probe", "torch", "conv2d", env={"DLTRACE_HOME": str(tmp_path)})
    assert "torch: environment not set up; run: dltrace env setup torch" in one_line_error(rc, out, err)


@pytest.fixture(scope="module")
def crashy(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    reg = home / "frameworks.yaml"
    reg.write_text(CRASHY)
    env = {"DLTRACE_HOME": str(home), "DLTRACE_REGISTRY": str(reg)}
    rc, out, err = dltrace("env", "use", "crashy", sys.executable, env=env)
    assert rc == 0, err
    return env


def test_probe_segfault(crashy):
    line = one_line_error(*dltrace("probe", "crashy", "conv2d", env=crashy))
    assert "crashy probe (cpu, default) crashed with signal SIGSEGV (exit -11)" in line


def test_probe_hang(crashy):
    line = one_line_error(*dltrace("probe", "crashy", "relu", "--timeout", "3", env=crashy))
    assert "crashy probe timed out after 3 s" in line


def test_probe_case_exception(crashy):
    line = one_line_error(*dltrace("probe", "crashy", "tanh", env=crashy))
    assert "crashy tanh (functional, cpu, default): RuntimeError: tanh is broken in this framework" in line


def test_no_gpu(crashy):
    line = one_line_error(*dltrace("probe", "crashy", "dense", "--device", "gpu", env=crashy))
    assert "no GPU visible to crashy on this machine" in line


def test_a_working_case_of_the_same_probe(crashy, tmp_path):
    rc, out, err = dltrace("probe", "crashy", "dense", "-o", str(tmp_path / "t.json"), env=crashy)
    assert rc == 0, err
    assert json.loads((tmp_path / "t.json").read_text())["format"] == "dltrace-trace"


def test_corrupt_registry(tmp_path):
    reg = tmp_path / "frameworks.yaml"
    reg.write_text(CRASHY.replace("    import: json\n", ""))
    line = one_line_error(*dltrace("list", env={"DLTRACE_REGISTRY": str(reg)}))
    assert "entry 'crashy': missing field 'import'" in line
