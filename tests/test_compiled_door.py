"""The compiled door (issue 57): a real torch step recorded under torch.compile with the
recording backend (tracer/probes/torch_compiled.py), its list beside an eager one, the
command line's refusals, and the compile-backend skeleton's check, on one tiny workload
recorded once per session (tests/workloads/torch_tiny_compiled.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer.analysis.compiled_needs import beside, compiled_needs
from tracer.analysis.models import compiled_door
from tracer.analysis.standin_needs import StandinNeeds
from tracer.contract import PASSES, USER_API, UserWorkload
from tracer.render import compiled_export
from tracer.runner import CaseSpec, probe_one
from tracer.trace import Trace, load, save

TINY = Path(__file__).parent / "workloads" / "torch_tiny_compiled.py"


@pytest.fixture(scope="session")
def tiny_compiled(frameworks, tmp_path_factory) -> Path:
    """The tiny workload's trace through the compiled door (one probe, python layer)."""
    user = UserWorkload.parse(str(TINY), None)
    trace = probe_one(frameworks["torch"], CaseSpec(user.name, USER_API, (), PASSES, layers=("python",), user=user),
                      "cpu", door="compiled")
    path = tmp_path_factory.mktemp("compiled") / "tiny.json"
    save(trace, path)
    return path


def test_the_record_names_ops_variations_and_breaks(tiny_compiled):
    trace: Trace = load(tiny_compiled)
    assert trace.meta["door"] == "compiled" and trace.info.device == "cpu"
    needs = compiled_needs([trace])
    assert needs is not None and needs.problem() is None
    assert "core_aten_decompositions" in needs.table
    assert {g["kind"] for g in needs.graphs} >= {"forward", "backward"}
    # functional Core ATen ops, with the input variations a lowering must take
    assert "aten::addmm" in needs.ops and "aten::mm" in needs.ops
    addmm = [v for v in needs.variations if v.op == "aten::addmm"]
    assert addmm[0].dtypes == ["float32"] * 3 and addmm[0].shapes == [[2], [3, 4], [4, 2]] and addmm[0].count == 1
    # loss.backward() cannot be traced by Dynamo: a break, with what ran eagerly
    assert needs.break_count >= 1
    assert any("backward" in f"{b['reason']} {b['eager']}" for b in needs.breaks)
    rows = compiled_export.to_csv(needs).splitlines()
    assert rows[0] == '"op","graphs","inputs","dtypes","shapes","count"' and len(rows) == len(needs.variations) + 1
    # the report's model row (survey.json's "compiled"): one row per op and variation
    doc = compiled_export.to_json(compiled_door([trace]))
    assert {"op": "aten::addmm", "graphs": ["forward"], "inputs": addmm[0].inputs, "dtypes": addmm[0].dtypes,
            "shapes": addmm[0].shapes, "count": 1} in doc["variations"]


def test_beside_the_eager_list_each_difference_has_its_reason(tiny_compiled):
    needs = compiled_needs([load(tiny_compiled)])
    eager = StandinNeeds("standin", "run on the stand-in device", "torch", by_pass={
        "setup": ["aten::empty_strided", "aten::_copy_from"],
        "forward": ["aten::addmm.out", "aten::mean.out"],
        "backward": ["aten::mm.out", "aten::fill_.Scalar"]})
    beside(needs, eager)
    why = {(d.op, d.door): d.why for d in needs.differences}
    assert why[("aten::addmm.out", "eager only")].startswith("out= form: the graph holds the functional aten::addmm")
    assert why[("aten::_copy_from", "eager only")].startswith("setup")
    assert why[("aten::fill_.Scalar", "eager only")].startswith("in-place")
    assert why[("aten::mean.out", "eager only")] == "out= form: the graph holds the functional aten::mean"
    assert why[("aten::permute", "compiled only")] == "from Core ATen's decomposition of aten::t"
    assert why[("aten::addmm", "compiled only")].startswith("functional form")
    assert all(d.why for d in needs.differences)
    assert {d.op for d in needs.differences if d.door == "compiled only"} == set(needs.ops) - set(needs.eager or [])


def test_the_door_is_refused_where_it_is_not(frameworks):
    line = one_line_error(dltrace("probe", "jax", "lenet", "--door", "compiled"), code=2)
    assert "already is the compiled one" in line
    line = one_line_error(dltrace("probe", "torch", "relu", "--door", "compiled", "--device", "standin"), code=2)
    assert "cpu device" in line


def test_no_graph_is_one_line(frameworks, tmp_path):
    proc = dltrace("probe", "torch", "--workload", f"{TINY}:never_compiled", "--door", "compiled", "--layers",
                   "python", "--max-nodes", "1", timeout=300)
    line = one_line_error(proc)
    assert "made no graph" in line and "ran eagerly" in line


def test_the_skeleton_lowers_each_op_and_refuses_one_deleted(frameworks, tiny_compiled, tmp_path):
    """Written from the session's recording (no second run): its check passes, and with
    one lowering deleted by hand it fails naming the op."""
    from tracer import scaffold as sc

    user = UserWorkload.parse(str(TINY), None)
    spec = CaseSpec(user.name, USER_API, (), PASSES, layers=("python",), user=user)
    folder = sc.prepare(tmp_path / "sk", False)
    ks = sc.COMPILED_WRITERS["torch"].write(folder, "mycompiler", [spec], [load(tiny_compiled)], "test")
    assert "aten::addmm" in {k.op for k in ks}
    assert json.loads((folder / "scaffold.json").read_text())["ops"]
    ok = sc.check(frameworks["torch"], folder, 300)
    assert ok.ok, ok.reason
    assert any("each needed" in line for line in ok.lines)
    lowerings = folder / "mycompiler" / "lowerings.py"
    lowerings.write_text(lowerings.read_text().replace('    "aten::addmm": addmm,\n', ""))
    bad = sc.check(frameworks["torch"], folder, 300)
    assert not bad.ok and "aten::addmm is not lowered (on the list, but has no lowering)" in bad.reason, bad.reason


def test_the_report_writes_the_compiled_list_as_tables(tiny_compiled, tmp_path):
    """`dltrace report` of the compiled trace: the models page links its input variations,
    written beside the workload tables (one row per op and variation)."""
    proc = dltrace("report", str(tiny_compiled.parent), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (csv_file,) = (tmp_path / "r" / "workloads").glob("*.compiled.csv")
    needs = compiled_needs([load(tiny_compiled)])
    assert len(csv_file.read_text().splitlines()) == len(needs.variations) + 1
    assert f'href="workloads/{csv_file.name}"' in (tmp_path / "r" / "models.html").read_text()
    doc = json.loads(csv_file.with_suffix(".json").read_text())
    assert doc["door"] == "compiled" and doc["variations"] == compiled_export.rows(needs)
