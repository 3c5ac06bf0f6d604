"""py-spy attached to a plain Python process (the tool's own): the session, the
marker attribution and the failure modes, without a framework; and a probe that crashes
while it is sampled, whose case is a gap that says why."""

from __future__ import annotations

import time

import pytest

from tests.conftest import dltrace
from tracer import survey as sv
from tracer.collect import sampler
from tracer.runner import find_pyspy
from tracer.trace import Frame

PYSPY = find_pyspy()


def _busy(_state=None) -> int:
    return sum(i * i for i in range(20000))


def test_capture_attributes_samples_to_their_loop(tmp_path):
    assert PYSPY, "py-spy is not installed: make test installs it with the tool"
    jobs = [sampler.Job("_dltrace_native_0_forward", sampler.Step(_busy), Frame("root", "", "busy.forward"), 0.5),
            sampler.Job("_dltrace_native_0_backward", sampler.Step(_busy, prepare=_busy),
                        Frame("root", "", "busy.backward"), 0.5)]
    results, session = sampler.capture(PYSPY, jobs, str(tmp_path), rate=100)
    assert session["startup_s"] > 0 and session["pyspy_samples"] >= sum(r[1]["samples"] for r in results.values())
    for marker, (tree, stats) in results.items():
        assert stats["sampled"] and stats["samples"] > 5 and stats["iterations"] > 0 and stats["slowdown"] > 0
        # the slowdown's spread: the window over the unsampled loop timed before and after py-spy
        assert len(stats["slowdowns"]) == 2 and all(r > 0 for r in stats["slowdowns"])
        assert tree.count == stats["samples"]
        assert {c.frame.name for c in tree.children} == {"_busy"}  # the loop and the marker are cut off
    # the backward loop's prepare() ran outside the marker: its samples are not attributed
    assert session["outside_samples"] > 0


def test_replicas_taken_in_turn_are_joined(tmp_path):
    """Two replicas sampled in slices, A B A B A B (as the harness samples them, so
    that a stall of the process costs each replica a share of its samples, never one
    replica all of them): each marker's slices are joined into one loop."""
    from tracer.collect import harness

    assert PYSPY, "py-spy is not installed: make test installs it with the tool"
    step = sampler.Step(_busy)
    root = Frame("root", "", "busy.forward")
    jobs = [sampler.Job(f"_dltrace_native_0_forward_{h}", step, root, 0.6 / harness.ROUNDS)
            for _ in range(harness.ROUNDS) for h in range(harness.REPLICAS)]
    results, session = sampler.capture(PYSPY, jobs, str(tmp_path), rate=100, prime=False)
    assert sorted(results) == [f"_dltrace_native_0_forward_{h}" for h in range(harness.REPLICAS)]
    for tree, stats in results.values():
        assert stats["samples"] > 5 and tree.count == stats["samples"]
        # the slices' times and iterations add up to the replica's share of the pass
        assert stats["duration_s"] >= 0.6 - 0.01 and stats["iterations"] >= harness.ROUNDS
    assert session["pyspy_samples"] >= sum(r[1]["samples"] for r in results.values())


def test_missing_pyspy_is_reported(tmp_path):
    with pytest.raises(sampler.NativeUnavailable, match="py-spy not found"):
        sampler.Sampler(str(tmp_path / "py-spy"), str(tmp_path)).start()


def test_pyspy_that_cannot_attach_is_reported(tmp_path):
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Permission Denied: try running as root' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(sampler.NativeUnavailable, match=r"could not attach \(exit 1\): Permission Denied"):
        sampler.Sampler(str(fake), str(tmp_path)).start()


def test_a_crash_during_native_capture_is_a_gap_and_the_trace_says_why(fake_frameworks, tmp_path):
    proc = dltrace("survey", "crashy", "--primitives", "sigmoid", "-o", str(tmp_path), env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    traces, gaps, _ = sv.read_folders([tmp_path / "traces"])
    # both traces are kept: the functional case and the kernel-shape case whose native layer was lost
    assert len(traces) == 2
    (gap,) = gaps
    assert gap.kind == "crashed" and gap.error.startswith("native layer lost: ") and "SIGSEGV" in gap.error
    (kernel,) = [t for t in traces if "native" in t.meta.get("layers_requested", [])]
    assert "SIGSEGV" in kernel.meta["native"]["error"] and kernel.layer("forward", "native") is None
    assert "SIGSEGV" in kernel.run("forward", "warm").stats["native_error"]
    assert "1 gaps" in proc.stdout


def test_each_step_is_timed_unsampled_once_whatever_its_windows():
    """The replicas of a pass are markers of one step: its unsampled time is measured once
    for all of them (it was once per marker: a third of a survey's native capture)."""
    runs = {"a": 0, "b": 0}

    def counted(name):
        def call(_state=None):
            runs[name] += 1
        return sampler.Step(call)

    a, b = counted("a"), counted("b")
    steps = {"m_a_0": a, "m_a_1": a, "m_b_0": b}
    seen = []
    for step in (a, b):
        timed = step.time
        step.time = lambda seconds, least=3, _t=timed: seen.append(seconds) or _t(seconds, least)
    out = sampler._unsampled(steps, 0.02)
    assert len(seen) == 2 and out["m_a_0"] == out["m_a_1"] > 0 and out["m_b_0"] > 0
    assert runs["a"] >= 3 and runs["b"] >= 3


def test_priming_stops_at_its_limit_within_a_round_of_steps(tmp_path):
    """py-spy that keeps loading symbols: priming ends at its limit, not after the round of
    steps it is in (JAX's 26 steps: a round took 6 s, and a 10 s prime lasted 16.6 s)."""
    session = sampler.Sampler("py-spy", str(tmp_path))
    ran = []

    def step(_state=None):
        ran.append(1)
        with open(session.log, "a") as fh:  # every step makes py-spy load another library
            fh.write(f"loading symbols for lib{len(ran)}.so\n")
        time.sleep(0.02)

    steps = [sampler.Step(step) for _ in range(50)]
    took = session.prime(steps, quiet_s=0.4, most_s=0.1)
    assert took >= 0.1 and len(ran) < len(steps), "priming ran the whole round of steps past its limit"
