"""The C core of the Python collector (tracer/collect/ctrace/) against the
pure-Python PythonTracer: the same tree, node by node (frames, counts, calling
lines, lines run; never times), on the small call patterns of tests/samplefw (on
3.11 in this process, on a 3.12+ interpreter through tests/collector_twins.py) and
on real frameworks' steps; how it lives beside other tools (a recording inside a
recording, another tool's profile and trace functions, code objects released); its
stub against the built module; and the fallback: where the core cannot be built,
the Python collector runs and the trace says why."""

from __future__ import annotations

import dataclasses
import errno
import glob
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import collector_twins, samplefw
from tests.conftest import dltrace
from tests.sample_patterns import PATTERNS
from tests.test_envs import _script
from tracer import envs, runner
from tracer.collect import cbuild
from tracer.collect.collector import ENV, CollectorError, python_tracer
from tracer.collect.ctracer import CTracer
from tracer.collect.pytrace import PythonTracer
from tracer.contract import PRIMITIVES
from tracer.registry import ROOT
from tracer.trace import Frame, Node, TraceFormatError, from_json, load, to_json

ROOTS = ["tests.samplefw"]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A DLTRACE_HOME of this module's own, so the C core is built here from nothing."""
    return tmp_path_factory.mktemp("ctrace-home")


@pytest.fixture()
def core(home, monkeypatch):
    monkeypatch.setenv("DLTRACE_HOME", str(home))
    monkeypatch.delenv(ENV, raising=False)
    return cbuild.load()


def rows(tree: Node) -> list[tuple]:
    return [(d, n.frame, n.count, n.call_lines, n.lines) for d, n in tree.walk()]


# ----------------------------------------------------------------------------- small patterns

def test_same_tree_as_the_python_tracer_on_every_pattern(core):
    py, c = PythonTracer(ROOTS), CTracer(core, ROOTS)
    for name, fn in PATTERNS.items():
        for _ in range(2):  # the second time from the caches
            (a, ra), (b, rb) = py.record(fn, name), c.record(fn, name)
            assert ra == rb, name
            assert rows(a) == rows(b), name
            assert a.size() > 1 or name == "user code only", name
    assert sys.gettrace() is None and sys.getprofile() is None
    assert c.sources == py.sources


def test_lines_only_where_a_framework_function_wants_them(core):
    c = CTracer(core, ROOTS)
    tree, _ = c.record(lambda: samplefw.forward(3))
    fwd = tree.children[0]
    src = c.sources[(fwd.frame.file, fwd.frame.line)]
    ran = {src[ln - fwd.frame.line].strip() for ln in fwd.lines}
    assert ran == {'if device == "gpu":', "return backend.forward_cpu(x)"}
    stats = c._core.stats()
    # forward branches (line events while it runs); forward_cpu and double do not
    assert stats["trace_switches"] >= 2 and stats["trace_events"] > 0


@dataclasses.dataclass
class DictNode:
    """Node's fields without slots: the core sets them as object.__setattr__ does."""

    frame: Frame
    count: int = 0
    time_ns: int = 0
    call_lines: list[int] = dataclasses.field(default_factory=list)
    lines: list[int] = dataclasses.field(default_factory=list)
    children: list[DictNode] = dataclasses.field(default_factory=list)


def _walk(node, depth=0):
    yield depth, node
    for kid in node.children:
        yield from _walk(kid, depth + 1)


def test_every_way_the_core_makes_nodes_gives_the_same_tree(core):
    """Node is slotted (the core stores into its slots); a Node without slots gets its
    fields through object.__setattr__; one the core cannot fill is called (fields None)."""
    assert "__slots__" in vars(Node) and "__dict__" not in dir(Node("x"))  # the fast path is the one in use
    py = PythonTracer(ROOTS)
    fields = tuple(f.name for f in dataclasses.fields(Node))
    for node_type, names in ((Node, fields), (DictNode, fields), (DictNode, None)):
        c = CTracer(core, ROOTS)
        c._core = core.Core(node_type, names)
        for name, fn in PATTERNS.items():
            (a, _), (b, _) = py.record(fn, name), c.record(fn, name)
            assert type(b) is node_type, name
            assert rows(a) == [(d, n.frame, n.count, n.call_lines, n.lines) for d, n in _walk(b)], (node_type, name)


