"""Shared, session-scoped traces of the real frameworks.

One real survey (every framework, primitive, API level and CPU variant) runs once
per test session, through the same engine as `dltrace survey`; every test reads
its traces, and the report tests render and open its report. Tracing is the slow
part, so no test re-runs a probe that the survey already ran.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tracer import envs, registry
from tracer import survey as sv
from tracer.contract import LAYERS, MODELS, PRIMITIVES, Exit
from tracer.gap import GAP_SUFFIX, load_gap
from tracer.registry_entries import Framework
from tracer.runner import CaseResult, CaseSpec
from tracer.trace import Frame, Node, Run, Trace, save

DLTRACE = str(Path(sys.executable).parent / "dltrace")


def dltrace(*args: str, env: dict | None = None, timeout: float = 900,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `dltrace` command."""
    return subprocess.run([DLTRACE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, stdin=subprocess.DEVNULL, cwd=cwd)


def model_losses(fw: Framework, cases: list[tuple[str, str]], steps: int) -> dict[str, list[float]]:
    """The losses of ``steps`` real training steps of each (model, api) case, run in
    ``fw``'s environment by tests/model_losses.py: {"MODEL-API": [losses]}."""
    from tests.test_ctrace import runner_env  # a test module that itself reads this conftest's fixtures

    proc = subprocess.run([str(envs.python_for(fw)), str(Path(__file__).with_name("model_losses.py")), fw.probe,
                           fw.devices["cpu"], str(steps), *(f"{m}:{a}" for m, a in cases)],
                          capture_output=True, text=True, timeout=600, env=runner_env(fw))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def one_line_error(proc: subprocess.CompletedProcess, code: int = Exit.ERROR) -> str:
    """Assert that the command failed with exactly one `dltrace: error:` line and exit
    status ``code`` (Exit.USAGE for a command line asking for what does not exist); return it."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dltrace: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


FAKE_REGISTRY = """
frameworks:
  crashy:
    import: json
    version: "0"
    probe: tests.crashprobe
    install: [{requirements: [nothing]}]
    devices: {cpu: cpu, gpu: gpu}
    source_roots: [json]
    apis: [functional]
  broken:
    import: no_such_framework
    version: "0"
    probe: tests.crashprobe
    install: [{requirements: [nothing]}]
    devices: {cpu: cpu}
    source_roots: [json]
    apis: [functional]
  absent:
    import: json
    version: "0"
    probe: tests.crashprobe
    install: [{requirements: [nothing]}]
    devices: {cpu: cpu}
    source_roots: [json]
    apis: [functional]
"""


@pytest.fixture(scope="session")
def fake_frameworks(tmp_path_factory) -> dict[str, str]:
    """Environment variables for a dltrace whose registry holds three fake frameworks
    (tests/crashprobe.py): crashy (segfaults, hangs, raises), broken (its interpreter
    cannot import it) and absent (never set up)."""
    home = tmp_path_factory.mktemp("home")
    reg = home / "frameworks.yaml"
    reg.write_text(FAKE_REGISTRY)
    # their probe, tests.crashprobe, is no part of the package: the probe process finds
    # it on the PYTHONPATH it inherits (after the package's own folder)
    project = str(Path(__file__).resolve().parent.parent)
    env = {"DLTRACE_HOME": str(home), "DLTRACE_REGISTRY": str(reg),
           "PYTHONPATH": os.pathsep.join(p for p in (project, os.environ.get("PYTHONPATH")) if p)}
    proc = dltrace("env", "use", "crashy", sys.executable, env=env)
    assert proc.returncode == 0, proc.stderr
    # "broken": an interpreter that cannot import its framework (`env use` refuses
    # to record one, so it is written directly, as a broken upgrade would leave it)
    (home / "external.json").write_text(json.dumps({"crashy": sys.executable, "broken": sys.executable}))
    return env


@pytest.fixture(scope="session")
def frameworks() -> dict[str, Framework]:
    return registry.load()


#: Native stacks cost seconds per case, so they are sampled only where tests read them,
#: inside the survey's own probe runs: one extra conv2d case per torch/tensorflow/mxnet
#: job, at a shape where the kernel is a visible share of the step (at the default
#: 2x3x8x8 the convolution is ~14k MACs: TensorFlow's kernel was in 3 of 85 samples,
#: MXNet's oneDNN execute in 1 of 131; the dispatch around it is the rest), and the
#: default-shape conv2d of jax and chainer (default variant).
NATIVE_SHAPE = (4, 8, 32, 32)
# TensorFlow's eager runtime takes most of a 4x8x32x32 step, and its kernel was missing
# from some runs' 26 samples: a bigger input makes the convolution dominate. (Not for
# torch: there torch's slow-path gemm consults at::native::mkldnn_reduced_f32_gemm,
# which the onednn-off test would count as oneDNN.)
NATIVE_SHAPES = {"tensorflow": (8, 16, 64, 64)}
NATIVE_KERNEL_FRAMEWORKS = ("torch", "tensorflow", "mxnet")


def native_case(job: sv.Job) -> CaseSpec | None:
    """The case of ``job`` whose trace has a native layer, if any."""
    if job.framework.name in NATIVE_KERNEL_FRAMEWORKS:
        return CaseSpec("conv2d", "functional", NATIVE_SHAPES.get(job.framework.name, NATIVE_SHAPE), layers=LAYERS)
    if job.variant == "default":
        return CaseSpec("conv2d", "functional", layers=LAYERS)
    return None


def with_native(jobs: list[sv.Job]) -> list[sv.Job]:
    out = []
    for job in jobs:
        nat = native_case(job)
        cases = [c for c in job.cases if nat is None or c.slug() != nat.slug()]
        out.append(dataclasses.replace(job, cases=tuple(cases + ([nat] if nat else []))))
    return out


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder ``build`` fills once per test run. Under pytest-xdist (`make test` runs
    two workers) each worker has its own session, so a session fixture would run once
    per worker: the first worker that asks builds the folder, in the run's shared base
    folder, and the others wait on a lock, then read it."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    base = tmp_path_factory.getbasetemp().parent  # popen-gw0's parent: one per run
    folder, done = base / name, base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes, by an assertion's exception too
        if not done.exists():
            folder.mkdir(exist_ok=True)
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def survey_root(frameworks, tmp_path_factory) -> Path:
    """A CPU survey of all five frameworks with their variants (traces only), with the
    op layer everywhere and the native layer in the cases :func:`native_case` names."""
    def build(root: Path) -> None:
        gaps = sv.run(with_native(sv.plan(frameworks.values(), models=MODELS)), root, workers=2, timeout=900)
        unexpected = [g for g in gaps if not precision_gap(frameworks, g) and not standin_gap(g)]
        assert not unexpected, [f"{g.framework} {g.variant} {g.primitive} {g.api}: {g.error}" for g in unexpected]

    return once_per_run(tmp_path_factory, "survey", build)


def standin_gap(gap) -> bool:
    """A case TensorFlow's stand-in cannot run because its step takes an op on a resource
    that is no variable (a hash table, a dataset; a variable's ops it runs): a gap that
    says so, by design (tracer/probes/tensorflow_standin.py)."""
    return gap.device == "standin" and "takes a resource" in gap.error


def precision_gap(frameworks, gap) -> bool:
    """A case a reduced-precision variant cannot run because the framework has no CPU
    kernel in that type (MXNet's batch_dot in bfloat16): a gap that says so, by design."""
    variant = frameworks[gap.framework].variants.get(gap.variant)
    return variant is not None and variant.switches == "precision" and "float16" in gap.error


@pytest.fixture(scope="session")
def cpu_traces(frameworks, survey_root) -> dict[tuple[str, str, str, str], CaseResult]:
    """(framework, variant, primitive, api) -> the survey's trace of it."""
    out = {}
    for job in sv.plan(frameworks.values(), models=MODELS):
        for spec in job.cases:
            path = sv.case_path(survey_root, job, spec)
            gap = path.with_name(path.name[: -len(".json")] + GAP_SUFFIX)
            if not path.exists() and gap.exists() and (precision_gap(frameworks, load_gap(gap))
                                                       or standin_gap(load_gap(gap))):
                continue  # no kernel in that type, by design: the gap says so (test_transformer_prims_*)
            if not path.exists() and job.repeats:
                continue  # the default path on this CPU, not traced twice (sv.run; test_survey checks it)
            out[(job.framework.name, job.variant, spec.primitive, spec.api)] = CaseResult(
                spec, path if path.exists() else None, None if path.exists() else "no trace")
    return out


@pytest.fixture(scope="session")
def native_traces(frameworks, survey_root) -> dict[tuple[str, str], CaseResult]:
    """(framework, variant) -> the survey's trace with a native layer."""
    out = {}
    for job in sv.plan(frameworks.values()):
        spec = native_case(job)
        if spec is not None:
            path = sv.case_path(survey_root, job, spec)
            if not path.exists() and job.repeats:
                continue  # the default path on this CPU, not traced twice
            out[(job.framework.name, job.variant)] = CaseResult(spec, path if path.exists() else None,
                                                                None if path.exists() else "no trace")
    return out


@pytest.fixture(scope="session")
def survey_report(frameworks, survey_root, tmp_path_factory) -> Path:
    """`dltrace survey` over the finished survey: every case is reused, then the report is
    rendered (--no-native: the session survey samples native stacks only where tests read them)."""
    def build(_: Path) -> None:
        # the emulated ARM jobs, the stand-in device, the derived evidence and the report: minutes
        proc = dltrace("survey", "--no-native", "--no-examples", "-o", str(survey_root), timeout=2400)
        assert proc.returncode == 0, proc.stderr
        cases = 2 * len(PRIMITIVES) + sum(len(MODELS[m].apis) for m in frameworks["torch"].models)  # two levels
        assert f"torch/cpu-default: {cases} cases, {cases} reused" in proc.stderr

    once_per_run(tmp_path_factory, "survey-report", build)
    return survey_root / "index.html"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Apply the `frameworks` marker to every test whose fixtures reach the `frameworks`
    fixture (every fixture that runs a real framework asks for it), so that
    `make test-fast` (``-m "not frameworks and not slow"``) runs the tier that needs
    no framework environment: synthetic traces, format, registry, diff, render, errors."""
    for item in items:
        if "frameworks" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.frameworks)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With DLTRACE_TEST_TIMELINE=FILE, one JSON line per test phase (worker, test, phase,
    start and stop, epoch seconds): where each worker spent the run and where it waited
    (docs/development.md). Written by the controller, which hears every worker's reports."""
    path = os.environ.get("DLTRACE_TEST_TIMELINE")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    line = {"worker": getattr(gateway, "id", "main"), "test": report.nodeid, "phase": report.when,
            "start": round(report.start, 3), "stop": round(report.stop, 3), "outcome": report.outcome}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """End a test's helper processes (a fleet's scheduler and workers), last started first:
    asked to stop, then killed after 20 s."""
    for p in reversed(procs):
        p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def skeleton_ops(folder: Path) -> dict[str, list[str]]:
    """A backend skeleton's ops.txt: op -> the passes that reached it."""
    rows = [line.split() for line in (folder / "ops.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return {op: passes.split(",") for op, passes in rows}


def edited_skeleton(skeleton: Path, tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of ``skeleton`` (without its build) whose ``file`` has ``old`` replaced by ``new``."""
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(skeleton, copy, ignore=shutil.ignore_patterns("build"))
    target = copy / file
    text = target.read_text()
    assert old in text, old
    target.write_text(text.replace(old, new))
    return copy



def assert_tls_refused(address: str, ca: Path, pair: tuple[Path, Path] | None) -> None:
    """A TLS client of the scheduler at ``address`` (tls://HOST:PORT) that trusts ``ca``
    and shows the certificate and key ``pair`` (None: no certificate) is refused, and
    plain TCP there gets no Dask scheduler."""
    import socket
    import ssl

    import distributed

    host, port = address.removeprefix("tls://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    if pair:
        ctx.load_cert_chain(str(pair[0]), str(pair[1]))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"\x00" * 8)
                if not tls.recv(8):  # TLS 1.3: the refusal of the certificate arrives with the first read
                    raise ConnectionError("closed")
    with pytest.raises(Exception):
        distributed.Client(address.replace("tls://", "tcp://"), timeout=5, set_as_default=False)


#: The meta of the synthetic samplefw traces that write_pair saves (and tests that build their own).
META = {"framework": "samplefw", "framework_version": "1.0", "primitive": "conv2d", "api": "functional",
        "device": "cpu", "variant": "default", "shape": [2, 3, 8, 8], "machine": {"arch": "x86_64", "cpu": "test"}}


def op(name: str, *children: Node) -> Node:
    return Node(Frame("op", "aten", name), 1, 1000, children=list(children))


def write_pair(folder: Path, a_kernel: str, b_kernel: str, **meta) -> tuple[Path, Path]:
    """A default and a variant trace of one case whose op layers part below a shared op."""
    paths = []
    folder.mkdir(parents=True, exist_ok=True)
    for variant, kernel in (("default", a_kernel), ("fast", b_kernel)):
        tree = Node(Frame("root", "", "conv2d.forward"), 1, 3000,
                    children=[op("aten::conv2d", op("aten::_convolution", op(kernel)))])
        path = folder / f"{variant}.json"
        save(Trace({**META, "variant": variant, **meta}, [Run("forward", "warm", {"op": tree}, {"untraced_s": 1e-4})]),
             path)
        paths.append(path)
    return paths[0], paths[1]


#: Under this address-space limit (set in the child), reading what a file claims
#: instead of what it is allowed to be is a MemoryError, not an exhausted machine.
MEMORY_LIMIT = 4 << 30


def _limited(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`dltrace ARGS` with its address space limited to MEMORY_LIMIT."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    return subprocess.run([DLTRACE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=limit)
