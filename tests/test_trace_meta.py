"""The typed views of a trace's meta and a run's stats (tracer.trace_meta), and the
records a probe process hands back beside its traces (tracer.contract)."""

from __future__ import annotations

import json

import pytest

from tracer.contract import CaseError, EmulatedCpu
from tracer.trace import Frame, Node, Run, Trace, from_json, load, save, to_json
from tracer.trace_meta import native_not_finished, parse_meta, parse_stats

META = {"framework": "fw", "primitive": "relu", "api": "functional", "device": "cpu"}


def test_defaults_where_the_trace_says_nothing():
    m = parse_meta(dict(META))
    assert (m.variant, m.framework_version, m.shape) == ("default", None, ())
    assert m.machine.arch is None and m.machine.cpu is None and m.machine.gpu == ""
    assert m.emulated is m.provenance is m.native is m.dispatch is m.backend is m.standin is m.collector is None
    assert not m.imported and m.worker == "" and m.openblas_core == "" and m.onednn_enabled is None


def test_every_field_a_stage_reads():
    emulated = EmulatedCpu("a64fx", "Fujitsu A64FX", "0x461f0010", "max,sve512=on", "QEMU 8 user mode")
    m = parse_meta({
        **META, "api": "imported", "variant": "onednn-on", "framework_version": "1.2", "shape": [2, 3],
        "machine": {"arch": "aarch64", "cpu": "A64FX (emulated)", "gpu": "A100"},
        "emulated": json.loads(emulated.to_json()),
        "provenance": {"origin": "org/repo@abc", "read": "registry", "gpu": "H100", "license": "MIT"},
        "native": native_not_finished("killed"), "dispatch": {"ops": {"aten::relu": {}}, "new_backend_key": "PU1"},
        "library": {"OpenBLAS": {"core": "neoversen1"}}, "evidence": "registered",
        "backend": {"key": "k", "passes": {"forward": {}}}, "standin": {"reached": {"forward": ["aten::relu"]}},
        "recorded_by": {"worker": "arm-1"}, "collector": {"python": "c"}, "cpu_capability": "SVE", "blas": "nvpl",
        "onednn_enabled": True,
    })
    assert m.imported and m.variant == "onednn-on" and m.shape == (2, 3) and m.framework_version == "1.2"
    assert m.machine.arch == "aarch64" and m.machine.gpu == "A100"
    assert m.emulated is not None and m.emulated.cpu == "a64fx" and m.emulated.model == "Fujitsu A64FX"
    assert m.provenance is not None and (m.provenance.origin, m.provenance.read, m.provenance.gpu) == \
        ("org/repo@abc", "registry", "H100")
    assert m.native is not None and m.native.incomplete and m.native.error == "native capture did not finish: killed"
    assert m.dispatch is not None and m.dispatch.ops is not None and "aten::relu" in m.dispatch.ops
    assert m.dispatch.new_backend_key == "PU1" and m.openblas_core == "neoversen1" and m.evidence == "registered"
    assert m.backend is not None and m.backend.key == "k" and "forward" in m.backend.passes
    assert m.standin is not None and m.standin.reached == {"forward": ["aten::relu"]} and m.standin.evidence is None
    assert m.worker == "arm-1" and m.collector is not None and m.collector.python == "c"
    assert m.cpu_capability == "SVE" and m.blas == "nvpl" and m.onednn_enabled is True


@pytest.mark.parametrize("meta, message", [
    ({**META, "api": ""}, "meta.api must be a non-empty string"),
    ({**META, "machine": {"arch": 64}}, "meta.machine.arch must be a string, not int"),
    ({**META, "collector": {"python": "fortran"}}, "meta.collector.python must be one of"),
    ({**META, "recorded_by": {"worker": 3}}, "meta.recorded_by.worker must be a string"),
    ({**META, "provenance": "a sentence"}, "meta.provenance must be dict, not str"),
    ({**META, "shape": [2, -1]}, "meta.shape must be a list of sizes"),
])
def test_a_field_of_the_wrong_type_is_the_files_error(meta, message):
    with pytest.raises(ValueError, match=message):
        parse_meta(meta)


def test_unchecked_fields_of_another_type_read_as_their_default():
    m = parse_meta({**META, "library": {"OpenBLAS": "fast"}, "cpu_capability": 3, "onednn_enabled": "yes",
                    "dispatch": {"ops": ["aten::relu"]}, "standin": {"reached": ["x"]}})
    assert m.openblas_core == "" and m.cpu_capability == "" and m.onednn_enabled is None
    assert m.dispatch is not None and m.dispatch.ops is None and m.standin is None


def test_loading_parses_once_and_set_meta_reads_again(tmp_path):
    trace = Trace(dict(META), [Run("forward", "warm", {"python": Node(Frame("root", "", "relu.forward"), 1)},
                                   {"untraced_s": 0.5, "layers": {"native": {"sampled": True, "jit_code": [
                                       ["jit_kernel", 256, 4096], ["bad row"]]}}, "op_error": "boom"})])
    save(trace, tmp_path / "t.json")
    loaded = load(tmp_path / "t.json")
    assert loaded.info.variant == "default" and loaded.info.native is None
    loaded.set_meta("native", native_not_finished("killed"))
    assert loaded.info.native is not None and loaded.info.native.incomplete
    stats = loaded.runs[0].info
    assert stats.untraced_s == 0.5 and stats.traced_s is None and stats.not_captured == {"op": "boom"}
    assert stats.is_sampled("native") and not stats.is_sampled("op")
    assert stats.layers["native"].jit_code == (("jit_kernel", 256, 4096),)
    assert from_json(to_json(loaded)).info.native == loaded.info.native


def test_stats_of_the_wrong_type_are_the_files_error():
    with pytest.raises(ValueError, match="stats.traced_s must be a number"):
        parse_stats({"traced_s": "fast"})
    with pytest.raises(ValueError, match="stats.layers must map layer names to objects"):
        parse_stats({"layers": {"op": 1}})


@pytest.mark.parametrize("text", ["", "{", "[1]", '{"traceback": "x"}', '"error"', "[" * 100000])
def test_an_unreadable_case_error_record_says_so(text):
    assert CaseError.from_json(text).error == "the probe failed and its error record is unreadable"


def test_case_error_and_emulated_cpu_round_trip():
    record = CaseError("ValueError: no", "Traceback ...")
    assert CaseError.from_json(record.to_json()) == record
    cpu = EmulatedCpu("neoverse-n1", "Arm Neoverse-N1", "0x413fd0c1", "neoverse-n1", "QEMU")
    assert EmulatedCpu.from_json(cpu.to_json()) == cpu and json.loads(cpu.to_json())["emulated"] is True
