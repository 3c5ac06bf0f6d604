"""Derived GPU evidence on this machine, without a GPU (`dltrace derive`): TensorFlow's
GPU build's kernel registry, JAX's lowering (and XLA's deviceless CUDA compile) for
conv, Chainer's forward_gpu source, and the audit's must-implement lists built on them.

One derivation per framework (conv2d, functional API) for the whole module: each is a
probe process in the framework's environment (tensorflow's in tensorflow-gpu-build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import dltrace
from tracer import registry
from tracer.data_file import RegistryError
from tracer.contract import Exit
from tracer.evidence_classes import DERIVED_EVIDENCE
from tracer.derive import derive
from tracer.runner import CaseSpec, probe_one
from tracer.knowledge import knowledge
from tracer.trace import Node, Trace, save

K = knowledge()


@pytest.fixture(scope="module")
def derived(frameworks, tmp_path_factory) -> dict[str, Trace]:
    """framework -> its conv2d (functional) GPU-evidence trace; the folder also holds
    MXNet's CPU conv2d trace (MXNet derives none: its audit reads the op layer)."""
    root = tmp_path_factory.mktemp("derived")
    fws = registry.load()
    out = {}
    for name in ("tensorflow", "jax", "chainer"):
        (res,) = derive(fws[name], ["conv2d"], root / name, ("functional",))
        assert res.error is None, res.error
        out[name] = res.load()
    mx = probe_one(fws["mxnet"], CaseSpec("conv2d", layers=("python", "op")))
    (root / "mxnet").mkdir()
    save(mx, root / "mxnet" / "conv2d-functional.json")
    out["root"] = root  # type: ignore[assignment]
    return out


def _op(trace: Trace, pass_: str, name: str) -> Node:
    run = trace.run(pass_, "warm")
    assert run is not None and "op" in run.layers, [r.pass_ for r in trace.runs]
    found = [n for n in run.layers["op"].children if n.frame.name == name]
    assert found, [n.frame.name for n in run.layers["op"].children]
    return found[0]


def test_derived_traces_say_gpu_and_their_evidence(derived):
    for name in ("tensorflow", "jax", "chainer"):
        t = derived[name]
        assert t.meta["framework"] == name  # not the GPU build's environment name
        assert t.meta["device"] == "gpu"
        assert t.meta["evidence"] in DERIVED_EVIDENCE
        assert t.meta["provenance"]["ran_on_gpu"] is False
        assert t.meta["provenance"]["read"]
        assert [r.pass_ for r in t.runs] == ["forward", "backward"]


def test_tensorflow_gpu_build_registers_conv2d_for_gpu(derived):
    t = derived["tensorflow"]
    assert t.meta["evidence"] == "registered"
    assert "kernel registry" in t.meta["provenance"]["read"]
    conv = _op(t, "forward", "Conv2D")
    gpu = [k.frame.name for k in conv.children]
    assert any(k.startswith("GPU Conv2D [") and "float32" in k for k in gpu), gpu
    back = _op(t, "backward", "Conv2DBackpropInput")
    assert any("host_memory=input_sizes" in k.frame.name for k in back.children), [k.frame.name for k in back.children]
    assert t.meta["backend"]["passes"]["forward"]["Conv2D"]["must"] is True


def test_jax_lowers_conv_for_cuda_with_its_own_rule(derived):
    t = derived["jax"]
    conv = _op(t, "forward", "conv_general_dilated")
    cuda = [k for k in conv.children if k.frame.name.startswith("cuda: ")]
    assert len(cuda) == 1 and "(cuda-specific)" in cuda[0].frame.name, [k.frame.name for k in conv.children]
    assert "stablehlo.convolution" in [h.frame.name for h in cuda[0].children]
    # the whole step's StableHLO for cuda and rocm is cpu's text: the split is in XLA's compilers
    assert t.meta["gpu_evidence"]["stablehlo_same_as_cpu_forward"] == ["cuda", "rocm"]


def test_jax_compiles_conv_for_a_gpu_without_one(derived):
    t = derived["jax"]
    assert t.meta["evidence"] == "compiled", t.meta["gpu_evidence"]
    for pass_, target in (("forward", "__cudnn$conv"), ("backward", "__cudnn$convBackwardFilter")):
        xla = _op(t, pass_, "XLA:cuda (compiled deviceless, H100 target)")
        # each instruction under the jaxpr primitive it came from
        calls = [k for p in xla.children for k in p.children if k.frame.name.startswith("custom-call:")]
        assert any(target in k.frame.name and k.frame.lib == "cuDNN" for k in calls), \
            [(p.frame.name, [k.frame.name for k in p.children]) for p in xla.children]


