"""Bad input gets one clear line, never a traceback. Runs the real `dltrace` command."""

import json

import pytest

from tests.conftest import FAKE_REGISTRY, dltrace, one_line_error
from tracer.contract import Exit


@pytest.mark.parametrize(
    "args, expected",
    [
        (["probe", "caffe", "conv2d"],
         "unknown framework 'caffe' (choose from: torch, tensorflow, chainer, mxnet, jax)"),
        (["probe", "torch", "conv3d"],
         "unknown primitive or model 'conv3d' (choose from: dense, conv2d, relu, sigmoid, tanh, softmax, maxpool2d, "
         "avgpool2d, batchnorm, layernorm, gelu, attention, embedding, crossentropy, adam, lenet, cifar, transformer)"),
        (["probe", "torch", "cifar", "--api", "functional"],
         "cifar is written at the layer level only, not functional"),
        (["probe", "torch", "conv2d", "--device", "tpu"],
         "Invalid value for '--device': unknown device 'tpu' (choose from: cpu, gpu, standin)"),
        (["probe", "mxnet", "conv2d", "--device", "standin"],
         "unknown device for mxnet 'standin' (choose from: cpu, gpu)"),
        (["probe", "torch", "conv2d", "--layers", "python,gpu"], "unknown layer 'gpu' (choose from: python, op,"),
        (["survey", "--primitives", "conv2d,conv3d"], "unknown primitive 'conv3d'"),
        (["survey", "torch", "--devices", "cpu,tpu"], "unknown device 'tpu'"),
        (["probe", "torch", "relu", "--cpu", "m1"], "unknown emulated CPU 'm1' (choose from: a64fx, neoverse-n1"),
        (["probe", "torch", "conv2d", "--bogus"], "No such option '--bogus'."),
        (["diff"], "Missing argument 'A.json'. (see: dltrace diff --help)"),
        (["diff-nothing"], "No such command 'diff-nothing'."),
        (["probe", "jax", "conv2d", "--variant", "onednn-off"],
         "unknown variant for jax 'onednn-off' (choose from: default, nojit, bf16)"),
        (["probe", "jax", "conv2d", "--api", "layer"], "unknown API level for jax 'layer' (choose from: functional)"),
        (["probe", "torch", "conv2d", "--shape", "8xbig"], "shape '8xbig' is not of the form"),
    ],
)
def test_unknown_choices(args, expected):
    # click's checks (types built from the contract and the registry) and the registry's
    # own (a device this framework lacks): one line each, the same style, one exit status
    assert expected in one_line_error(dltrace(*args), Exit.USAGE)


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
