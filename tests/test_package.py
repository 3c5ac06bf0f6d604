"""The wheel: built from this clone, installed into a fresh virtual environment and
run from a folder outside the clone. It must hold the source package, tracer, with
the registry and the report's templates, and dltrace, the library under the tool's
name, and work as the editable install does: `dltrace list`, a real probe in a
framework environment, `dltrace report`, `import dltrace`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
#: what the build reads besides the package (README.md: the long description)
BUILD_FILES = ("setup.cfg", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this clone's code. Built from a copy: a build in the clone leaves
    build/lib behind, and a stale build/lib goes into the next wheel (a module
    removed since, or the old top-level probes/)."""
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_FILES:
        shutil.copy2(PROJECT / name, src / name)
    for package in ("tracer", "dltrace"):
        shutil.copytree(PROJECT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=300, cwd=src, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("dltrace-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment with the wheel installed, and the environment to
    run its dltrace in. Its dependencies come from dltrace's own environment (a path
    line in a .pth file: no download, and no editable install of this clone, whose
    finder only the tool environment's own .pth files would install); nothing puts
    the clone on the path."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (site / "dltrace-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DLTRACE_REGISTRY")}
    env["DLTRACE_PYSPY"] = str(Path(sys.executable).parent / "py-spy")  # a dependency's binary: not in venv/bin
    return venv, env


def where_installed(installed) -> str:
    """The installed package's folder (inside the fresh venv)."""
    venv, env = installed
    return subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import tracer, os; print(os.path.dirname(tracer.__file__))"],
                          capture_output=True, text=True, env=env, check=True).stdout.strip()


def run(installed, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    venv, env = installed
    return subprocess.run([str(venv / "bin" / "dltrace"), *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_the_wheel_holds_one_package_with_its_registry_templates_and_probes(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    # tracer/, the source folder the project's layout names, and dltrace/, the library under the tool's name
    assert {n.split("/")[0] for n in names} == {"tracer", "dltrace", wheel.name.split("-py3")[0] + ".dist-info"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert sorted(zipfile.ZipFile(wheel).read(top_level).decode().split()) == ["dltrace", "tracer"]
    assert {"tracer/frameworks.yaml", "tracer/templates/base.html", "tracer/templates/index.html",
            "tracer/templates/framework.html", "tracer/templates/scaffold/kernels.py.j2", "tracer/probes/base.py",
            "tracer/probes/torch.py", "tracer/probes/tensorflow_standin.cc", "tracer/probes/tensorflow_standin_vars.cc",
            "tracer/collect/harness.py", "tracer/probes/jax_xplane.py",
            # the real GPU profiles every survey imports, with their provenance and licenses
            "tracer/reference/imported/PROVENANCE.md", "tracer/reference/imported/alexnet-a100.kineto.json.gz",
            "tracer/reference/imported/licenses/HolisticTraceAnalysis-LICENSE",
            "tracer/reference/imported/tensorflow-timeline/GPU/timeline_02_step_2.json"} <= set(names)
    # every module of the package's source is in it
    own = {p.relative_to(PROJECT).as_posix() for top in ("tracer", "dltrace") for p in (PROJECT / top).rglob("*.py")}
    assert own <= set(names), own - set(names)


def test_the_installed_wheel_runs_outside_the_clone(installed, tmp_path):
    venv, env = installed
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import tracer; print(tracer.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(PROJECT), where
    gone = subprocess.run([str(venv / "bin" / "python"), "-c", "import probes"], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert "No module named 'probes'" in gone.stderr
    # the library under the tool's own name, from the installed wheel
    lib = subprocess.run([str(venv / "bin" / "python"), "-c", "import dltrace; print(dltrace.report.__module__)"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert lib.returncode == 0 and lib.stdout.strip() == "tracer.pipeline", lib.stderr

    proc = run(installed, tmp_path, "list")
    assert proc.returncode == 0, proc.stderr
    for name in ("torch", "tensorflow", "chainer", "mxnet", "jax", "conv2d", "relu", "onednn-off"):
        assert name in proc.stdout, name


def test_a_probe_and_a_report_from_the_installed_wheel(frameworks, installed, tmp_path):
    """torch's relu, forward, all four layers, in the framework environment that
    DLTRACE_HOME holds; then the HTML report of its trace (the package's templates)."""
    venv, _ = installed
    traces = tmp_path / "traces"
    traces.mkdir()
    proc = run(installed, tmp_path, "probe", "torch", "relu", "--pass", "forward", "-o", str(traces / "relu.json"))
    assert proc.returncode == 0, proc.stderr
    assert "torch.nn.functional.relu" in proc.stdout and "aten::clamp_min" in proc.stdout
    doc = json.loads((traces / "relu.json").read_text())
    assert doc["meta"]["framework"] == "torch" and doc["meta"]["primitive"] == "relu"
    frames = [dict(zip(("kind", "module", "name", "file"), f)) for f in doc["frames"]]
    relu = {"kind": "python", "module": "torch.nn.functional", "name": "relu", "file": "torch/nn/functional.py"}
    assert relu in frames
    assert {(f["kind"], f["name"]) for f in frames} >= {("op", "aten::relu"), ("op", "aten::clamp_min")}
    assert any(f["kind"] == "native" for f in frames), "no native stacks sampled"
    # dltrace's own code, its probes included, is in no layer (the probe imported
    # the installed package through the runner's link)
    assert not [f for f in frames if f["module"].split(".")[0] == "tracer" or f["file"].startswith("tracer/")
                or "/tracer/" in f["file"]]
    assert str(venv) not in json.dumps(doc["frames"])

    # a reference GPU profile the package ships, imported with its provenance and license
    proc = run(installed, tmp_path, "import", str(Path(where_installed(installed)) / "reference" / "imported"
                                                   / "alexnet-a100.kineto.json.gz"), "--framework", "torch",
               "-o", str(traces))
    assert proc.returncode == 0, proc.stderr
    conv = json.loads(next(traces.rglob("conv2d*.json")).read_text())
    assert conv["meta"]["provenance"]["repository"] == "facebookresearch/HolisticTraceAnalysis"
    assert "HolisticTraceAnalysis-LICENSE" in conv["meta"]["provenance"]["license"]

    proc = run(installed, tmp_path, "report", str(traces), "-o", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    index = (tmp_path / "report" / "index.html").read_text()
    assert "<html" in index and "torch" in index and (tmp_path / "report" / "torch.html").exists()


def test_a_survey_from_the_installed_wheel(frameworks, installed, tmp_path):
    """`dltrace survey torch --primitives relu` run outside the clone (here without the
    emulated CPUs and variants, which other tests cover): the CPU and stand-in probes, the
    reference GPU profiles the package ships and the derived GPU evidence, in one report."""
    out = tmp_path / "survey"
    proc = run(installed, tmp_path, "survey", "torch", "--primitives", "relu", "--no-arm", "--no-variants",
               "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    folders = {p.parent.name for p in (out / "traces" / "torch").glob("*/relu-*.json")}
    assert {"cpu-default", "standin-default", "gpu-derived", "gpu-alexnet-a100"} <= folders, folders
    page = (out / "torch.html").read_text()
    # the CPU path set against the GPU: an imported profile (its provenance) and the GPU build's registry
    assert "imported" in page and "registered" in page and "HolisticTraceAnalysis" in page
    assert "aten::relu" in page and (out / "index.html").exists()
