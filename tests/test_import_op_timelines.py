"""MXNet's and TensorFlow's own GPU evidence, imported from the real files in
reference/imported: MXNet's profiler (operators on gpu/0), nvprof's kernels of an
MXNet run on a K80, and TensorFlow 1.x timelines (ops placed on /gpu:0)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tests.test_importer_bounds import _all_load, _import, _nvprof_copy
from tracer.importers import import_file
from tracer.processing.diff import diff_traces
from tracer.knowledge import knowledge
from tracer.trace import load

K = knowledge()

REF = Path(__file__).resolve().parent.parent / "tracer" / "reference" / "imported"
MX_GPU = REF / "mxnet" / "mnist-cnn-gpu.mxnet-profile.json"
MX_CPU = REF / "mxnet" / "mnist-cnn-cpu.mxnet-profile.json"
NVPROF = REF / "mxnet" / "mnist-cnn-k80.nvprof.nvvp"
TF_GPU = REF / "tensorflow-timeline" / "GPU" / "timeline_02_step_2.json"


def _by_primitive(path: Path, framework: str) -> dict:
    return {r.primitive: r for r in import_file(path, framework)}


def _ops(trace, pass_: str) -> list[str]:
    return [n.frame.name for _, n in trace.layer(pass_, "op").walk()][1:]


def test_mxnet_profiler_files_give_each_primitive_on_its_device():
    gpu, cpu = _by_primitive(MX_GPU, "mxnet"), _by_primitive(MX_CPU, "mxnet")
    assert set(gpu) == set(cpu) == {"conv2d", "relu", "maxpool2d", "dense"}
    conv = gpu["conv2d"].trace
    assert conv.meta["device"] == "gpu" and conv.meta["evidence"] == "imported" and conv.meta["api"] == "imported"
    assert conv.meta["framework_version"] == "unknown"  # MXNet of 2019: never the probes' 1.9.1
    assert _ops(conv, "forward") == ["Convolution [gpu/0]"]
    assert _ops(conv, "backward") == ["_backward_Convolution [gpu/0]"]
    assert _ops(cpu["conv2d"].trace, "forward") == ["Convolution"] and cpu["conv2d"].trace.meta["device"] == "cpu"
    prov = conv.meta["provenance"]
    assert prov["repository"] == "sandeep-krishnamurthy/mxnet-profiler-demo" and "Apache" in prov["license"]


def test_nvprof_kernels_are_a_separate_run_on_a_k80():
    got = _by_primitive(NVPROF, "mxnet")
    assert set(got) == {"conv2d", "relu", "maxpool2d"}
    conv = got["conv2d"].trace
    assert conv.meta["machine"]["gpu"] == "Tesla K80" and "different run" in conv.meta["provenance"]["note"]
    forward = _ops(conv, "forward")
    assert any("implicit_convolve_sgemm" in k for k in forward) and not any("wgrad" in k for k in forward)
    assert any("wgrad" in k for k in _ops(conv, "backward"))
    libs = {n.frame.lib for _, n in conv.layer("forward", "op").walk() if n.frame.kind == "op"}
    assert libs == {"cuDNN"}
    assert any("relu_func" in k for k in _ops(got["relu"].trace, "forward"))


def test_tensorflow_timeline_gives_dense_relu_sigmoid_on_the_gpu():
    got = _by_primitive(TF_GPU, "tensorflow")
    assert set(got) == {"dense", "relu", "sigmoid"}
    dense = got["dense"].trace
    assert dense.meta["device"] == "gpu" and dense.meta["framework_version"] == "unknown"
    assert dense.meta["provenance"]["repository"] == "ikhlestov/tensorflow_profiling"
    assert "MatMul [gpu:0]" in _ops(dense, "forward") and "BiasAddGrad [gpu:0]" in _ops(dense, "backward")
    assert any(name.startswith("MatMul [gpu:0] on stream:") for name in _ops(dense, "forward"))
    assert _ops(got["sigmoid"].trace, "backward")[0] == "SigmoidGrad [gpu:0]"


@pytest.fixture(scope="module")
def cpu_probes(frameworks, tmp_path_factory) -> dict[str, Path]:
    """The real CPU probes these files are set against (op layer only)."""
    out = {}
    for fw, prim in (("mxnet", "conv2d"), ("tensorflow", "dense")):
        path = tmp_path_factory.mktemp(fw) / f"{prim}.json"
        proc = dltrace("probe", fw, prim, "--layers", "op", "-o", str(path))
        assert proc.returncode == 0, proc.stderr
        out[fw] = path
    return out


@pytest.mark.parametrize("fw, src, prim, side", [("mxnet", MX_GPU, "conv2d", "Convolution [gpu/0]"),
                                                 ("tensorflow", TF_GPU, "dense", "MatMul [gpu:0]")])
def test_the_cpu_probe_splits_from_the_gpu_at_the_operator(cpu_probes, fw, src, prim, side):
    gpu = _by_primitive(src, fw)[prim].trace
    result = diff_traces(load(cpu_probes[fw]), gpu, "forward", "warm", ("op",), force=True, k=K)
    (layer,) = result.layers
    first = layer.splits[0]
    assert first.classification == "device dispatch"
    assert side in [b.label for b in first.only_b]


def test_a_file_that_is_not_what_it_claims_is_one_line(tmp_path):
    assert ("not a mxnet operator timeline (it is TensorFlow timeline output, read with --framework tensorflow)"
            in one_line_error(dltrace("import", str(TF_GPU), "--framework", "mxnet", "-o", str(tmp_path / "a"))))
    assert ("not a tensorflow operator timeline (it is MXNet profiler output, read with --framework mxnet)"
            in one_line_error(dltrace("import", str(MX_GPU), "--framework", "tensorflow", "-o", str(tmp_path / "b"))))
    other = tmp_path / "other.nvvp"
    db = sqlite3.connect(other)
    db.execute("create table t (x)")
    db.commit()
    db.close()
    assert "an SQLite database, but not nvprof's" in one_line_error(
        dltrace("import", str(other), "--framework", "mxnet", "-o", str(tmp_path / "c")))
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(MX_GPU.read_bytes()[:5000])
    assert "corrupt or truncated JSON" in one_line_error(
        dltrace("import", str(truncated), "--framework", "mxnet", "-o", str(tmp_path / "d")))


TF_STATS = REF / "tensorflow-stats" / "resnet50-gpu-input-bound.tensorflow_stats.pb"


@pytest.mark.frameworks
def test_tensorflow_stats_are_read_with_published_protobuf_classes():
    got = _by_primitive(TF_STATS, "tensorflow")
    assert {"conv2d", "batchnorm", "relu", "maxpool2d"} <= set(got)
    conv = got["conv2d"].trace
    assert _ops(conv, "forward") == ["Conv2D [device]"]  # the file names no device type: "Device", as it says
    assert _ops(conv, "backward") == ["Conv2DBackpropInput [device]", "Conv2DBackpropFilter [device]"]
    assert conv.layer("forward", "op").children[0].count == 15642  # occurrences over its 424 Conv2D records
    assert ("aggregates" in conv.meta["provenance"]["note"]
            and conv.meta["provenance"]["repository"] == "tensorflow/profiler")


@pytest.mark.frameworks
def test_a_json_file_is_not_a_tensorflow_stats_file(tmp_path):
    fake = tmp_path / "x.tensorflow_stats.pb"
    fake.write_bytes(b"\x08\x96\x01garbage-that-is-not-a-stats-db" * 10)
    assert "not a tensorflow_stats protobuf" in one_line_error(
        dltrace("import", str(fake), "--framework", "tensorflow", "-o", str(tmp_path / "o")))


def test_nvprof_file_with_a_hash_sign_is_the_one_read_and_nothing_is_created(tmp_path):
    src = _nvprof_copy(tmp_path, "k80#.nvvp")
    proc = _import(src, "mxnet", tmp_path / "o")  # nothing named k80 beside it
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "k80").exists()
    # a decoy database called k80 beside it: still the named file is read, and hashed
    decoy = sqlite3.connect(tmp_path / "k80")
    decoy.execute("create table t (x)")
    decoy.commit()
    decoy.close()
    proc = _import(src, "mxnet", tmp_path / "o2")
    assert proc.returncode == 0, proc.stderr
    traces = _all_load(tmp_path / "o2")
    assert {t.meta["machine"]["gpu"] for t in traces} == {"Tesla K80"}
    assert {t.meta["provenance"]["sha256"] for t in traces} == {hashlib.sha256(src.read_bytes()).hexdigest()}


def test_nvprof_percent_encoded_name_is_not_decoded(tmp_path):
    (tmp_path / "a").mkdir()
    other = sqlite3.connect(tmp_path / "a" / "b.nvvp")  # what a%2fb.nvvp decodes to: not nvprof's
    other.execute("create table t (x)")
    other.commit()
    other.close()
    src = _nvprof_copy(tmp_path, "a%2fb.nvvp")
    proc = _import(src, "mxnet", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert {t.meta["machine"]["gpu"] for t in _all_load(tmp_path / "o")} == {"Tesla K80"}
