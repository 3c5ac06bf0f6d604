"""Temporary folders and perf maps (tracer.tempdirs): what a killed dltrace or probe left
behind is swept at the next start while a live run's are kept, and a probe leaves nothing
in TMPDIR, so that frameworks' leftovers do not pile up run after run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import DLTRACE as DLTRACE_BIN
from tests.conftest import dltrace


def test_folders_of_a_killed_dltrace_are_swept_at_the_next_start_and_live_ones_kept(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from tracer import tempdirs

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # a process that owns a folder and a perf map, killed by SIGKILL: nothing runs its clean-up
    perfmap = Path(f"/tmp/perf-{os.getpid() + 4_000_000}.map")  # a pid no process has
    code = ("import sys, time; from pathlib import Path; from tracer import tempdirs\n"
            "with tempdirs.owned() as d:\n"
            f"    Path({str(perfmap)!r}).write_text('0 1 k')\n"
            f"    tempdirs.note_perfmap(d, {str(perfmap)!r})\n"
            "    print(d, flush=True); time.sleep(600)\n")
    killed = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    dead = Path(killed.stdout.readline().strip())
    killed.kill()
    killed.wait()
    live_proc = subprocess.Popen([sys.executable, "-c", code.replace(str(perfmap), str(perfmap) + ".live")],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    live = Path(live_proc.stdout.readline().strip())
    old = tmp_path / "dltrace-before-locks"
    old.mkdir()
    os.utime(old, (time.time() - 2 * tempdirs.UNLOCKED_AGE_S,) * 2)
    young = tmp_path / "dltrace-young"
    young.mkdir()
    try:
        assert dead.is_dir() and perfmap.exists()
        proc = dltrace("list", env={"TMPDIR": str(tmp_path)}, timeout=120)  # the next start
        assert proc.returncode == 0, proc.stderr
        assert not dead.exists() and not perfmap.exists() and not old.exists()
        assert live.is_dir() and young.is_dir()  # another dltrace's, alive; one that may be
    finally:
        live_proc.kill()
        live_proc.wait()
        perfmap.unlink(missing_ok=True)
        Path(str(perfmap) + ".live").unlink(missing_ok=True)


def test_a_probe_killed_with_dltrace_leaves_nothing_after_the_next_start(fake_frameworks, tmp_path):
    import os
    import signal
    import subprocess

    env = {**os.environ, **fake_frameworks, "TMPDIR": str(tmp_path)}
    # relu hangs in crashy's probe; dltrace is then killed outright, with no chance to clean up
    proc = subprocess.Popen([str(Path(DLTRACE_BIN)), "probe", "crashy", "relu", "--layers", "python"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("dltrace-*/request.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(tmp_path.glob("dltrace-*/request.json"))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1)  # the probe dies with its parent
    assert list(tmp_path.glob("dltrace-*"))
    assert dltrace("list", env={**fake_frameworks, "TMPDIR": str(tmp_path)}, timeout=120).returncode == 0
    assert not list(tmp_path.glob("dltrace-*"))


def test_a_probe_lists_its_own_perf_map_for_dltrace_to_remove(tmp_path, monkeypatch):
    import os

    from tracer import tempdirs
    from tracer.collect import harness

    listing = tmp_path / tempdirs.PERFMAPS
    monkeypatch.setenv("DLTRACE_PERFMAP_LIST", str(listing))
    harness._list_own_perfmap()  # the probe's first step (under emulation its pid is not the one dltrace started)
    assert listing.read_text() == f"/tmp/perf-{os.getpid()}.map\n"
    monkeypatch.delenv("DLTRACE_PERFMAP_LIST")
    listing.unlink()
    harness._list_own_perfmap()  # a perf map the user asked for is theirs: not listed
    assert not listing.exists()


def test_a_probe_leaves_no_temporary_folder(fake_frameworks, tmp_path):
    # the probe process's temporary folder is the runner's: whatever a framework leaves
    # there goes with it; crashy's dense case leaves one, as MXNet's profiler does
    env = {**fake_frameworks, "TMPDIR": str(tmp_path)}
    proc = dltrace("probe", "crashy", "dense", "--layers", "python", env=env)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.frameworks
def test_mxnet_probe_leaves_no_profiler_folder(tmp_path):
    proc = dltrace("probe", "mxnet", "relu", "--pass", "forward", "--layers", "python,op",
                   env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "from mx.profiler" in proc.stdout  # the operator profiler ran
    assert list(tmp_path.iterdir()) == []
