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


def test_a_standin_record_and_a_model_record_of_the_wrong_shape_read_as_none():
    """Fields a file someone else wrote may hold anything: a pass's list of ops an
    integer, a model's defaults a string or its built_from_primitives a list read as
    nothing, never a TypeError or ValueError in a later stage."""
    from tracer.trace_meta import parse_meta

    meta = {"framework": "torch", "primitive": "lenet", "api": "layer", "device": "standin",
            "standin": {"reached": {"forward": 7, "backward": ["aten::mm.out", 3, ["x"]]}, "registered_by_name": 5},
            "model": {"defaults": "a string", "built_from_primitives": ["a", "list"], "layers": [1, "conv"],
                      "workload": "x", "title": 3}}
    info = parse_meta(meta)
    assert info.standin is not None and dict(info.standin.reached) == {"backward": ["aten::mm.out"]}
    assert info.standin.registered_by_name == ()
    assert (info.model["defaults"], info.model["built_from_primitives"], info.model["workload"]) == ({}, {}, {})
    assert info.model["layers"] == ["conv"] and info.model["title"] == "3"


def test_deep_op_chains_and_stacks_cost_no_recursion_and_bounded_text(tmp_path):
    """A stand-in trace whose op layer is a 5,000-deep chain, and a python layer 30,000
    deep exported as collapsed stacks: no RecursionError, and each stack line bounded."""
    import io

    from tracer.analysis.standin_needs import standin_needs
    from tracer.render import collapsed
    from tracer.render.export import select_trees
    from tracer.trace import Frame, Node, Run, Trace

    def chain(kind: str, depth: int, lib: str = "") -> Node:
        root = node = Node(Frame("root", "", "x.forward"), 1, 1)
        for i in range(depth):
            child = Node(Frame(kind, "aten", f"aten::op{i}", lib=lib), 1, depth - i)
            node.children.append(child)
            node = child
        return root

    meta = {"framework": "torch", "primitive": "relu", "api": "functional", "device": "standin",
            "passes": ["forward"], "standin": {"reached": {"forward": ["aten::op4999"]}}}
    t = Trace(meta, [Run("forward", "warm", {"op": chain("op", 5000, "standin backend")}, {})])
    needs = standin_needs([t], [], None)
    assert needs is not None and needs.must_implement == ["aten::op4999"]
    deep = Trace({**meta, "device": "cpu"}, [Run("forward", "warm", {"python": chain("python", 30000)}, {})])
    out = io.StringIO()
    collapsed.write(deep, select_trees(deep, ("python",), ("forward",)), out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 30000 and max(line.count(";") for line in lines) < collapsed.MAX_STACK
    assert "… 29746 frames …" in lines[-1]
