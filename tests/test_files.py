"""tracer.files: an output is written whole or not at all, and a path that is a
device is never replaced by the atomic rename (`-o /dev/null` writes into it; a FIFO,
socket or block device is refused in one line). Fast tier."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from tests.conftest import dltrace, one_line_error
from tracer.files import OutputError, ensure_file_parent, write_text


def test_a_character_device_is_written_into_not_replaced():
    before = os.stat("/dev/null")
    ensure_file_parent("/dev/null")
    write_text("/dev/null", "discarded")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert not [n for n in os.listdir("/dev") if n.startswith("null.tmp") or n.startswith(".dltrace-write-check")]


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_is_refused_and_kept(tmp_path, kind):
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    with pytest.raises(OutputError, match=f"it is a {'FIFO' if kind == 'fifo' else 'socket'}, not a file"):
        ensure_file_parent(path)
    with pytest.raises(OutputError):
        write_text(path, "x")
    mode = os.stat(path).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISSOCK(mode)
    assert os.listdir(tmp_path) == [kind]


@pytest.mark.slow
def test_export_onto_dev_null_and_a_fifo(tmp_path):
    """The command line, end to end: an export to /dev/null succeeds and leaves the device; to a FIFO, one line."""
    from tests.test_verdict import torch_pair
    from tracer.trace import save

    trace = tmp_path / "t.json"
    save(torch_pair()[0], trace)
    proc = dltrace("export", str(trace), "--format", "collapsed", "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    os.mkfifo(tmp_path / "pipe")
    line = one_line_error(dltrace("export", str(trace), "--format", "collapsed", "-o", str(tmp_path / "pipe")))
    assert "it is a FIFO, not a file" in line


def test_a_shared_json_file_that_is_not_one_reads_as_none(tmp_path):
    """`dltrace report -o OUT` reads OUT/survey.json: nested 200,000 deep, a FIFO, a link
    to /dev/zero: each is read as no record at once, never a hang or a traceback."""
    from tracer.files import read_json_object

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    good = tmp_path / "good.json"
    good.write_text('{"report": {"x": 1}}')
    assert [read_json_object(p) for p in (deep, fifo, zero, tmp_path / "none.json")] == [{}, {}, {}, {}]
    assert read_json_object(good) == {"report": {"x": 1}}
