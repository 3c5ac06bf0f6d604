"""Stopping dltrace (Ctrl-C, SIGTERM or SIGKILL) stops the probe processes it started,
because a probe hung inside a framework must never outlive the command a user gave up on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DLTRACE


def _probe_pids(parent: int) -> list[int]:
    """Probe processes (the harness) started by ``parent``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"tracer.collect.harness" in cmd:
            out.append(int(pid))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _sigint_as_at_a_terminal() -> None:
    """In the child: SIGINT at its default disposition. A background job of a
    non-interactive shell (`nohup make test &`) inherits SIGINT ignored, and so would
    the dltrace under test: Ctrl-C at a terminal is what these tests mean."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("command", ["probe", "survey"])
def test_stopping_dltrace_stops_its_probes(fake_frameworks, tmp_path, command, how):
    args = ["probe", "crashy", "relu"] if command == "probe" else ["survey", "crashy", "--primitives", "relu",
                                                                    "--no-native", "-o", str(tmp_path)]
    proc = subprocess.Popen([DLTRACE, *args], env={**os.environ, **fake_frameworks}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_at_a_terminal)
    deadline = time.monotonic() + 60
    while not (probes := _probe_pids(proc.pid)):
        assert time.monotonic() < deadline and proc.poll() is None, "the probe never started"
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(getattr(signal, how))
    _, err = proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(map(_alive, probes)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, probes)), f"probe {probes} still running after dltrace got {how}"
    if how != "SIGKILL":  # dltrace's own handling: one line and the status of an interrupt
        assert proc.returncode == 130, (proc.returncode, err[-2000:])


@pytest.mark.slow
def test_the_interrupt_tests_pass_when_the_suite_starts_with_sigint_ignored(fake_frameworks, tmp_path):
    """`nohup make test &` from a non-interactive shell: pytest and everything it starts
    inherit SIGINT ignored. The test above must still mean Ctrl-C, so run it that way.
    The inner pytest gets a folder of its own: given this session's (PYTEST_ADDOPTS
    --basetemp), it would empty it, the shared survey's traces with it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "inner"),
                           f"{__file__}::test_stopping_dltrace_stops_its_probes[probe-SIGINT]"],
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent.parent, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_an_interrupted_survey_leaves_its_callers_pool_to_its_caller(monkeypatch, tmp_path):
    """The pool a caller lends the survey (tracer.pipeline: the GPU evidence queued on it)
    is the caller's to shut: an interrupt cancels the survey's own jobs not yet started,
    and the caller's work queued beside them still runs."""
    from concurrent.futures import ThreadPoolExecutor

    from tracer import survey as sv

    from tracer import registry

    started: list[str] = []

    def fake_job(job, root, fresh, timeout, threads):
        started.append(job.variant)
        time.sleep(0.2)
        return sv.SurveyEvent(job, 1)

    monkeypatch.setattr(sv, "run_job", fake_job)
    monkeypatch.setattr(sv, "stop_all", lambda: None)

    def interrupt(event):
        raise KeyboardInterrupt

    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(KeyboardInterrupt):
            jobs = [sv.Job(registry.load()["torch"], "cpu", name, ()) for name in "abc"]
            sv.run(jobs, tmp_path, workers=1, pool=pool, on_event=interrupt)
        assert pool.submit(lambda: "the caller's").result(timeout=10) == "the caller's"
    assert started[0] == "a" and "c" not in started  # c was cancelled (b may have begun as a ended)
