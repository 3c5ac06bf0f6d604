"""Bad input gets one clear line, never a traceback, and so does a standard output that is
closed or full. Runs the real `dltrace` command."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import DLTRACE, FAKE_REGISTRY, dltrace, one_line_error, write_pair
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


@pytest.mark.parametrize("args", [("survey", "-o", ""), ("report", ".", "-o", ""), ("import", "x.json", "--framework",
                                                                                    "torch", "-o", " "),
                                  ("probe", "torch", "relu", "-o", ""), ("derive", "torch", "-o", "")])
def test_an_empty_output_is_a_usage_error_not_the_working_folder(tmp_path, args):
    before = set(tmp_path.iterdir())
    line = one_line_error(dltrace(*args, cwd=tmp_path, timeout=60), Exit.USAGE)
    assert "is empty" in line and set(tmp_path.iterdir()) == before


def test_a_long_shape_is_refused_by_rank_before_any_file(tmp_path):
    long = "x".join(["2"] * 200)
    line = one_line_error(dltrace("probe", "torch", "relu", "--shape", long, "-o", str(tmp_path / "t.json"),
                                  timeout=60), Exit.USAGE)
    assert "200 dimensions; at most 8" in line
    line = one_line_error(dltrace("probe", "torch", "conv2d", "--shape", "2x3x4", timeout=60), Exit.USAGE)
    assert "conv2d needs a 4-d shape" in line


@pytest.mark.parametrize("args", [
    ["probe", "torch", "conv2d", "--timeout", "0"], ["probe", "torch", "conv2d", "--timeout", "-5"],
    ["probe", "torch", "conv2d", "--timeout", "nan"], ["survey", "--timeout", "inf"],
    ["survey", "--jobs", "0"], ["survey", "--jobs", "-1"], ["probe", "torch", "conv2d", "--max-depth", "0"],
])
def test_impossible_option_values_are_refused(args):
    proc = dltrace(*args)
    assert proc.returncode == 2 and "Invalid value" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["list"], ["diff", "{a}", "{b}"], ["export", "{a}", "--format", "collapsed"],
                                  ["import", "{kineto}", "--framework", "torch", "-o", "{out}"]])
def test_output_that_cannot_be_written_is_one_line(tmp_path, args):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    kineto = Path(__file__).parent.parent / "tracer" / "reference" / "imported" / "alexnet-a100.kineto.json.gz"
    args = [x.format(a=a, b=b, kineto=kineto, out=tmp_path / "o") for x in args]
    closed = subprocess.run([DLTRACE, *args], capture_output=False, stderr=subprocess.PIPE, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 1 and "Traceback" not in closed.stderr, closed.stderr
    assert closed.stderr.strip().splitlines()[-1] == "dltrace: error: cannot write to standard output: it is closed"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([DLTRACE, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write to standard output: No space left on device" in proc.stderr


def test_a_closed_pipe_ends_quietly(tmp_path):
    proc = subprocess.run(f"'{DLTRACE}' list | head -1", shell=True, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.stderr == "" and proc.stdout.count("\n") == 1
    # a reader gone before the first line: the status says so (rich's own handler exits 1, a failure)
    proc = subprocess.run(["bash", "-c", f"'{DLTRACE}' list | true; exit ${{PIPESTATUS[0]}}"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == Exit.BROKEN_PIPE and proc.stderr == "", (proc.returncode, proc.stderr)


def test_a_workload_file_whose_name_holds_an_equals_sign_is_a_file(tmp_path, monkeypatch):
    """``--workload a=b.py``: where ``a`` is no framework and the file exists, it is the file;
    where it does not exist, the line says how to name it."""
    from tracer.cli.surveys import _survey_workloads
    from tracer.errors import UsageError
    from tracer.registry import load

    torch = load()["torch"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b.py").write_text("def workload(device):\n    return lambda: 0\n")
    with pytest.raises(UsageError, match=r"workload name 'a=b': letters, digits"):  # read as the file it is
        _survey_workloads([torch], ("a=b.py",), examples=False)
    line = one_line_error(dltrace("survey", "torch", "--workload", "c=nothere.py", "-o", str(tmp_path / "r"),
                                  cwd=tmp_path), Exit.USAGE)
    assert "c is not one of this survey's frameworks" in line and "write FRAMEWORK=c=nothere.py or ./c=nothere.py" \
        in line, line
