"""`dltrace survey` and `dltrace report`: resume, gaps that never lose results,
traces from elsewhere, and a report rendered from traces alone."""

from __future__ import annotations

import os

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import _limited, dltrace, write_pair
from tests.test_trace_format import BAD_DEFLATE, _gzip_bomb
from tracer import machine, registry
from tracer import survey as sv
from tracer.knowledge import knowledge
from tracer.contract import EXACT_LAYERS, LAYERS, PRIMITIVES, THREAD_ENV, USER_API, UserWorkload
from tracer.runner import CaseSpec
from tracer.trace import load

K = knowledge()


def test_resumed_survey_reuses_every_trace(survey_root, survey_report, tmp_path):
    # a copy of torch's traces: the session survey's own report stays the whole survey's
    # (another test worker may be reading it)
    shutil.copytree(survey_root / "traces" / "torch", tmp_path / "traces" / "torch")
    proc = dltrace("survey", "torch", "--primitives", "conv2d,relu", "--no-native", "--no-examples", "-o",
                   str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    # conv2d and relu at two levels, and torch's models' steps, which the session survey ran too
    assert "torch/cpu-default: 8 cases, 8 reused" in proc.stderr
    assert "torch/cpu-onednn-off: 4 cases, 4 reused" in proc.stderr
    assert survey_report.exists()


def test_survey_samples_native_stacks_of_the_functional_cases(survey_root, tmp_path):
    # resumed from a survey without native stacks: the traces there are reused, and one
    # functional case at the kernel shape, with native stacks, is added per primitive
    shutil.copytree(survey_root / "traces" / "chainer", tmp_path / "traces" / "chainer")
    proc = dltrace("survey", "chainer", "--primitives", "relu", "--no-models", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "chainer/cpu-default: 3 cases, 2 reused" in proc.stderr
    traces, gaps, _ = sv.read_folders([tmp_path / "traces"])
    relu = {(t.meta["api"], tuple(t.meta["shape"])): t for t in traces if t.meta["primitive"] == "relu"}
    kernel = ("functional", PRIMITIVES["relu"].kernel_shape)
    assert not gaps and set(relu) == {("functional", PRIMITIVES["relu"].shape), ("layer", PRIMITIVES["relu"].shape),
                                      kernel}
    assert relu[kernel].layer("forward", "native") is not None and relu[kernel].meta["native"]["pyspy_samples"] > 0
    assert all(t.layer("forward", "native") is None for key, t in relu.items() if key != kernel)
    # at the kernel shape numpy's own loops compute chainer's relu: the report names the library
    index = (tmp_path / "index.html").read_text()
    assert "libraries reached" in index and ">NumPy<" in index
    # and a second run reuses all three
    proc = dltrace("survey", "chainer", "--primitives", "relu", "--no-models", "-o", str(tmp_path))
    assert "chainer/cpu-default: 3 cases, 3 reused" in proc.stderr


@pytest.mark.slow
def test_survey_with_crashing_hanging_and_broken_frameworks_finishes(fake_frameworks, tmp_path):
    out = tmp_path / "reports" / "s"
    # a relative -o, as in the README's `make survey` (the probe itself runs in another directory)
    proc = dltrace("survey", "--primitives", "dense,conv2d,relu,tanh", "--no-native", "--timeout", "5",
                   "-o", "reports/s", env=fake_frameworks, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "absent: environment not set up" in proc.stderr
    traces, gaps, problems = sv.read_folders([out / "traces"])
    assert not problems
    # the case before the segfault and the one after the hang are kept
    assert sorted(t.meta["primitive"] for t in traces) == ["dense"]
    why = {(g.framework, g.primitive): (g.kind, g.error) for g in gaps}
    assert why[("crashy", "conv2d")][0] == "crashed" and "SIGSEGV" in why[("crashy", "conv2d")][1]
    assert why[("crashy", "relu")][0] == "timeout" and "timed out after 5 s" in why[("crashy", "relu")][1]
    assert why[("crashy", "tanh")] == ("failed", "RuntimeError: tanh is broken in this framework")
    assert {p for (f, p), (k, _) in why.items() if f == "broken"} == {"dense", "conv2d", "relu", "tanh"}
    assert all(k == "import" for (f, _), (k, _) in why.items() if f == "broken")
    assert all(k == "env" and "dltrace env setup absent" in e for (f, _), (k, e) in why.items() if f == "absent")
    index = (out / "index.html").read_text()
    # one row per framework and reason (a repeated failure is one sentence), its cases counted
    rows = re.findall(r'<tr class="gap-row"><td>\w+</td><td class="small">.*?</td><td class="num">(\d+)</td>', index)
    assert sum(int(n) for n in rows) == len(gaps) == 11
    assert len(rows) == len({(g.framework, g.error) for g in gaps})
    # a resumed run keeps the trace it has and retries the gaps
    proc = dltrace("survey", "crashy", "--primitives", "dense,conv2d", "--no-native", "--timeout", "5",
                   "-o", "reports/s", env=fake_frameworks, cwd=tmp_path)
    assert "crashy/cpu-default: 2 cases, 1 reused, 1 gaps" in proc.stderr


def test_report_from_traces_alone_with_traces_from_elsewhere(survey_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(survey_root / "traces" / "chainer", elsewhere / "chainer")
    (elsewhere / "chainer" / "cpu-default" / "junk.json").write_text("{not json")
    proc = dltrace("report", str(survey_root / "traces" / "torch"), str(elsewhere), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert "skipped" in proc.stderr and "junk.json: corrupt or truncated" in proc.stderr
    # torch's model steps are among its traces: their page too
    assert {p.name for p in (tmp_path / "r").glob("*.html")} == {"index.html", "torch.html", "chainer.html",
                                                                  "models.html"}


def test_report_of_nothing_is_one_line(tmp_path):
    proc = dltrace("report", str(tmp_path), "-o", str(tmp_path / "r"))
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("dltrace: error: no traces found in")


def test_audit_names_the_dispatch_points(survey_root, tmp_path):
    proc = dltrace("audit", "jax", "--traces", str(survey_root / "traces"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "Dispatch points: where a new backend hooks in" in proc.stdout
    assert "jax._src.interpreters.ad.linearize" in proc.stdout and "compilation" in proc.stdout
    assert "What each primitive needs from a backend" in proc.stdout
    paths = [line.strip() for line in proc.stdout.split("Dispatch points")[0].splitlines()[1:]]
    assert "- gpu compiled" in paths  # derived GPU evidence, labelled with its class, never cut by a wrap
    proc = dltrace("audit", "torch", "--traces", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"dltrace: error: no torch traces in {tmp_path}; run: dltrace survey torch"


def test_audit_lists_the_kernel_ops_a_port_must_provide(cpu_traces):
    from tracer.analysis.portability import framework_report

    traces = [r.load() for (fw, variant, prim, api), r in cpu_traces.items() if fw == "torch" and prim == "conv2d"]
    rep = framework_report("torch", traces, [], k=K)
    (conv,) = [r for r in rep.audit if r.primitive == "conv2d"]
    assert "aten::mkldnn_convolution (forward)" in conv.provide
    assert "aten::convolution_backward (backward)" in conv.provide
    # allocation and view ops below the kernel are not what a port provides
    assert not any(p.startswith(("aten::empty", "aten::as_strided", "aten::resize_")) for p in conv.provide)
    assert "oneDNN" in conv.cpu_libraries


def test_default_report_sets_torch_cpu_against_real_gpus(survey_report):
    # the survey imports the reference GPU profiles (frameworks.yaml: imported) by default
    page = (survey_report.parent / "torch.html").read_text()
    for title in ("cpu vs gpu alexnet-a100", "cpu vs gpu resnet-train-v100", "cpu vs gpu resnet-train-mi300x",
                  "cpu vs gpu vit-mi300x", "cpu vs gpu mlp-train-mi250"):
        assert title in page, title
    assert "aten::cudnn_convolution" in page and "aten::miopen_convolution" in page
    assert "recorded on NVIDIA A100-PG509-200 by others: facebookresearch/HolisticTraceAnalysis@" in page
    from tracer.analysis.portability import framework_report

    traces, gaps, _ = sv.read_folders([survey_report.parent / "traces"])
    rep = framework_report("torch", [t for t in traces if t.meta["framework"] == "torch"], gaps, k=K)
    conv = next(d for d in rep.dispatch_points
                if d.frame == "aten::_convolution" and d.classification == "device dispatch")
    assert {"aten::cudnn_convolution", "aten::miopen_convolution"} <= set(conv.b_names) | {
        n for d in rep.dispatch_points if d.frame == "aten::_convolution" for n in d.b_names}
    rows = {r.primitive: r for r in rep.audit}
    assert {"cuDNN", "MIOpen"} <= set(rows["conv2d"].gpu_libraries)
    # torch's own kernels (the recommender profiles, recsys-a100 and -v100, and the H100 recording)
    assert "PyTorch CUDA kernels" in rows["sigmoid"].gpu_libraries and "cuDNN" not in rows["sigmoid"].gpu_libraries
    # no imported profile has avgpool2d: its GPU libraries are the H100 recording's, which the
    # survey keeps among its inputs (traces/inputs), never invented
    assert rows["avgpool2d"].gpu_libraries and "PyTorch CUDA kernels" in rows["avgpool2d"].gpu_libraries
    assert "recorded-h100-gpu-default" in (survey_report.parent / "inputs.json").read_text()


def test_audit_names_what_a_new_torch_backend_must_implement(cpu_traces):
    from tracer.analysis.portability import framework_report

    traces = [r.load() for (fw, variant, prim, api), r in cpu_traces.items() if fw == "torch" and variant == "default"]
    rep = framework_report("torch", traces, [], k=K)
    rows = {r.primitive: r.needs for r in rep.audit}
    bn = rows["batchnorm"]
    assert bn.key == "PrivateUse1"
    assert bn.must_implement[:2] == ["aten::native_batch_norm", "aten::native_batch_norm_backward"]
    assert bn.others["aten::native_batch_norm"]["CUDA"] == "batch_norm_cuda"
    assert ("aten::batch_norm", "decomposes into other ops") in bn.free
    dense = rows["dense"]
    assert "aten::addmm.out" in dense.must_implement and dense.others["aten::addmm.out"]["CUDA"] == "addmm_out_cuda"
    assert ("aten::linear", "decomposes into other ops") in dense.free


def test_audit_names_what_a_tensorflow_pluggable_device_must_register(cpu_traces):
    from tracer.analysis.portability import framework_report

    traces = [r.load() for (fw, variant, prim, api), r in cpu_traces.items()
              if fw == "tensorflow" and variant == "default" and prim == "conv2d"]
    rep = framework_report("tensorflow", traces, [], k=K)
    (conv,) = [r for r in rep.audit if r.primitive == "conv2d"]
    assert conv.needs.key == "PluggableDevice"
    assert {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"} <= set(conv.needs.must_implement)
    # the registry's oneDNN rewrite of the op, as the CPU build declares it
    assert conv.needs.others["Conv2D"]["oneDNN"] == "_MklNativeConv2D"
    # shape ops have DEFAULT kernels: any device gets them
    assert ("ShapeN", "a kernel for any device (DEFAULT)") in conv.needs.free
    # the thread pool's region markers are no op a port provides
    assert not any("ThreadpoolListener" in p for p in conv.provide)


@pytest.mark.slow
def test_a_survey_records_itself_in_survey_json(fake_frameworks, tmp_path):
    """survey.json: what ran, on what machine, what was lost, and each stage's seconds,
    the figures the docs may quote (tests/test_docs.py checks them against results.json)."""
    import json

    proc = dltrace("survey", "crashy", "--primitives", "dense,maxpool2d", "--no-native", "-o", str(tmp_path),
                   env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((tmp_path / sv.RECORD).read_text())
    assert rec["format"] == sv.RECORD_FORMAT and rec["version"] == 1
    assert rec["frameworks"] == ["crashy"] and rec["cases"] >= 2 and rec["jobs"] >= 1
    _, gaps, _ = sv.read_folders([tmp_path / "traces"])
    assert rec["gaps"] == len(gaps) >= 1, gaps  # crashy's maxpool2d writes an unreadable trace
    assert rec["command"].startswith("dltrace survey crashy") and rec["machine"]["cores"] >= 1
    # the report's figures beside the record, kept when the record was written after them
    assert rec["report"]["schema_version"] == 1 and set(rec["report"]["frameworks"]) == {"crashy"}
    seconds = rec["seconds"]
    assert set(seconds) >= {"probing", "report", "total"} and seconds["total"] >= seconds["probing"] > 0
    # and each job's: where the probing time went
    jobs = rec["job_seconds"]
    assert jobs and all(k.startswith("crashy/") and v > 0 for k, v in jobs.items()), jobs
    assert sum(jobs.values()) <= seconds["probing"] * 2 + 1  # two at a time at most
    # crashy's probe leaves no readable trace to say where its seconds went: no phases, no guess
    assert rec["job_phases"] == {}


@pytest.mark.slow
def test_a_surveys_report_is_reproducible_from_its_folder(fake_frameworks, tmp_path):
    """Traces the survey read from elsewhere (--with-traces) are kept in its folder and
    named in inputs.json: `dltrace report OUTPUT/traces` renders the report it wrote."""
    import json

    from tests.test_verdict import torch_pair
    from tracer.trace import save

    elsewhere = tmp_path / "gpu-machine"
    elsewhere.mkdir()
    for i, t in enumerate(torch_pair()):
        save(t, elsewhere / f"conv2d-{i}.json")
    out = tmp_path / "s"
    proc = dltrace("survey", "crashy", "--primitives", "dense", "--no-native", "--with-traces", str(elsewhere),
                   "-o", str(out), env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    inputs = json.loads((out / "inputs.json").read_text())["inputs"]
    # the folder by its own name: the published report does not name this machine's folders
    assert [(i["source"], i["files"]) for i in inputs] == [("gpu-machine", 2)]
    assert str(tmp_path) not in (out / "inputs.json").read_text()
    proc = dltrace("report", str(out / "traces"), "-o", str(tmp_path / "again"), env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr

    def page(folder, name):  # the rendering time is the only line that may differ
        return re.sub(r"generated [0-9: -]+", "", (folder / name).read_text())

    assert {p.name for p in out.glob("*.html")} == {p.name for p in (tmp_path / "again").glob("*.html")}
    assert all(page(out, p.name) == page(tmp_path / "again", p.name) for p in out.glob("*.html"))


def test_probes_side_by_side_share_the_cores(cpu_traces):
    """Two probes at once on this machine: each library pool gets half the cores (one at
    least), and the trace says so; two full OpenMP pools on two cores timed a 1 ms
    backward at 400 ms."""
    share = str(max(1, (os.cpu_count() or 1) // 2))
    for key in (("torch", "default", "lenet", "layer"), ("tensorflow", "default", "dense", "functional")):
        t = cpu_traces[key].load()
        assert t.meta["thread_env"] == {k: share for k in THREAD_ENV}, key


def test_a_corrupt_trace_in_a_survey_folder_is_probed_again(fake_frameworks, tmp_path):
    args = ("survey", "crashy", "--primitives", "dense", "--no-native", "-o", str(tmp_path))
    assert dltrace(*args, env=fake_frameworks).returncode == 0
    (trace,) = (tmp_path / "traces").rglob("dense-functional.json")
    trace.write_bytes(BAD_DEFLATE)
    proc = dltrace(*args, env=fake_frameworks)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "crashy/cpu-default: 1 cases" in proc.stderr and "reused" not in proc.stderr
    assert load(trace).meta["primitive"] == "dense"


def test_a_probe_that_writes_a_corrupt_trace_is_a_gap(fake_frameworks, tmp_path):
    proc = dltrace("survey", "crashy", "--primitives", "maxpool2d", "--no-native", "-o", str(tmp_path),
                   env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    assert "1 gaps" in proc.stdout
    _, gaps, _ = sv.read_folders([tmp_path / "traces"])
    assert [g.primitive for g in gaps] == ["maxpool2d"] and "the probe wrote an unreadable trace" in gaps[0].error
    assert not list((tmp_path / "traces").rglob("maxpool2d-functional.json"))


@pytest.mark.slow
def test_a_survey_resumes_past_a_bomb_in_its_traces(fake_frameworks, tmp_path):
    args = ("survey", "crashy", "--primitives", "dense", "--no-native", "-o", str(tmp_path))
    assert dltrace(*args, env=fake_frameworks).returncode == 0
    (trace,) = (tmp_path / "traces").rglob("dense-functional.json")
    _gzip_bomb(trace, 5.8)
    proc = _limited(*args, env=fake_frameworks)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert load(trace).meta["primitive"] == "dense"  # probed again


def test_a_folder_where_a_trace_goes_is_that_cases_gap(fake_frameworks, tmp_path):
    job_dir = tmp_path / "traces" / "crashy" / "cpu-default"
    (job_dir / "dense-functional.json").mkdir(parents=True)
    proc = dltrace("survey", "crashy", "--primitives", "dense,softmax", "--no-native", "-o", str(tmp_path),
                   env=fake_frameworks)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert load(job_dir / "softmax-functional.json").meta["primitive"] == "softmax"
    _, gaps, _ = sv.read_folders([tmp_path / "traces"])
    assert [(g.primitive, g.kind) for g in gaps] == [("dense", "output")] and "is not a file" in gaps[0].error


def test_the_same_trace_twice_counts_once(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    (tmp_path / "copy").mkdir()
    for p in (tmp_path / "t").iterdir():
        (tmp_path / "copy" / p.name).write_bytes(p.read_bytes())
    once, _, _ = sv.read_folders([tmp_path / "t"])
    thrice, _, _ = sv.read_folders([tmp_path / "t", tmp_path / "t", tmp_path / "copy"])
    assert len(once) == len(thrice) == 2
    single = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r1"))
    triple = dltrace("report", str(tmp_path / "t"), str(tmp_path / "t"), str(tmp_path / "copy"),
                     "-o", str(tmp_path / "r3"))
    assert single.returncode == triple.returncode == 0
    count = lambda r: (tmp_path / r / "samplefw.html").read_text().count("split point(s)")  # noqa: E731
    assert count("r1") == count("r3") >= 1


def test_a_workload_that_exits_early_leaves_no_case_unexplained(fake_frameworks, tmp_path, monkeypatch):
    """Each workload is planned in a probe of its own (its global state, its exit, cannot
    reach a built-in case); one that still shares a job with a case that asked for
    native stacks (as a fleet's job may) leaves that case's native layer explained, and
    its own gap names its file and its exit."""
    for key, value in fake_frameworks.items():
        monkeypatch.setenv(key, value)
    fw = registry.load(Path(fake_frameworks["DLTRACE_REGISTRY"]))["crashy"]
    (tmp_path / "quits.py").write_text("import os\n\ndef workload(device):\n    os._exit(0)\n")
    w = UserWorkload.parse(str(tmp_path / "quits.py"))
    jobs = sv.plan([fw], ["gelu"], variants=False, native=True, workloads={"crashy": [w]})
    assert [[c.primitive for c in j.cases] for j in jobs] == [["gelu", "gelu"], ["quits"]]
    job = sv.Job(fw, "cpu", "default", (CaseSpec("gelu", layers=LAYERS), CaseSpec(w.name, USER_API, user=w,
                                                                                  layers=EXACT_LAYERS)))
    event = sv.run_job(job, tmp_path / "s")
    why = {g.primitive: g.error for g in event.gaps}
    assert "ended early with exit status 0 while running workload quits.py" in why["quits"], why
    assert why["gelu"].startswith("native layer lost: ") and "workload quits.py" in why["gelu"], why
    native = load(sv.case_path(tmp_path / "s", job, job.cases[0])).info.native
    assert native is not None and "exit status 0 while running workload quits.py" in native.error


def test_a_workload_after_the_built_in_cases_of_its_process_leaves_them_whole(fake_frameworks, tmp_path,
                                                                              monkeypatch):
    """An emulated CPU's job runs its first workload after the primitives, in their process
    (tracer.survey.plan: one framework import under QEMU): a workload that ends the process
    costs only its own case."""
    for key, value in fake_frameworks.items():
        monkeypatch.setenv(key, value)
    fw = registry.load(Path(fake_frameworks["DLTRACE_REGISTRY"]))["crashy"]
    (tmp_path / "quits.py").write_text("import os\n\ndef workload(device):\n    os._exit(0)\n")
    w = UserWorkload.parse(str(tmp_path / "quits.py"))
    job = sv.Job(fw, "cpu", "default", (CaseSpec("gelu", layers=EXACT_LAYERS),
                                        CaseSpec(w.name, USER_API, user=w, layers=EXACT_LAYERS)))
    event = sv.run_job(job, tmp_path / "s")
    assert [(g.primitive, g.kind) for g in event.gaps] == [("quits", "crashed")], event.gaps
    assert "ended early with exit status 0 while running workload quits.py" in event.gaps[0].error
    gelu = load(sv.case_path(tmp_path / "s", job, job.cases[0]))
    assert gelu.info.primitive == "gelu" and gelu.run("forward", "warm") is not None
    assert job.label == f"{job.folder} + quits"


def test_survey_json_says_where_each_jobs_seconds_went(survey_report, survey_root, native_traces):
    """Per job, by phase (tracer.collect.harness.Spent): the framework's import, each
    layer's steps, the native capture; what the probe measured, within the job's seconds."""
    import json

    rec = json.loads((survey_root / sv.RECORD).read_text())
    phases, jobs = rec["job_phases"], rec["job_seconds"]
    emulated = phases["torch/aarch64-a64fx-default"]  # probed by the report's survey: QEMU's import
    assert {"import", "setup", "python", "warm-up", "op", "library", "other"} <= set(emulated), emulated
    assert emulated["import"] > 1 and all(v >= 0 for v in emulated.values())
    for job, spent in phases.items():
        assert sum(spent.values()) <= jobs[job] + 0.5, (job, spent, jobs[job])
    # a trace keeps its own case's share, the native capture's included
    (res,) = [r for (fw, variant), r in native_traces.items() if (fw, variant) == ("torch", "default")]
    spent = load(res.path).meta["spent_s"]
    assert spent["native"] > 0 and spent["python"] > 0 and spent["op"] > 0
    # where TensorFlow's default is its oneDNN path, that path is traced once, and both the
    # record and TensorFlow's page say why the onednn-on variant has no traces of its own
    here = registry.load()["tensorflow"].variants["onednn-on"].repeats_default(machine.isa())
    page = (survey_root / "tensorflow.html").read_text()
    if here and load(native_traces[("tensorflow", "default")].path).meta["onednn_enabled"]:
        assert rec["same_as_default"] == {"tensorflow/cpu-onednn-on": (
            f"tensorflow's default path on this CPU ({here}): its tensorflow/cpu-default traces record "
            "onednn_enabled: true")}
        assert not (survey_root / "traces" / "tensorflow" / "cpu-onednn-on").exists()
        assert "onednn-on is not traced on x86_64" in page
    else:
        assert rec["same_as_default"] == {} and "is not traced on" not in page


@pytest.mark.parametrize("default_on", [True, False])
def test_a_variant_that_is_the_default_path_here_is_checked_not_traced_twice(tmp_path, monkeypatch, default_on):
    """On a CPU where TensorFlow turns oneDNN on by itself (frameworks.yaml ``default_on``),
    its onednn-on job waits for the default job: not probed where the default's traces
    record the switch on (its event and survey.json say why), probed where they record it off."""
    from tests.conftest import META, op
    from tracer.trace import Frame, Node, Run, Trace, save

    tf = registry.load()["tensorflow"]
    jobs = sv.plan([tf], ["conv2d"], isa=["avx2", "avx512_vnni"])
    (held,) = [j for j in jobs if j.repeats]
    assert (held.folder, held.repeats) == ("tensorflow/cpu-onednn-on", "avx512_vnni")
    assert not [j for j in sv.plan([tf], ["conv2d"], isa=["avx2", "avx512f"]) if j.repeats]  # TF leaves it off there
    assert not [j for j in sv.plan([tf], ["conv2d"], arm=True, isa=["avx512_vnni"]) if j.cpu and j.repeats]

    probed: list[str] = []

    def run_job(job, root, fresh, timeout, threads):  # the probe: its traces record what TF said
        probed.append(job.folder)
        for spec in job.cases:
            tree = Node(Frame("root", "", "conv2d.forward"), 1, 10, children=[op("Conv2D")])
            meta = {**META, "framework": "tensorflow", "variant": job.variant,
                    "onednn_enabled": default_on or job.variant == "onednn-on"}
            path = sv.case_path(root, job, spec)
            path.parent.mkdir(parents=True, exist_ok=True)
            save(Trace(meta, [Run("forward", "warm", {"op": tree})]), path)
        return sv.SurveyEvent(job, len(job.cases))

    monkeypatch.setattr(sv, "run_job", run_job)
    events: list[sv.SurveyEvent] = []
    sv.run(jobs, tmp_path, workers=2, on_event=events.append)
    (event,) = [e for e in events if e.job == held]
    assert probed.index("tensorflow/cpu-default") == 0
    assert ("tensorflow/cpu-onednn-on" in probed) is not default_on
    if default_on:
        assert event.same_as_default == ("tensorflow's default path on this CPU (avx512_vnni): its "
                                         "tensorflow/cpu-default traces record onednn_enabled: true")
        assert event.done == len(held.cases) and not event.gaps
    else:
        assert not event.same_as_default
    # the report says why the path has no traces of its own, from the traces alone
    from tracer.analysis.portability import default_paths

    traces, _, _ = sv.read_folders([tmp_path / "traces"])
    notes = default_paths("tensorflow", traces, knowledge())
    assert bool(notes) is default_on
    if default_on:
        assert notes[0].startswith("onednn-on is not traced on x86_64 test: there it is the default path")
