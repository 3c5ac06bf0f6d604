"""Bad input gets one clear line, never a traceback. Runs the real `dltrace` command."""

import json

import pytest

from tests.conftest import FAKE_REGISTRY, dltrace, one_line_error


@pytest.mark.parametrize(
    "args, expected",
    [
        (["probe", "caffe", "conv2d"],
         "unknown framework 'caffe' (choose from: torch, tensorflow, chainer, mxnet, jax)"),
        (["probe", "torch", "conv3d"],
         "unknown primitive 'conv3d' (choose from: dense, conv2d, relu, sigmoid, tanh, softmax, maxpool2d, avgpool2d, "
         "batchnorm)"),
        (["probe", "torch", "conv2d", "--device", "tpu"],
         "unknown device for torch 'tpu' (choose from: cpu, gpu, standin)"),
        (["probe", "jax", "conv2d", "--variant", "onednn-off"],
         "unknown variant for jax 'onednn-off' (choose from: default, nojit)"),
        (["probe", "jax", "conv2d", "--api", "layer"], "unknown API level for jax 'layer' (choose from: functional)"),
        (["probe", "torch", "conv2d", "--shape", "8xbig"], "shape '8xbig' is not of the form"),
        (["diff-nothing"], None),
    ],
)
def test_unknown_choices(args, expected):
    proc = dltrace(*args)
    if expected is None:  # click's own usage error for an unknown command
        assert proc.returncode == 2 and "No such command" in proc.stderr and "Traceback" not in proc.stderr
        return
    assert expected in one_line_error(proc)


def test_env_not_set_up(tmp_path):
    proc = dltrace("probe", "torch", "conv2d", env={"DLTRACE_HOME": str(tmp_path)})
    assert "torch: environment not set up; run: dltrace env setup torch" in one_line_error(proc)


def test_probe_segfault(fake_frameworks):
    line = one_line_error(dltrace("probe", "crashy", "conv2d", env=fake_frameworks))
    assert "crashy probe (cpu, default) crashed with signal SIGSEGV (exit -11)" in line


def test_probe_hang(fake_frameworks):
    line = one_line_error(dltrace("probe", "crashy", "relu", "--timeout", "3", env=fake_frameworks))
    assert "crashy probe timed out after 3 s" in line


def test_probe_case_exception(fake_frameworks):
    line = one_line_error(dltrace("probe", "crashy", "tanh", env=fake_frameworks))
    assert "crashy tanh (functional, cpu, default): RuntimeError: tanh is broken in this framework" in line


def test_no_gpu(fake_frameworks):
    line = one_line_error(dltrace("probe", "crashy", "dense", "--device", "gpu", env=fake_frameworks))
    assert "no GPU visible to crashy on this machine" in line


def test_a_working_case_of_the_same_probe(fake_frameworks, tmp_path):
    proc = dltrace("probe", "crashy", "dense", "-o", str(tmp_path / "t.json"), env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "t.json").read_text())["format"] == "dltrace-trace"


def test_corrupt_registry(tmp_path):
    reg = tmp_path / "frameworks.yaml"
    reg.write_text(FAKE_REGISTRY.replace("    import: json\n", "", 1))
    line = one_line_error(dltrace("list", env={"DLTRACE_REGISTRY": str(reg)}))
    assert "entry 'crashy': missing field 'import'" in line
