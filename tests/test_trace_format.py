"""The trace file: round trip, compression, and clear errors for bad files."""

import gzip
import json
from pathlib import Path

import pytest

from tests import samplefw
from tests.conftest import _limited, dltrace, one_line_error, write_pair
from tracer.collect.pytrace import PythonTracer
from tracer.trace import VERSION, Frame, Node, Run, Trace, TraceFormatError, load, save

META = {"framework": "samplefw", "primitive": "conv2d", "api": "functional", "device": "cpu"}


def _trace():
    tracer = PythonTracer(["tests.samplefw"])
    tree, _ = tracer.record(lambda: samplefw.forward(1), "conv2d.forward")
    return Trace(dict(META), [Run("forward", "warm", {"python": tree}, {"x": 1})], tracer.sources)


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
    save(Trace(META, [Run("forward", "warm", {"python": root})]), tmp_path / "deep.json")
    assert load(tmp_path / "deep.json").layer("forward").size() == 5001


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "corrupt or truncated"),
        (b'{"format": "dltrace-trace", "version": 1, "meta": {}, "frames": [', "corrupt or truncated"),
        (b'{"hello": "world"}', "not a dltrace trace"),
        (json.dumps({"format": "dltrace-trace", "version": VERSION + 1}).encode(), "not supported"),
        (json.dumps({"format": "dltrace-trace", "version": True}).encode(), "version 'True' is not supported"),
        (json.dumps({"format": "dltrace-trace", "version": 1, "meta": {}, "frames": [],
                     "runs": [{"pass": "forward"}]}).encode(), "malformed"),
        (gzip.compress(b"not json", mtime=0), "corrupt or truncated"),
        (gzip.compress(b'{"format": "dltrace-trace"', mtime=0)[:-8], "corrupt or truncated"),
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


def _doc(**edit):
    """A valid trace document (one frame, one tree) with ``edit`` applied to it."""
    doc = {"format": "dltrace-trace", "version": 1, "meta": dict(META),
           "frames": [["root", "", "conv2d.forward", "", 0, ""], ["python", "m", "f", "m.py", 3, ""]],
           "runs": [{"pass": "forward", "phase": "warm",
                     "layers": {"python": [[0, 1, 5, [], [], -1], [1, 1, 4, [2], [3], 0]]},
                     "stats": {"untraced_s": 0.001}}],
           "sources": [["m.py", 3, ["def f():", "    pass"]]]}
    for key, value in edit.items():
        if key == "node":
            doc["runs"][0]["layers"]["python"][1] = value
        elif key.startswith("meta_"):
            doc["meta"][key[5:]] = value
        else:
            doc[key] = value
    return doc


def test_the_valid_document_loads(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_doc()))
    assert load(p).layer("forward").children[0].frame.name == "f"


# A corrupt deflate stream (zlib.error: invalid stored block lengths), not a short one.
_BAD_DEFLATE = (gzip.compress(json.dumps(_doc()).encode(), mtime=0)[:10] + bytes([0x00, 0x05, 0x00, 0x00, 0x00])
                + b"x" * 40)


