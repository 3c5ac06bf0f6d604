"""Framework environments: built from nothing as on a fresh machine, and a failed
set-up step explained in one line with its log kept; an interpreter that hangs, never
stops writing or is a folder, and a damaged external.json, are each one bounded line."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error


@pytest.mark.frameworks
def test_chainer_environment_builds_from_nothing(tmp_path):
    # chainer is the one framework built from its sdist: with an empty DLTRACE_HOME and
    # pip's cache off, every build requirement must be named in frameworks.yaml (a warm
    # cache's chainer wheel hid the missing `wheel` package once)
    env = {"DLTRACE_HOME": str(tmp_path / "home"), "PIP_NO_CACHE_DIR": "1"}
    proc = dltrace("env", "setup", "chainer", env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"chainer 7\.8\.1 ready in \d+ s", proc.stdout), proc.stdout  # where the set-up's time went
    assert (tmp_path / "home" / "logs" / "chainer-step2.log").exists()
    proc = dltrace("probe", "chainer", "relu", "--pass", "forward", "--layers", "python,op", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "chainer.functions.activation.relu" in proc.stdout


REGISTRY = """
frameworks:
  failing:
    import: json
    version: "0"
    probe: tests.crashprobe
    install:
      - requirements: ["{pkg}"]
        options: ["--no-build-isolation", "--no-index"]
    devices: {{cpu: cpu}}
    source_roots: [json]
    apis: [functional]
"""


@pytest.mark.slow
def test_failed_install_step_says_what_went_wrong(tmp_path):
    pkg = tmp_path / "badpkg"
    pkg.mkdir()
    (pkg / "setup.py").write_text(textwrap.dedent("""
        import sys
        print("building badpkg ...")
        sys.exit("error: the C compiler cannot find cblas.h")
    """))
    reg = tmp_path / "frameworks.yaml"
    reg.write_text(REGISTRY.format(pkg=pkg))
    home = tmp_path / "home"
    proc = dltrace("--trust-registry", "env", "setup", "failing",  # a local path and --no-index: trusted
                   env={"DLTRACE_HOME": str(home), "DLTRACE_REGISTRY": str(reg)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "install step" in ln)
    # the framework, the step and its pip command, pip's real reason, and the full log
    assert f"failing: install step 1 of 1 (pip install --no-build-isolation --no-index {pkg}) failed:" in line
    assert "error: the C compiler cannot find cblas.h" in line
    log = home / "logs" / "failing-step1.log"
    assert f"(full log: {log})" in line and "building badpkg" in log.read_text()
    assert "See above for details" not in line
    assert proc.stderr.strip().endswith("environment set-up failed for: failing")


def test_python_dash_m_tracer_lists_every_command():
    import subprocess

    for module in ("tracer", "tracer.cli"):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        for command in ("diff", "env", "list", "probe", "survey", "report", "export", "audit"):
            assert f"  {command} " in proc.stdout, (module, command, proc.stdout)


def _script(path: Path, body: str) -> Path:
    """An executable 'interpreter' that behaves as ``body`` (a shell script) says."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_env_use_of_an_interpreter_that_never_stops_writing_is_bounded(fake_frameworks, tmp_path):
    chatty = _script(tmp_path / "python", "exec yes 'all work and no play'\n")
    env = {**fake_frameworks, "DLTRACE_HOME": str(tmp_path / "home")}
    t0 = time.monotonic()
    line = one_line_error(dltrace("env", "use", "crashy", str(chatty), env=env, timeout=120))
    assert "wrote more than 1 MiB while importing json; stopped" in line
    assert time.monotonic() - t0 < 60


@pytest.mark.slow
def test_list_with_hanging_interpreters_is_bounded(fake_frameworks, tmp_path):
    from tracer import envs

    hang = _script(tmp_path / "python", "exec sleep 600\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "external.json").write_text(json.dumps({"crashy": str(hang), "broken": str(hang), "absent": str(hang)}))
    t0 = time.monotonic()
    proc = dltrace("list", env={**fake_frameworks, "DLTRACE_HOME": str(home)}, timeout=200)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    # three hanging interpreters, asked at once: one version look-up's bound, not 3 x 300 s
    assert took < envs.VERSION_TIMEOUT_S * 2 + 20, took
    assert proc.stdout.count("ready ?") == 3


def test_a_damaged_external_json_is_one_line(tmp_path):
    (tmp_path / "external.json").write_text('["not", "a", "mapping"]')
    line = one_line_error(dltrace("probe", "torch", "conv2d", env={"DLTRACE_HOME": str(tmp_path)}))
    assert "external.json is damaged" in line


def test_env_use_of_a_folder_is_one_line(tmp_path):
    line = one_line_error(dltrace("env", "use", "torch", str(tmp_path), env={"DLTRACE_HOME": str(tmp_path)}))
    assert f"torch: {tmp_path} is not an executable Python interpreter" in line


def test_set_up_runs_two_environments_at_once_and_one_emulated_at_a_time(frameworks):
    """`env setup`'s two lanes: an x86 environment is set up while an emulated one is, the
    emulated ones (one shared Debian root) never side by side, and a failed step is named
    while every other runs."""
    import threading

    from tracer.cli.environments import _in_two_lanes

    x86 = [frameworks[n] for n in ("torch", "tensorflow", "chainer")]
    emulated = [frameworks[n] for n in ("torch", "jax", "chainer")]
    emulated_started, lock = threading.Event(), threading.Lock()
    now: set[str] = set()
    ran: list[str] = []
    overlaps: list[set[str]] = []

    def step(kind: str, fw) -> bool:
        with lock:
            now.add(f"{kind}:{fw.name}")
            overlaps.append(set(now))
        if kind == "x86" and fw.name == "torch":
            assert emulated_started.wait(30), "no emulated step ran beside the first x86 one"
        if kind == "aarch64":
            emulated_started.set()
        time.sleep(0.05)
        with lock:
            now.discard(f"{kind}:{fw.name}")
            ran.append(f"{kind}:{fw.name}")
        return not (kind == "x86" and fw.name == "tensorflow")

    failed = _in_two_lanes(x86, emulated, lambda fw: step("x86", fw), lambda fw: step("aarch64", fw))
    assert failed == ["tensorflow"]
    assert sorted(ran) == sorted([f"x86:{fw.name}" for fw in x86] + [f"aarch64:{fw.name}" for fw in emulated])
    assert any(len(s) == 2 for s in overlaps)
    assert all(sum(x.startswith("aarch64:") for x in s) <= 1 for s in overlaps)
