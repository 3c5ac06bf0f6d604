"""The trace file: round trip, compression, and clear errors for bad files."""

import gzip
import json

import pytest

from tracer.collect.pytrace import PythonTracer
from tracer.trace import VERSION, Frame, Node, Run, Trace, TraceFormatError, load, save
from tests import samplefw


def _trace():
    tracer = PythonTracer(["tests.samplefw"])
    tree, _ = tracer.record(lambda: samplefw.forward(1), "conv2d.forward")
    return Trace({"framework": "samplefw", "primitive": "conv2d"}, [Run("forward", "warm", {"python": tree}, {"x": 1})], tracer.sources)


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_round_trip(tmp_path, name):
    t = _trace()
    save(t, tmp_path / name)
    back = load(tmp_path / name)
    assert back.meta == t.meta
    assert back.runs[0].stats == {"x": 1}
    orig, new = t.layer("forward"), back.layer("forward")
    assert [(d, n.frame, n.count, n.lines, n.call_lines) for d, n in orig.walk()] == [
        (d, n.frame, n.count, n.lines, n.call_lines) for d, n in new.walk()
    ]
    assert back.sources == t.sources
    fwd = new.children[0]
    assert back.source_of(fwd.frame)[0].startswith("def forward")


def test_deep_tree_round_trip(tmp_path):
    root = node = Node(Frame("root", "", "deep"))
    for i in range(5000):
        nxt = Node(Frame("python", "m", f"f{i % 7}"), count=1)
        node.children.append(nxt)
        node = nxt
    save(Trace({}, [Run("forward", "warm", {"python": root})]), tmp_path / "deep.json")
    assert load(tmp_path / "deep.json").layer("forward").size() == 5001


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "corrupt or truncated"),
        (b'{"format": "dltrace-trace", "version": 1, "meta": {}, "frames": [', "corrupt or truncated"),
        (b'{"hello": "world"}', "not a dltrace trace"),
        (json.dumps({"format": "dltrace-trace", "version": VERSION + 1}).encode(), "not supported"),
        (json.dumps({"format": "dltrace-trace", "version": 1, "meta": {}, "frames": [], "runs": [{"pass": "forward"}]}).encode(), "malformed"),
        (gzip.compress(b"not json"), "corrupt or truncated"),
        (gzip.compress(b'{"format": "dltrace-trace"')[:-8], "corrupt or truncated"),
    ],
)
def test_bad_files_fail_in_one_line(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as exc:
        load(p)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert str(p) in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read"):
        load(tmp_path / "nope.json")
