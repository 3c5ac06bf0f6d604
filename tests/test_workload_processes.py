"""What a user's workload does to the probe process it runs in (docs/workloads.md,
"When your workload goes wrong"): the processes it starts end with the probe and count
toward its memory bound, what it writes to fd 2 is kept within a bound, and a probe it
ends early, or whose Python tracer it removes, claims no result and says so. With the
fake framework of tests/crashprobe.py (json, in this interpreter): a probe starts in
a second. Fast tier."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer import runner

#: the workload's parts, put together per test: {start} makes children, {forward} is its forward
WORKLOAD = '''
import os, subprocess, sys, time
PIDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pids.txt")


def workload(device):
    {start}
    def forward():
        {forward}
        return 1

    return forward, (lambda loss: None)
'''
CHILDREN = ('kids = [subprocess.Popen(["sleep", "300"]), subprocess.Popen(["sleep", "301"], start_new_session=True)]'
            '\n    open(PIDS, "w").write(" ".join(str(k.pid) for k in kids))')


def _workload(tmp_path: Path, start: str = "pass", forward: str = "pass") -> Path:
    path = tmp_path / "w.py"
    path.write_text(WORKLOAD.format(start=start, forward=forward))
    return path


def _gone(pid: int) -> bool:
    """``pid`` has ended (a zombie waiting for init counts as ended)."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def _probe(env: dict[str, str], path: Path, *extra: str, layers: str = "python") -> subprocess.CompletedProcess:
    return dltrace("probe", "crashy", "--workload", str(path), "--layers", layers, *extra, env=env, timeout=60)


@pytest.mark.parametrize("how, forward", [("exit", "pass"), ("timeout", "time.sleep(60)")])
def test_what_a_workload_starts_ends_with_the_probe(fake_frameworks, tmp_path, how, forward):
    """A child, and one in a session of its own, outlive neither a probe that ended
    well nor one stopped at its timeout."""
    path = _workload(tmp_path, CHILDREN, forward)
    proc = _probe(fake_frameworks, path, "--timeout", "3")
    assert (proc.returncode == 0) == (how == "exit"), proc.stderr
    if how == "timeout":
        assert "timed out after 3 s, stuck in" in one_line_error(proc)
    pids = [int(p) for p in (tmp_path / "pids.txt").read_text().split()]
    assert len(pids) == 2 and all(_gone(p) for p in pids)


def test_a_childs_memory_counts_toward_the_bound(fake_frameworks, tmp_path):
    """A child in its own session holding 300 MB stops a probe bound to 0.2 GiB."""
    start = ('kid = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(300 << 20); time.sleep(300)"],'
             ' start_new_session=True)\n    open(PIDS, "w").write(str(kid.pid))')
    path = _workload(tmp_path, start, "time.sleep(60)")
    t0 = time.monotonic()
    proc = _probe({**fake_frameworks, runner.MEMORY_ENV: "0.2"}, path)
    assert "used more than 0.2 GiB of memory and was stopped" in one_line_error(proc)
    assert time.monotonic() - t0 < 30 and _gone(int((tmp_path / "pids.txt").read_text()))


def test_what_a_probe_writes_to_fd_2_is_bounded():
    """The bound is on the file descriptor: os.write(2, ...), as C code writes, 8 MiB
    of it, keeps the first and the last half of STDERR_BOUND and counts the rest."""
    read_end, write_end = os.pipe()
    writer = subprocess.Popen([sys.executable, "-c", "import os\nfor _ in range(128): os.write(2, b'y' * 65536)\n"
                               "os.write(2, b'END')"], stderr=write_end)
    os.close(write_end)
    capture = runner.Capture(read_end)
    writer.wait(timeout=30)
    capture.close()
    text = capture.text()
    assert len(text) < runner.STDERR_BOUND + 100 and text.endswith("END") and text.startswith("yyy")
    assert capture.dropped == 128 * 65536 + 3 - runner.STDERR_BOUND
    assert f"[dltrace: {capture.dropped} bytes of the probe's output dropped here]" in text


@pytest.mark.parametrize("forward, said", [
    # 8 MiB to fd 2 and sys.__stderr__, then an exit: one short line naming the file and the exit
    ("os.write(2, b'x' * (4 << 20)); sys.__stderr__.write('z' * (4 << 20)); sys.__stderr__.flush(); os._exit(3)",
     "failed with exit status 3 while running workload w.py"),
    ("os._exit(0)", "ended early with exit status 0 while running workload w.py"),
    # the Python layer would be cut: no trace claims it
    ("sys.settrace(None); sys.setprofile(None); [sys.monitoring.set_events(i, 0) for i in range(6) "
     "if sys.monitoring.get_tool(i) == 'dltrace'] if hasattr(sys, 'monitoring') else None",
     "w.py: running forward() removed dltrace's Python tracer"),
])
def test_a_probe_the_workload_cut_claims_nothing_and_says_so(fake_frameworks, tmp_path, forward, said):
    proc = _probe(fake_frameworks, _workload(tmp_path, forward=forward))
    line = one_line_error(proc)
    assert said in line and len(line) < 2000, line


def test_a_workload_that_closes_fds_1_and_2_still_has_its_error_said(fake_frameworks, tmp_path):
    path = _workload(tmp_path, "os.close(1); os.close(2)", "raise ValueError('my own message')")
    line = one_line_error(_probe(fake_frameworks, path))
    assert f"{path}:9: running forward(): ValueError: my own message" in line, line


def test_a_workload_that_exits_during_the_native_capture_cuts_that_layer_and_says_so(fake_frameworks, tmp_path):
    """py-spy attached (the probe's only child) is when the workload ends its process."""
    forward = ("if any(open(f'/proc/self/task/{t}/children').read().strip() for t in os.listdir('/proc/self/task')): "
               "os._exit(0)")
    proc = _probe(fake_frameworks, _workload(tmp_path, forward=forward), layers="python,native")
    line = one_line_error(proc)
    assert "ended early with exit status 0 during the native capture (workload w.py): the native layer was cut" \
        in line, line


def test_no_file_a_probe_writes_grows_past_its_bound(fake_frameworks, tmp_path):
    """A workload writing a file without end (as one printing from C into the library
    layer's log of fd 1 would): the write fails at the bound, the disk is not filled, and
    the probe says so in one line instead of dying of SIGXFSZ."""
    big = tmp_path / "big.bin"
    path = _workload(tmp_path, forward=f"open({str(big)!r}, 'wb').write(b'x' * (16 << 20))")
    line = one_line_error(_probe({**fake_frameworks, "DLTRACE_PROBE_FILE_MB": "4"}, path))
    assert "running forward(): OSError: [Errno 27] File too large" in line, line
    assert big.stat().st_size <= 4 << 20