def test_chainer_convolution_forward_gpu_calls_cudnn(derived):
    t = derived["chainer"]
    assert t.meta["evidence"] == "source"
    conv = _op(t, "forward", "Convolution2DFunction")
    methods = {m.frame.name: m for m in conv.children}
    assert "Convolution2DFunction.forward_gpu" in methods, list(methods)
    decision = [c.frame.name for c in methods["Convolution2DFunction.forward_gpu"].children]
    assert "chainer.should_use_cudnn" in decision
    cudnn = {c.frame.name: c.frame.lib for c in methods["Convolution2DFunction._forward_cudnn"].children}
    assert cudnn.get("cuda.cudnn.convolution_forward") == "cuDNN", cudnn
    # the CPU path, beside it: NumPy (or iDeep) where the GPU path has CuPy and cuDNN
    assert "numpy.tensordot" in t.meta["gpu_evidence"]["forward_cpu_calls_forward"]["Convolution2DFunction"]


@pytest.mark.parametrize("framework, forward, backward", [
    ("tensorflow", "Conv2D", "Conv2DBackpropFilter"),
    ("jax", "stablehlo.convolution", "stablehlo.reverse"),
    ("chainer", "Convolution2DFunction.forward_gpu", "Convolution2DGradW.forward_gpu"),
    ("mxnet", "Convolution", None),
])
def test_audit_prints_the_must_implement_list(derived, framework, forward, backward):
    root: Path = derived["root"]  # type: ignore[assignment]
    proc = dltrace("audit", framework, "--traces", str(root / framework), env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert f"{framework}: what a new backend must implement, per primitive and pass" in text
    rows = [line for line in text.splitlines() if "│ conv2d" in line]
    assert any("forward" in row and forward in row for row in rows), text
    if backward:
        after = text.split("│ conv2d    │ backward", 1)
        assert len(after) == 2 and backward in after[1], text


@pytest.mark.parametrize("framework, evidence, op", [
    ("jax", "compiled", "stablehlo.convolution"),
    ("chainer", "source", "Convolution2DFunction.forward_gpu"),
    ("mxnet", "recorded", "Convolution"),
])
def test_the_scorecard_counts_the_must_implement_lists_without_a_dispatch_table(derived, framework, evidence, op):
    """JAX, Chainer and MXNet have no dispatch table: the scorecard counts the audit's
    per-pass lists instead, and says which evidence they rest on."""
    from tracer.analysis.portability import framework_report
    from tracer.analysis.scorecard import scorecard
    from tracer.trace import load

    root: Path = derived["root"]  # type: ignore[assignment]
    traces = [load(p) for p in sorted((root / framework).rglob("*.json"))]
    rep = framework_report(framework, traces, [], k=K)
    (row,) = scorecard([rep], traces, None, K)
    must = row.figures["implement"]
    assert must.value.isdigit() and int(must.value) > 0, (must.value, must.thin)
    assert any(d.split(" (")[0] == op for d in must.details), must.details
    assert f"from {evidence}" in must.explain, must.explain
    # a list read off the CPU path alone is said to be that, not passed for a device's
    assert bool(must.thin) == (evidence == "recorded"), must.thin


def test_derived_evidence_has_no_call_path_to_split_at(derived, tmp_path):
    """Chainer's source evidence lists each FunctionNode's GPU methods, not the path a
    run took: a split at the step itself against it is its shape, kept in the diff,
    never a dispatch point; where a real decision exists it is Python's device branch."""
    from tracer.processing.diff import diff_traces
    from tracer.processing.diff.context import EVIDENCE_SHAPE
    from tracer.analysis.portability import framework_report

    fws = registry.load()
    cpu = probe_one(fws["chainer"], CaseSpec("conv2d", layers=("python", "op")))
    result = diff_traces(cpu, derived["chainer"], "forward", "warm", ("op",), 0.02, False, k=K)
    (split,) = result.layers[0].splits
    assert len(split.path) == 1 and split.classification == EVIDENCE_SHAPE, (split.path, split.classification)
    rep = framework_report("chainer", [cpu, derived["chainer"]], [], k=K)
    assert "conv2d.forward" not in {r.frame for r in rep.dispatch_points}, [r.frame for r in rep.dispatch_points]


def test_a_framework_that_derives_nothing_is_one_line():
    from tests.conftest import one_line_error

    line = one_line_error(dltrace("derive", "mxnet", "conv2d", "-o", "unused"), Exit.USAGE)
    assert "mxnet derives no GPU evidence" in line


def test_the_registry_rejects_an_unknown_evidence_class(tmp_path):
    text = registry.registry_path().read_text().replace("gpu_evidence: {evidence: source}",
                                                         "gpu_evidence: {evidence: recorded}")
    path = tmp_path / "frameworks.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError, match="gpu_evidence.evidence"):
        registry.load(path)


def test_a_survey_derives_two_frameworks_at_a_time(frameworks, tmp_path, monkeypatch):
    """The derive stage runs each framework's evidence probe beside another's (one probe
    process per framework, one core each), and a failed one is its framework's gap while
    the others are derived."""
    import threading
    import time

    from tracer import derive as derive_module
    from tracer.errors import DltraceError
    from tracer.runner import CaseResult

    chosen = [fw for fw in frameworks.values() if fw.gpu_evidence]
    assert len(chosen) >= 3
    lock, now, most = threading.Lock(), set(), [0]

    started: list[str] = []

    def fake(fw, primitives, out_dir, **kwargs):
        with lock:
            started.append(fw.name)
            now.add(fw.name)
            most[0] = max(most[0], len(now))
        time.sleep(0.2)
        with lock:
            now.discard(fw.name)
        if fw.name == chosen[1].name:
            raise DltraceError(f"{fw.name}: its GPU build's environment is not set up")
        return [CaseResult(CaseSpec(p, fw.apis[0]), None, None) for p in primitives]

    monkeypatch.setattr(derive_module, "derive", fake)
    said: list[tuple[str, int, str]] = []
    gaps = derive_module.survey_evidence(chosen, tmp_path, ["relu"], on_done=lambda *a: said.append(a), workers=2)
    assert most[0] == 2
    assert [g.framework for g in gaps] == [chosen[1].name] and "not set up" in gaps[0].error
    assert sorted(n for n, _, _ in said) == sorted(f"{fw.name}/gpu-derived" for fw in chosen)
    # a compiler's evidence (JAX's XLA), the slowest to derive, starts in the first wave,
    # not last alone; which of the first wave's threads logs first is the scheduler's call
    assert frameworks["jax"].gpu_evidence == "compiled" and "jax" in started[:2]


def test_a_surveys_gpu_evidence_shares_the_probing_jobs_workers(frameworks, tmp_path, monkeypatch):
    """Probing here, each framework's GPU evidence is queued on the probing jobs' workers,
    before them (it needs none of their traces): it is derived while the jobs run, never
    more processes at once than workers, not afterwards on an idle core."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tracer import derive as derive_module
    from tracer import survey as sv
    from tracer.runner import CaseResult

    lock, now, most = threading.Lock(), [0], [0]
    seen: dict[str, float] = {}

    def busy(seconds: float) -> None:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(seconds)
        with lock:
            now[0] -= 1

    def job(job, root, fresh, timeout, threads):
        busy(0.3)
        with lock:
            seen["last job"] = time.monotonic()
        return sv.SurveyEvent(job, 0)

    def fake(fw, primitives, out_dir, **kwargs):
        with lock:
            seen.setdefault("first derive", time.monotonic())
        busy(0.1)
        return [CaseResult(CaseSpec(p, fw.apis[0]), None, None) for p in primitives]

    monkeypatch.setattr(sv, "run_job", job)
    monkeypatch.setattr(derive_module, "derive", fake)
    jobs = sv.plan([frameworks["torch"]], variants=False)[:4]
    chosen = [fw for fw in frameworks.values() if fw.gpu_evidence]
    with ThreadPoolExecutor(2) as pool:
        deriving = derive_module.start_evidence(pool, chosen, tmp_path, ["relu"], threads=1)
        assert sv.run(jobs, tmp_path, workers=2, pool=pool) == []
        assert len(deriving) == len(chosen) and [g for fut in deriving for g in fut.result()] == []
    assert most[0] == 2 and seen["first derive"] < seen["last job"]
