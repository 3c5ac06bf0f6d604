"""What `dltrace import` takes from a profiler file someone else recorded is checked
before it becomes a trace: times that overflow, are not finite or end before they
begin, counts that are not counts, more records than an import reads. A bad file is
one line naming its event or row and costs no other file of the import, because a
trace that no later command can read is worse than none."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import _limited, dltrace, one_line_error
from tests.test_trace_format import BAD_DEFLATE
from tracer.importers import ImportFailed, import_file
from tracer.trace import Frame, Node, Run, Trace, load


REF = Path(__file__).resolve().parent.parent / "tracer" / "reference" / "imported"


MX_GPU = REF / "mxnet" / "mnist-cnn-gpu.mxnet-profile.json"


NVPROF = REF / "mxnet" / "mnist-cnn-k80.nvprof.nvvp"


TF_GPU = REF / "tensorflow-timeline" / "GPU" / "timeline_02_step_2.json"


KERNELS = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"


def _import(path: Path, framework: str, out: Path):
    return dltrace("import", str(path), "--framework", framework, "-o", str(out), timeout=300)


def _all_load(folder: Path) -> list[Trace]:
    """Every trace an import wrote, read back as every later command reads it."""
    files = sorted(folder.glob("*.json"))
    assert files
    return [load(f) for f in files]


def test_kineto_times_that_overflow_are_left_out_and_the_first_is_named(tmp_path):
    conv = {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "args": {}}
    events = [{**conv, "ts": 10, "dur": 5},
              {**conv, "ts": 1e308, "dur": 1e308},  # ts + dur overflows to infinity
              {**conv, "ts": 100, "dur": 1e306},  # its nanoseconds overflow
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 11, "dur": 1e307,
               "args": {"correlation": 1}}]
    src = tmp_path / "overflow.json"
    src.write_text(json.dumps({"traceEvents": events}))
    proc = _import(src, "torch", tmp_path / "o")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (trace,) = _all_load(tmp_path / "o")
    prov = trace.meta["provenance"]
    assert prov["events_skipped_malformed"] == 3 and prov["first_malformed_event"] == 1
    assert trace.layer("forward", "op").children[0].time_ns == 5000


def _mxnet_with(tmp_path: Path, change) -> Path:
    doc = json.loads(MX_GPU.read_text())
    ops = [i for i, e in enumerate(doc["traceEvents"]) if isinstance(e, dict) and e.get("cat") == "operator"
           and e.get("name") == "Convolution"]
    change(doc["traceEvents"], ops)
    out = tmp_path / "bad.mxnet-profile.json"
    out.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes (and MXNet's reader reads) them
    return out


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308])
def test_mxnet_times_that_are_not_finite_are_one_line_naming_the_event(tmp_path, value):
    def change(events, ops):
        events[ops[1]]["ts"] = value
    line = one_line_error(_import(_mxnet_with(tmp_path, change), "mxnet", tmp_path / "o"))
    assert "event " in line and "(Convolution)" in line and "ts is" in line
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").glob("*.json"))


def test_mxnet_op_that_ends_before_it_begins_is_one_line_not_an_unreadable_trace(tmp_path):
    def change(events, ops):
        begin, end = ops[0], ops[1]
        assert events[begin]["ph"] == "B" and events[end]["ph"] == "E"
        events[end]["ts"] = events[begin]["ts"] - 5
    line = one_line_error(_import(_mxnet_with(tmp_path, change), "mxnet", tmp_path / "o"))
    assert "ends at" in line and "before it begins" in line and "not imported" in line


@pytest.mark.parametrize("value, why", [(-5, "negative duration"), (float("nan"), "not a finite time"),
                                        (float("-inf"), "not a finite time")])
def test_tensorflow_timeline_bad_durations_are_one_line(tmp_path, value, why):
    doc = json.loads(TF_GPU.read_text())
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "Op" and e.get("ph") == "X"
             and e.get("args", {}).get("op") == "MatMul")
    doc["traceEvents"][i]["dur"] = value
    src = tmp_path / "timeline.json"
    src.write_text(json.dumps(doc))
    line = one_line_error(_import(src, "tensorflow", tmp_path / "o"))
    assert f"event {i} (MatMul): dur" in line and why in line


def _nvprof_copy(tmp_path: Path, name: str, sql: str = "") -> Path:
    dst = tmp_path / name
    shutil.copyfile(NVPROF, dst)
    if sql:
        db = sqlite3.connect(dst)
        db.execute(sql)
        db.commit()
        db.close()
    return dst


@pytest.mark.parametrize("sql, why", [
    (f"update {KERNELS} set end = 1e308 where rowid = (select min(rowid) from {KERNELS})", "not times"),
    (f"update {KERNELS} set end = start - 1000 where rowid = (select min(rowid) from {KERNELS})", "before it starts"),
    (f"update {KERNELS} set start = 'soon' where rowid = (select min(rowid) from {KERNELS})", "not times"),
])
def test_nvprof_kernel_times_are_checked_and_the_row_named(tmp_path, sql, why):
    src = _nvprof_copy(tmp_path, "bad.nvvp", sql)
    line = one_line_error(_import(src, "mxnet", tmp_path / "o"))
    assert f"{KERNELS} row " in line and why in line


def test_nvprof_kernel_records_have_the_json_object_bound(tmp_path, monkeypatch):
    from tracer.importers import nvprof

    rows = sqlite3.connect(NVPROF).execute(f"select count(*) from {KERNELS}").fetchone()[0]
    monkeypatch.setattr(nvprof, "MAX_OBJECTS", rows - 1)
    with pytest.raises(ImportFailed, match=f"holds {rows:,} kernel records, more than the {rows - 1:,}"):
        import_file(NVPROF, "mxnet")
    monkeypatch.setattr(nvprof, "MAX_OBJECTS", rows)
    assert import_file(NVPROF, "mxnet")


@pytest.mark.parametrize("record, why", [
    ({"occurrences": -5}, "occurrences -5, not a count"),
    ({"total_self_time_in_us": float("nan")}, "total_self_time_in_us is nan"),
    ({"total_self_time_in_us": -1.0}, "negative"),
    ({"occurrences": 1.5}, "not a count"),
])
def test_op_stats_records_are_checked_and_named(monkeypatch, tmp_path, record, why):
    from tracer.importers import op_stats

    good = {"host_or_device": "Device", "op_type": "Conv2D", "occurrences": 3, "total_self_time_in_us": 2.0}
    monkeypatch.setattr(op_stats, "_dump", lambda path, fw, vocab: {"device_type": "GPU",
                                                                     "records": [good, {**good, **record}]})
    src = tmp_path / "x.tensorflow_stats.pb"
    src.write_bytes(b"\x08\x96\x01 a protobuf")
    with pytest.raises(ImportFailed, match=r"record 1 \(Conv2D\): .*" + why.split(",")[0].replace(".", r"\.")):
        import_file(src, "tensorflow")
    monkeypatch.setattr(op_stats, "_dump", lambda path, fw, vocab: {"device_type": "GPU", "records": [good]})
    (got,) = [r for r in import_file(src, "tensorflow") if r.primitive == "conv2d"]
    assert got.trace.layer("forward", "op").children[0].count == 3


def test_a_trace_no_command_reads_is_never_returned():
    from tracer.importers.checks import unreadable_tree

    ok = Node(Frame("root", "", "conv2d.forward"), 1, 5, children=[Node(Frame("op", "m", "Conv"), 2, 5)])
    trace = Trace({"framework": "mxnet"}, [Run("forward", "warm", {"op": ok})])
    assert unreadable_tree(trace) == ""
    ok.children[0].count = -5
    assert "'Conv' has count -5" in unreadable_tree(trace)
    ok.children[0].count, ok.children[0].time_ns = 1, math.nan
    assert "has time nan" in unreadable_tree(trace)


def _tiny_event_profile(path: Path, events: int) -> Path:
    """A Kineto document of ``events`` tiny valid events, gzip members written once
    and repeated: ~890 MB of JSON in a few MB."""
    event = b'{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 1, "dur": 1},'
    per = 1 << 16
    block = gzip.compress(event * per, compresslevel=9)
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + block * (events // per)
                     + gzip.compress(event[:-1] + b"]}"))
    return path


@pytest.mark.slow
def test_importing_millions_of_tiny_events_is_bounded(tmp_path):
    src = _tiny_event_profile(tmp_path / "tiny.kineto.json.gz", 10_000_000)
    assert src.stat().st_size < 16 << 20
    line = one_line_error(_limited("import", str(src), "--framework", "torch", "-o", str(tmp_path / "o")))
    assert "JSON objects, more than the 1,000,000 an import reads" in line


def test_each_imported_file_stands_alone(tmp_path):
    ref = Path(__file__).parent.parent / "tracer" / "reference" / "imported"
    garbage = tmp_path / "garbage.json.gz"
    garbage.write_bytes(BAD_DEFLATE)
    proc = dltrace("import", str(ref / "alexnet-a100.kineto.json.gz"), str(garbage),
                   str(ref / "mlp-train-mi250.kineto.json.gz"), "--framework", "torch", "-o", str(tmp_path / "o"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("dltrace: error: ") and "garbage.json.gz" in line
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["alexnet-a100", "mlp-train-mi250"]
    assert list((tmp_path / "o" / "alexnet-a100").glob("*-imported.json"))
    assert list((tmp_path / "o" / "mlp-train-mi250").glob("*-imported.json"))
