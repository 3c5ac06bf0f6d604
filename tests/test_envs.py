"""Framework environments: built from nothing as on a fresh machine, and a failed
set-up step explained in one line with its log kept."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.conftest import dltrace


@pytest.mark.frameworks
def test_chainer_environment_builds_from_nothing(tmp_path):
    # chainer is the one framework built from its sdist: with an empty DLTRACE_HOME and
    # pip's cache off, every build requirement must be named in frameworks.yaml (a warm
    # cache's chainer wheel hid the missing `wheel` package once)
    env = {"DLTRACE_HOME": str(tmp_path / "home"), "PIP_NO_CACHE_DIR": "1"}
    proc = dltrace("env", "setup", "chainer", env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "chainer 7.8.1 ready" in proc.stdout
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