def test_an_error_in_the_traced_code_propagates_and_removes_the_hooks(core):
    c = CTracer(core, ROOTS)
    with pytest.raises(ValueError, match="boom"):
        c.record(samplefw.failing)
    assert sys.gettrace() is None and sys.getprofile() is None
    tree, result = c.record(samplefw.catches)  # and the next recording is whole
    assert result == "caught" and [n.frame.name for _, n in tree.walk()] == ["probe", "catches", "failing"]


def test_an_error_in_the_classification_propagates(core):
    c = CTracer(core, ["tests.samplefw"])

    def broken(frame):
        raise RuntimeError("classification failed")

    c._classify_code = broken
    with pytest.raises(RuntimeError, match="classification failed"):
        c.record(lambda: samplefw.forward(1))
    assert sys.gettrace() is None and sys.getprofile() is None


# ----------------------------------------------------------------------------- the tools beside it
# (the same checks run under 3.12+ in test_the_monitoring_core_records_the_same_tree_on_python_3_12_and_newer)

def check_nested(report: dict) -> None:
    """Another core's recording inside a recording, then the same core's: refused with
    a clear error, and the outer tree has the framework call made after them."""
    assert report["errors"][0].startswith("another C collector is recording in this"), report
    assert report["errors"][1] == "record() is already running", report
    assert report["forward_calls"] == 2, report
    assert not report["hooks_left"] and report["after"] == [], report


def check_other_tools(report: dict) -> None:
    assert report["kept"] and report["kept_after_error"], report
    assert report["events_after"] > 0 and report["tree"] == [], report


def check_inside(report: dict, version: tuple[int, ...]) -> None:
    for name, case in report.items():
        assert case["left"], (name, case)
        if version < (3, 12):
            assert case["error"] and f"(sys.{name})" in case["error"], (name, case)
        else:
            assert case["error"] is None and case["forward_calls"] == 4, (name, case)


def check_release(report: dict) -> None:
    """Every code object and class the recordings made died with its step, the core's
    caches shrank back after each recording, and CTracer kept nothing per code object
    or C function."""
    assert report["made"] == [3 * collector_twins._MADE] * 2 and report["alive"] == [0, 0], report
    # code: the step's own and its comprehensions' (alive with it); C functions: the builtins it calls
    # (exec, type...); the same after each recording, not 300 more of each a step
    assert report["cached_after"][0] == report["cached_after"][-1], report
    assert max(report["cached_after"][0]) < 10, report
    assert report["python_side"] == [0, 0, 0, 0], report
    assert report["nodes"] == collector_twins._MADE + 2 and report["diffs"] == [], report  # root, <module>, f0...


def test_a_recording_inside_a_recording_is_refused(core):
    check_nested(collector_twins.nested_recording(core))


def test_another_tools_profile_and_trace_functions_are_restored(core):
    before = sys.gettrace(), sys.getprofile()
    check_other_tools(collector_twins.other_tools_hooks(core))
    assert (sys.gettrace(), sys.getprofile()) == before


def test_a_step_that_sets_its_own_hooks_gets_an_error_not_a_crash(core):
    check_inside(collector_twins.hooks_set_inside(core), sys.version_info[:2])
    assert sys.gettrace() is None and sys.getprofile() is None


def test_code_objects_and_classes_are_released_when_their_recordings_end(core):
    check_release(collector_twins.code_release(core))


# ----------------------------------------------------------------------------- 3.12+: sys.monitoring
# Runs wherever the tests run: the CPython 3.12+ it needs is found on PATH or among
# pyenv's versions; where there is none, the test fails naming what is missing.

#: The newer CPythons looked for by name on PATH (the 3.12+ core's interpreters).
MONITORING_NAMES = ("python3.12", "python3.13", "python3.14")


