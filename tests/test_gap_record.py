"""The gap record (tracer/gap.py) is versioned as traces are: what gap_json writes loads
back unchanged and says its version; a record without the field (every record written
before it existed) reads as version 1; a newer version, or one that is not an integer,
is refused in one line. Fast tier: no framework environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import dltrace, write_pair
from tracer.gap import GAP_SUFFIX, HISTORY, MAX_GAP_BYTES, VERSION, VERSION_FIELD, Gap, gap_json, load_gap, write_gap

GAP = Gap("torch", "cpu", "default", "relu", "functional", "probe timed out", "timeout", "a64fx")
#: a gap record as dltrace wrote it before the version field: no "version", no "arch"
V1 = {"framework": "torch", "device": "cpu", "variant": "default", "primitive": "relu", "api": "functional",
      "error": "no", "kind": "failed", "cpu": ""}


def _written(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / f"relu-functional{GAP_SUFFIX}"
    path.write_text(json.dumps(doc))
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(ValueError) as caught:
        load_gap(path)
    message = str(caught.value)
    assert message and "\n" not in message
    return message


def test_history_is_ordered_and_versions_follow() -> None:
    assert [v for v, _, _ in HISTORY] == list(range(1, len(HISTORY) + 1)) and VERSION == HISTORY[-1][0] >= 2
    assert [d for _, d, _ in HISTORY] == sorted(d for _, d, _ in HISTORY)


def test_round_trip(tmp_path: Path) -> None:
    write_gap(tmp_path / "fw" / "relu-functional.json", GAP)
    path = tmp_path / "fw" / f"relu-functional{GAP_SUFFIX}"
    doc = json.loads(path.read_text())
    assert doc[VERSION_FIELD] == VERSION and "arch" not in doc  # arch only where set
    assert load_gap(path) == GAP
    native = Gap("torch", "cpu", "default", "relu", "functional", "lost", "scheduler", "", "aarch64")
    assert json.loads(gap_json(native))["arch"] == "aarch64"
    assert load_gap(_written(tmp_path, json.loads(gap_json(native)))) == native


def test_a_version_1_record_loads(tmp_path: Path) -> None:
    assert load_gap(_written(tmp_path, V1)) == Gap("torch", "cpu", "default", "relu", "functional", "no")
    assert load_gap(_written(tmp_path, {**V1, VERSION_FIELD: 1})).error == "no"


def test_a_newer_record_is_refused_in_one_line(tmp_path: Path) -> None:
    message = _refusal(_written(tmp_path, {**V1, VERSION_FIELD: VERSION + 1}))
    assert f"version {VERSION + 1}" in message and f"1..{VERSION}" in message and "newer dltrace" in message


@pytest.mark.parametrize("version", ["2", 2.0, True, None, [2], 0, -1])
def test_a_version_that_is_not_a_known_integer_is_refused(tmp_path: Path, version: object) -> None:
    message = _refusal(_written(tmp_path, {**V1, VERSION_FIELD: version}))
    assert VERSION_FIELD in message


def test_the_other_checks_stay(tmp_path: Path) -> None:
    assert "unknown field 'extra'" in _refusal(_written(tmp_path, {**V1, "extra": "x"}))
    assert "missing field 'error'" in _refusal(_written(tmp_path, {k: v for k, v in V1.items() if k != "error"}))
    assert "not a string" in _refusal(_written(tmp_path, {**V1, "kind": 3}))
    assert "not a JSON object" in _refusal(_written(tmp_path, [V1]))
    big = tmp_path / f"big{GAP_SUFFIX}"
    big.write_bytes(b" " * (MAX_GAP_BYTES + 1))
    _refusal(big)
    assert load_gap(_written(tmp_path, {**V1, "error": "\ud800"})).error == "\ufffd"


@pytest.mark.parametrize("content, why", [
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ('{"framework": 1, "device": "cpu", "variant": "default", "primitive": "relu", "api": "functional", "error": "x"}',
     "field 'framework' is int, not a string"),
    ('{"device": "cpu"}', "missing field 'framework'"),
])
def test_a_bad_gap_record_is_one_line_and_the_rest_renders(tmp_path, content, why):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d", framework="torch")
    (tmp_path / "t" / "relu-functional.gap.json").write_text(content)
    for args in (["report", str(tmp_path / "t"), "-o", str(tmp_path / "r")],
                 ["audit", "torch", "--traces", str(tmp_path / "t")]):
        proc = dltrace(*args)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == 0 and f"unreadable gap record ({why}" in proc.stderr, proc.stderr
    assert (tmp_path / "r" / "torch.html").exists()


def test_a_gap_names_a_file_by_its_last_part_never_a_folder_of_this_machine():
    """A reason is kept and shown (models.html, survey.json): an absolute path in it keeps
    its file's name only; a URL or a relative path is left as it is."""
    from tracer.gap import Gap

    def said(error: str) -> str:
        return Gap("torch", "cpu", "default", "net", "user", error).error

    assert said("/home/me/models/net.py:3: running forward(): ValueError") == "net.py:3: running forward(): ValueError"
    assert said('crashed while running workload /tmp/x/net.py; File "/usr/lib/a.py", line 2') == \
        'crashed while running workload net.py; File "a.py", line 2'
    assert said("see https://example.org/a/b and models/net.py") == "see https://example.org/a/b and models/net.py"