@pytest.mark.parametrize(
    "content, message",
    [
        (_BAD_DEFLATE, "corrupt or truncated"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        (json.dumps(_doc(meta_framework=None)).encode(), "meta.framework is missing"),
        (json.dumps(_doc(meta_framework=["torch"])).encode(), "meta.framework must be a non-empty string, not list"),
        (json.dumps(_doc(meta_device={"a": 1})).encode(), "meta.device must be a non-empty string"),
        (json.dumps(_doc(meta_shape="2x3")).encode(), "meta.shape must be list"),
        (json.dumps(_doc(meta_machine=["x86_64"])).encode(), "meta.machine must be dict"),
        (json.dumps(_doc(node=[1, "many", 4, [], [], 0])).encode(), "count and time must be non-negative integers"),
        (json.dumps(_doc(node=[1, 1, None, [], [], 0])).encode(), "count and time must be non-negative integers"),
        (json.dumps(_doc(node=[-1, 1, 4, [], [], 0])).encode(), "names frame -1, not one of the 2 frames"),
        (json.dumps(_doc(node=[1, 1, 4, ["x"], [], 0])).encode(), "line lists must be lists of integers"),
        (json.dumps(_doc(node=[1, 1, 4, [], [], 5])).encode(), "parent 5 is not an earlier node"),
        (json.dumps(_doc(frames=[["root", "", "r", "", 0, ""], ["python", ["m"], "f", "m.py", 3, ""]])).encode(),
         "module, name, file and lib must be strings"),
        (json.dumps(_doc(frames=[["root", "", "r", "", 0, ""], ["alien", "m", "f", "m.py", 3, ""]])).encode(),
         "unknown kind 'alien'"),
        (json.dumps(_doc(runs=[{"pass": "sideways", "phase": "warm", "layers": {}}])).encode(), "pass and phase"),
        (json.dumps(_doc(runs=[{"pass": "forward", "phase": "warm", "layers": {},
                                "stats": {"untraced_s": "fast"}}])).encode(),
         "stats.untraced_s must be a number, not str"),
        (json.dumps(_doc(sources=[["m.py", 3, "def f(): pass"]])).encode(), "a source entry must be"),
    ],
)
def test_hostile_documents_fail_in_one_line(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as exc:
        load(p)
    assert message in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_lone_surrogates_become_replacement_characters(tmp_path):
    doc = json.dumps(_doc(frames=[["root", "", "r", "", 0, ""], ["python", "m", "f\udc80x", "m.py", 3, ""]],
                          meta_framework_version="1.\ud800"))
    p = tmp_path / "t.json"
    p.write_text(doc)  # json.dumps escapes them as \udc80: valid JSON, not valid text
    t = load(p)
    assert t.layer("forward").children[0].frame.name == "f\ufffdx" and t.meta["framework_version"] == "1.\ufffd"
    "".join([t.layer("forward").children[0].frame.name]).encode("utf-8")  # encodable now


def test_version_history_and_old_traces(tmp_path):
    """The writer says the last version of HISTORY; version-1 traces (the H100 reference
    traces of 2026-11-26 08:46, written before versions were declared, carrying fields of
    later versions; one is kept in tests/data/version1 as it was recorded) still load,
    unchanged on disk."""
    from pathlib import Path

    from tracer.trace import HISTORY

    assert [v for v, _, _ in HISTORY] == list(range(1, VERSION + 1)) and VERSION >= 6
    out = tmp_path / "t.json"
    save(_trace(), out)
    assert json.loads(out.read_text())["version"] == VERSION
    old = sorted((Path(__file__).resolve().parent / "data" / "version1").glob("*.json.gz"))
    assert old
    for path in old:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        assert doc["version"] == 1 and "collector" in doc["meta"]  # a field of version 6, written as 1
        trace = load(path)
        assert trace.info.collector is not None and trace.runs


BAD_DEFLATE = gzip.compress(b'{"format": "dltrace-trace"}' * 50, mtime=0)[:10] + bytes([0, 5, 0, 0, 0]) + b"x" * 40


@pytest.mark.parametrize("content, why", [
    (BAD_DEFLATE, "corrupt or truncated trace"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
])
def test_corrupt_traces_are_one_line_in_every_command(tmp_path, content, why):
    good, _ = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(content)
    for args in (["diff", str(bad), str(good)], ["diff", str(good), str(bad)], ["diff", str(bad)],
                 ["export", str(bad), "--format", "collapsed"], ["report", str(bad), "-o", str(tmp_path / "r")]):
        proc = dltrace(*args)
        if args[0] == "report":  # the only file is skipped with one line: nothing to report
            assert proc.returncode == 1 and f"skipped {bad}: " in proc.stderr and why in proc.stderr
            assert "Traceback" not in proc.stderr
        else:
            assert why in one_line_error(proc)


def _gzip_bomb(path: Path, gib: float) -> Path:
    """A gzip file of concatenated members (legal gzip) that expands to ``gib`` GiB of
    zeros behind a valid trace header, in a few MB."""
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    path.write_bytes(gzip.compress(b'{"format": "dltrace-trace", "version": 1, "meta": {"x": "')
                     + member * int(gib * 16))
    return path


@pytest.mark.slow
def test_a_decompression_bomb_is_one_line_in_every_command(tmp_path):
    good, _ = write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    bomb = _gzip_bomb(tmp_path / "t" / "bomb.json.gz", 5.8)
    zero = tmp_path / "t" / "zero.json"
    zero.symlink_to("/dev/zero")
    assert bomb.stat().st_size < 8 << 20
    for bad in (bomb, zero):
        for args in (["diff", str(bad), str(good)], ["export", str(bad), "--format", "collapsed"]):
            line = one_line_error(_limited(*args))
            assert ("MiB allowed" if bad == bomb else "a character device, not a file") in line
        line = one_line_error(_limited("diff", str(bad)))
        assert str(bad) in line and ("expands to more than the 256 MiB allowed" in line or "a character device" in line)
    proc = _limited("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"skipped {bomb}: not read: expands to more than" in proc.stderr
    assert f"skipped {zero}: not read: a character device, not a file" in proc.stderr
    assert "aten::thnn_conv2d" in (tmp_path / "r" / "samplefw.html").read_text()
    proc = _limited("audit", "torch", "--traces", str(tmp_path / "t"))
    assert "Traceback" not in proc.stderr and "skipped" in proc.stderr