def _pyenv_versions() -> list[Path]:
    """pyenv's installed versions, whether or not pyenv itself is on PATH (a shell that
    did not run ``pyenv init``): its root as pyenv says, else $PYENV_ROOT, else ~/.pyenv."""
    roots = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        proc = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30)
        roots.append(proc.stdout.strip())
    roots += [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    return [Path(root) / "versions" for root in dict.fromkeys(filter(None, roots))]


def _monitoring_python() -> tuple[str | None, list[str]]:
    """A CPython 3.12 or newer on this machine, whose C core takes its events from
    sys.monitoring instead of profile and trace functions; and where it was looked for."""
    places = [f"{', '.join(MONITORING_NAMES)} on PATH"]
    found = [shutil.which(name) for name in MONITORING_NAMES]
    for versions in _pyenv_versions():
        places.append(f"pyenv's {versions}/3.1[2-9]*")
        found += sorted(glob.glob(f"{versions}/3.1[2-9]*/bin/python3"))
    check = "import sys; assert sys.implementation.name == 'cpython' and sys.version_info >= (3, 12)"
    for python in filter(None, found):
        if subprocess.run([python, "-c", check], capture_output=True, timeout=60).returncode == 0:
            return python, places
    return None, places


@pytest.fixture(scope="module")
def monitoring_venv(tmp_path_factory) -> Path:
    """A virtual environment of a 3.12+ interpreter with what the sample framework
    imports besides the standard library (markupsafe, at this environment's version).
    Without such an interpreter the test fails, saying what is missing: the 3.12+
    front-end is half of the core, and a skip would hide that it went unchecked."""
    python, places = _monitoring_python()
    if python is None:
        pytest.fail(f"no CPython 3.12 or newer found (looked for {'; '.join(places)}): the C core's sys.monitoring "
                    "front-end cannot be checked; install one (e.g. `pyenv install 3.12`) or put python3.12 on PATH")
    venv = tmp_path_factory.mktemp("py312") / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          f"markupsafe=={importlib.metadata.version('markupsafe')}"], capture_output=True, text=True)
    assert pip.returncode == 0, f"{python}: cannot install markupsafe for the sample framework: {pip.stderr[-2000:]}"
    return venv


def test_a_missing_newer_python_is_named(monkeypatch, tmp_path):
    """Where no 3.12+ is found, the places looked in are said (the fixture fails with them)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setenv("HOME", str(tmp_path))
    python, places = _monitoring_python()
    assert python is None
    assert places[0].startswith("python3.12, python3.13") and any(str(tmp_path / "pyenv") in p for p in places)


def test_the_monitoring_core_records_the_same_tree_on_python_3_12_and_newer(monitoring_venv, home, tmp_path):
    """Every pattern under a newer interpreter, where the core's events come from
    sys.monitoring (the Python collector's from sys.setprofile/settrace, which 3.12
    builds on sys.monitoring too); and a failing step leaves no hook behind."""
    (tmp_path / "req.json").write_text(json.dumps({"patterns": True}))
    env = {**runner_env_base(), "DLTRACE_HOME": str(home)}
    proc = subprocess.run([str(monitoring_venv / "bin" / "python"), str(ROOT / "tests" / "collector_twins.py"),
                           str(tmp_path / "req.json")], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert tuple(map(int, report["python"].split(".")[:2])) >= (3, 12)
    assert len(report["cases"]) == 2 * len(PATTERNS)
    for case in report["cases"]:
        assert case["diffs"] == [] and case["same_result"], case
    assert sum(c["nodes"] for c in report["cases"]) > 2 * len(PATTERNS)
    assert report["same_sources"]
    assert report["error"] == "boom" and not report["hooks_left"] and report["after_error"] == []
    assert report["classification_error"] == "classification failed"
    check_nested(report["nested"])
    check_other_tools(report["other_tools"])
    check_inside(report["inside"], tuple(map(int, report["python"].split(".")[:2])))
    check_release(report["release"])
    assert any(p.name.endswith(".so") and "-py3.1" in p.name and "-py3.11" not in p.name
               for p in (home / "ext").iterdir())  # built for that interpreter


# ----------------------------------------------------------------------------- the stub

def test_the_stub_matches_the_built_module(core, monkeypatch, capsys):
    """tracer/collect/_ctrace.pyi, which mypy reads for ctracer.py, against the module
    itself (mypy's stubtest: names, classes, methods and their parameters)."""
    from mypy import stubtest

    monkeypatch.setitem(sys.modules, cbuild.MODULE, core)  # the build lives outside the package
    monkeypatch.chdir(ROOT)
    code = stubtest.test_stubs(stubtest.parse_options([cbuild.MODULE]))
    assert code == 0, capsys.readouterr().out[-3000:]


# ----------------------------------------------------------------------------- choice and fallback

def test_the_c_core_is_chosen_where_it_builds(core):
    tracer = python_tracer(ROOTS)
    assert isinstance(tracer, CTracer) and tracer.collector == {"python": "c"}
    assert cbuild.target().exists()


def test_no_compiler_falls_back_to_the_python_tracer_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.delenv(ENV, raising=False)
    tracer = python_tracer(ROOTS)
    assert type(tracer) is PythonTracer
    assert tracer.collector["python"] == "python" and "no C compiler" in tracer.collector["why"]
    tree, _ = tracer.record(lambda: samplefw.forward(1))
    assert tree.children[0].frame.name == "forward"
    monkeypatch.setenv(ENV, "c")  # asked for explicitly, it is an error instead
    with pytest.raises(CollectorError, match="no C compiler"):
        python_tracer(ROOTS)


def test_a_source_that_does_not_compile_falls_back(tmp_path, monkeypatch):
    bad = tmp_path / "ctrace"
    shutil.copytree(cbuild.SOURCES, bad)
    (bad / "record.c").write_text('#include "ctrace.h"\nthis is not C;\n')
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path))
    monkeypatch.setattr(cbuild, "SOURCES", bad)
    with pytest.raises(cbuild.Unavailable, match=r"compiling ctrace/ failed \(into .*\): .*record.c.*error"):
        cbuild.load()
    assert not list((tmp_path / "ext").glob("*.so")) and not list((tmp_path / "ext").glob(".ctrace-*"))


