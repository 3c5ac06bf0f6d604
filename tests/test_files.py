"""tracer.files: an output is written whole or not at all, and a path that is a
device is never replaced by the atomic rename (`-o /dev/null` writes into it; a FIFO,
socket or block device is refused in one line); an output that cannot be written is found
before any probe runs, and a full disk is one line that leaves nothing half written."""

from __future__ import annotations

import os
import resource
import signal
import socket
import stat
import subprocess
import time

import pytest

from tests.conftest import DLTRACE, dltrace, one_line_error, write_pair
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


def test_a_write_error_names_its_file(tmp_path):
    import errno

    from tracer.files import describe, replacing

    target = tmp_path / "out.json"
    with pytest.raises(OSError) as info:
        with replacing(target) as fh:
            fh.write(b"x")
            raise OSError(errno.ENOSPC, "No space left on device")  # as a write to a full disk raises
    assert describe(info.value, "") == f"cannot write {target}: No space left on device"
    assert describe(OSError(errno.ENOSPC, "No space left on device"), "") == "cannot write: No space left on device"


@pytest.mark.parametrize("where", ["/proc/dltrace-out", "FILE/sub"])
def test_unwritable_outputs_are_found_before_probing(fake_frameworks, tmp_path, where):
    (tmp_path / "FILE").write_text("a file, not a folder")
    where = where.replace("FILE", str(tmp_path / "FILE"))
    good, _ = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    t0 = time.monotonic()
    for args in (["probe", "crashy", "relu", "-o", f"{where}/t.json"],  # relu hangs: it must never start
                 ["survey", "crashy", "--primitives", "relu", "-o", where],
                 ["report", str(tmp_path), "-o", where],
                 ["export", str(good), "--format", "collapsed", "-o", f"{where}/t.txt"]):
        line = one_line_error(dltrace(*args, env=fake_frameworks, timeout=60))
        assert f"cannot write {where.removesuffix('/sub')}" in line, line
    assert time.monotonic() - t0 < 60


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a 128 KiB filesystem (tmpfs, as root), or where writing more than
    128 KiB to one file fails (a file-size limit): a full disk either way."""
    mount = tmp_path / "full"
    mount.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)],
                                                   capture_output=True).returncode == 0
    limit = None if mounted else (lambda: (signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
                                           resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, 128 * 1024))))
    yield mount, limit
    if mounted:
        subprocess.run(["umount", str(mount)])


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, full_disk):
    folder, limit = full_disk
    # a report big enough to fill it: many primitives, each with a drawn graph
    for prim in ("conv2d", "relu", "dense", "tanh", "softmax", "sigmoid"):
        write_pair(tmp_path / "t" / prim, "aten::mkldnn_" + "x" * 3000, "aten::thnn_" + "y" * 3000, primitive=prim)
    out = folder / "r"
    proc = subprocess.run([DLTRACE, "report", str(tmp_path / "t"), "-o", str(out)], capture_output=True, text=True,
                          preexec_fn=limit, timeout=300)
    line = one_line_error(proc)
    assert "No space left on device" in line or "File too large" in line
    left = [p for p in folder.rglob("*") if p.is_file()]
    assert not [p for p in left if ".tmp" in p.name], left
    assert all(p.read_text().rstrip().endswith("</html>") for p in left if p.suffix == ".html")
    assert all(p.stat().st_size > 0 for p in left)


def test_a_named_pipe_is_never_read(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    os.mkfifo(tmp_path / "t" / "pipe.json")
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"), timeout=120)
    assert proc.returncode == 0 and "pipe.json: not read: a named pipe, not a file" in proc.stderr
    line = one_line_error(dltrace("import", str(tmp_path / "t" / "pipe.json"), "--framework", "torch",
                                  "-o", str(tmp_path / "o"), timeout=120))
    assert "is a named pipe, not a file" in line