def test_a_full_disk_falls_back_naming_the_folder(tmp_path, monkeypatch):
    """The build cannot be put in place (ENOSPC) and its temporary file cannot be
    removed either: one reason naming the file, nothing left half-written, and the
    probe records with the Python collector."""
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path))
    monkeypatch.delenv(ENV, raising=False)

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cbuild.os, "replace", full)
    unlink = os.unlink
    monkeypatch.setattr(cbuild.os, "unlink", full)
    with pytest.raises(cbuild.Unavailable, match=f"cannot write {tmp_path}/ext/_ctrace-.*: No space left on device"):
        cbuild.build()
    monkeypatch.setattr(cbuild.os, "unlink", unlink)
    tracer = python_tracer(ROOTS)
    assert type(tracer) is PythonTracer and "No space left on device" in tracer.collector["why"]
    assert not list((tmp_path / "ext").glob("_ctrace-*"))


def test_the_build_is_named_by_every_source_file(tmp_path, monkeypatch):
    """A changed header, or a file added, names another build: none is loaded for
    sources it was not compiled from."""
    copy = tmp_path / "ctrace"
    shutil.copytree(cbuild.SOURCES, copy)
    monkeypatch.setattr(cbuild, "SOURCES", copy)
    names = {cbuild.target().name}
    with (copy / "ctrace.h").open("a") as fh:
        fh.write("/* changed */\n")
    names.add(cbuild.target().name)
    (copy / "extra.c").write_text("/* added */\n")
    names.add(cbuild.target().name)
    assert len(names) == 3


def test_collector_variable(monkeypatch):
    monkeypatch.setenv(ENV, "python")
    tracer = python_tracer(ROOTS)
    assert type(tracer) is PythonTracer and tracer.collector == {"python": "python", "why": f"{ENV}=python"}
    monkeypatch.setenv(ENV, "fast")
    with pytest.raises(CollectorError, match="choose one of c, python or auto"):
        python_tracer(ROOTS)


def test_env_setup_builds_it_with_the_environments_interpreter(home, monkeypatch, frameworks):
    monkeypatch.setenv("DLTRACE_HOME", str(home))
    logged: list[str] = []
    assert envs.build_collector(frameworks["torch"], Path(sys.executable), logged.append)
    assert "C collector ready" in logged[0]
    proc = subprocess.run([sys.executable, "-m", "tracer.collect.cbuild"], capture_output=True, text=True,
                          cwd=ROOT, env={"DLTRACE_HOME": str(home), "CC": "/no/such/cc", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout  # built already: nothing to compile


def test_trace_meta_collector_is_validated():
    doc = {"format": "dltrace-trace", "version": 1, "frames": [], "runs": [],
           "meta": {"framework": "f", "primitive": "p", "api": "functional", "device": "cpu"}}
    for ok in ({"python": "c"}, {"python": "python", "why": "no C compiler"}):
        assert from_json({**doc, "meta": {**doc["meta"], "collector": ok}}).meta["collector"] == ok
    for bad, message in (({"python": "rust"}, "meta.collector.python"), ({"python": "python", "why": 3}, "why"),
                         ("c", "meta.collector must be dict")):
        with pytest.raises(TraceFormatError, match=message):
            from_json({**doc, "meta": {**doc["meta"], "collector": bad}})


# ----------------------------------------------------------------------------- real frameworks

#: Two primitives per framework, both API levels, forward and backward; MXNet for its
#: ctypes hand-offs, where its environment is ready.
REAL = {"torch": ("conv2d", "batchnorm"), "chainer": ("conv2d", "relu"), "mxnet": ("dense", "relu"),
        "tensorflow": ("dense", "batchnorm"), "jax": ("conv2d", "softmax")}


@pytest.mark.parametrize("name", list(REAL))
def test_same_tree_on_real_framework_steps(name, frameworks, tmp_path):
    fw = frameworks[name]
    if not envs.status(fw).ready:
        pytest.fail(f"{name}: environment not set up (dltrace env setup {name})")
    prims = REAL[name]
    req = {"import": fw.import_name, "probe": fw.probe, "device_select": fw.devices["cpu"],
           "source_roots": list(fw.source_roots), "primitives": list(prims), "apis": list(fw.apis),
           "shapes": {p: list(PRIMITIVES[p].shape) for p in prims}}
    (tmp_path / "req.json").write_text(json.dumps(req))
    proc = subprocess.run([str(envs.python_for(fw)), str(ROOT / "tests" / "collector_twins.py"),
                           str(tmp_path / "req.json")], capture_output=True, text=True, timeout=600,
                          env=runner_env(fw), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = json.loads(proc.stdout.splitlines()[-1])["cases"]
    assert len(cases) == len(prims) * len(fw.apis) * 2
    for case in cases:
        assert case["diffs"] == [], case
        assert case["attempts"] == 1, case  # agreed on the first recording
    assert sum(c["nodes"] for c in cases) > 50 and sum(c["lines"] for c in cases) > 50


def runner_env_base() -> dict[str, str]:
    """This process's environment, with the repository importable (tests.samplefw,
    tracer.collect) and no collector forced."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = str(ROOT)
    return env


def runner_env(fw) -> dict[str, str]:
    return {**runner_env_base(), **fw.env}


def test_probes_record_the_same_trees_with_either_collector(frameworks, tmp_path):
    """Through the harness, in separate processes, cold runs included; the trace says
    which collector ran, and why not C where the core cannot be built."""
    fw = frameworks["chainer"]
    if not envs.status(fw).ready:
        pytest.fail("chainer: environment not set up (dltrace env setup chainer)")
    spec = runner.CaseSpec("relu", layers=("python",))
    traces = {}
    for mode, extra in {"c": {ENV: "c"}, "python": {ENV: "python"},
                        "no-compiler": {"DLTRACE_HOME": str(tmp_path / "empty"), "CC": "/no/such/cc"}}.items():
        probe_fw = dataclasses.replace(fw, env={**fw.env, **extra})  # the probe process's environment only
        (res,) = runner.run_probe(probe_fw, [spec], tmp_path / mode)
        assert res.error is None, res.error
        traces[mode] = load(res.path)
    assert traces["c"].meta["collector"] == {"python": "c"}
    assert traces["python"].meta["collector"] == {"python": "python", "why": f"{ENV}=python"}
    assert traces["no-compiler"].meta["collector"]["python"] == "python"
    assert "no C compiler" in traces["no-compiler"].meta["collector"]["why"]
    assert from_json(to_json(traces["c"])).meta["collector"] == {"python": "c"}
    for mode in ("python", "no-compiler"):
        for a, b in zip(traces["c"].runs, traces[mode].runs):
            assert (a.pass_, a.phase) == (b.pass_, b.phase)
            assert rows(a.layers["python"]) == rows(b.layers["python"]), (mode, a.pass_, a.phase)


def test_a_relative_dltrace_home_names_the_same_folder_in_the_probe(fake_frameworks, tmp_path):
    home = tmp_path / "rel-home"
    home.mkdir()
    shutil.copy(Path(fake_frameworks["DLTRACE_HOME"]) / "external.json", home / "external.json")
    out = tmp_path / "t.json"
    proc = dltrace("probe", "crashy", "batchnorm", "--layers", "python", "-o", str(out),
                   env={**fake_frameworks, "DLTRACE_HOME": "rel-home"}, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    collector = load(out).meta["collector"]
    # the C core was built in rel-home/ext as the probe saw it, not in the probe's own (removed) folder
    assert collector == {"python": "c"} and list((home / "ext").glob("_ctrace-*")), collector


def test_the_c_core_build_on_a_full_disk_falls_back_with_the_path(tmp_path, monkeypatch):
    from tracer.collect import cbuild

    # a compiler that meets a full disk: it says so, removes its output and fails (as gcc does)
    cc = _script(tmp_path / "cc", 'for a; do [ "$prev" = -o ] && rm -f "$a"; prev=$a; done\n'
                                  'echo "fatal error: error writing to /tmp/ccX.s: No space left on device" >&2\n'
                                  'exit 1\n')
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path / "home"))
    with pytest.raises(cbuild.Unavailable, match=r"failed \(into .*home/ext\): .*No space left on device"):
        cbuild.build(force=True)
    assert not list((tmp_path / "home" / "ext").iterdir())  # nothing half-built left
    # a home that cannot be written at all: the path is named
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "ext").write_text("a file where the folder goes")
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path / "ro"))
    with pytest.raises(cbuild.Unavailable, match=r"cannot write .*ro/ext"):
        cbuild.build(force=True)


# ----------------------------------------------------------------------------- the emulated guest's core


def _guest_root(root: Path, cc: str = "aarch64-linux-gnu-gcc") -> Path:
    """The two files of a Debian arm64 root the cross build reads, as Debian writes them."""
    lib = root / "usr/lib/python3.11"
    lib.mkdir(parents=True)
    (lib / "_sysconfigdata__aarch64-linux-gnu.py").write_text(
        f"# system configuration generated and used by the sysconfig module\n"
        f"build_time_vars = {{'CC': '{cc}', 'EXT_SUFFIX': '.cpython-311-aarch64-linux-gnu.so', 'VERSION': '3.11'}}\n")
    inc = root / "usr/include/python3.11"
    inc.mkdir(parents=True)
    (inc / "patchlevel.h").write_text('#define PY_MINOR_VERSION 11\n#define PY_VERSION "3.11.2"\n')
    return root


def test_the_guests_build_is_named_as_the_guest_names_it(tmp_path, monkeypatch):
    from tracer.emulation import core as guest_core

    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path / "home"))
    root = _guest_root(tmp_path / "root")
    assert guest_core.guest_config(root) == {"CC": "aarch64-linux-gnu-gcc",
                                             "EXT_SUFFIX": ".cpython-311-aarch64-linux-gnu.so", "version": "3.11.2"}
    # what cbuild.target() gives inside the guest: its version and suffix, the same source hash
    cfg = guest_core.guest_config(root)
    assert cbuild.target(cfg["version"], cfg["EXT_SUFFIX"]).name == \
        f"_ctrace-{cbuild._digest()}-py3.11.2.cpython-311-aarch64-linux-gnu.so"
    # no cross compiler: one line naming the Debian package; no headers: the package the root lacks
    with pytest.raises(cbuild.Unavailable, match="no cross compiler for the guest: no-such-gcc not found"):
        guest_core.build(_guest_root(tmp_path / "nocc", cc="no-such-gcc"))
    (root / "usr/include/python3.11/patchlevel.h").unlink()
    with pytest.raises(cbuild.Unavailable, match="no Python headers for the guest .*libpython3.11-dev"):
        guest_core.build(root)
    with pytest.raises(cbuild.Unavailable, match="build settings are missing"):
        guest_core.build(tmp_path / "empty")


@pytest.mark.frameworks
def test_an_emulated_guest_records_with_the_cross_built_core(frameworks, tmp_path):
    """Under QEMU the guest loads the core the host cross-compiled (it has no compiler),
    and its trees are the pure-Python collector's, node by node."""
    from tracer import emulation

    fw = frameworks["chainer"]
    if emulation.status(fw.name) is None:
        pytest.fail("chainer: emulated environment not set up (dltrace env setup chainer --arch aarch64)")
    specs = [runner.CaseSpec(p, layers=("python",)) for p in ("conv2d", "relu")]
    traces = {}
    for mode in ("c", "python"):
        probe_fw = dataclasses.replace(fw, env={**fw.env, ENV: mode})
        results = runner.run_probe(probe_fw, specs, tmp_path / mode, cpu="neoverse-n1")
        assert all(r.error is None for r in results), [r.error for r in results]
        traces[mode] = [load(r.path) for r in results]
    assert all(t.meta["collector"] == {"python": "c"} for t in traces["c"])
    assert all(t.meta["emulated"]["cpu"] == "neoverse-n1" for t in traces["c"])
    nodes = 0
    for a, b in zip(traces["c"], traces["python"]):
        for ra, rb in zip(a.runs, b.runs):
            assert (ra.pass_, ra.phase) == (rb.pass_, rb.phase)
            assert rows(ra.layers["python"]) == rows(rb.layers["python"]), (a.meta.get("primitive"), ra.pass_)
            nodes += len(rows(ra.layers["python"]))
    assert nodes > 200
