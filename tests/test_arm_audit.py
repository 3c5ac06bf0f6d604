"""The ARM audit on this x86 machine: torch's own aarch64 wheels run under QEMU as
an A64FX and as a Neoverse-N1, through the same runner and harness, set against
this machine's trace of the same primitive."""

from __future__ import annotations

import pytest

from tracer import survey as sv
from tracer.processing.diff import diff_traces
from tracer.knowledge import knowledge
from tracer.trace import load

K = knowledge()

CPUS = ("a64fx", "neoverse-n1")


@pytest.fixture(scope="session")
def emulated(frameworks, survey_report):
    """cpu -> {primitive: trace} of torch's conv2d and dense, forward and backward, on
    each emulated CPU (python, op and library layers: py-spy cannot attach under QEMU):
    the shared survey's own emulated jobs, which its report's build ran."""
    out: dict = {}
    for job in sv.plan([frameworks["torch"]], arm=True):
        if job.cpu in CPUS and job.variant == "default":
            for spec in job.cases:
                if spec.primitive in ("conv2d", "dense"):
                    path = sv.case_path(survey_report.parent, job, spec)
                    assert path.exists(), f"{job.cpu} {spec.primitive}: the survey has no trace"
                    out.setdefault(job.cpu, {})[spec.primitive] = load(path)
    assert set(out) == set(CPUS) and all(len(v) == 2 for v in out.values()), out
    return out


def calls(trace, pass_):
    return [n.frame.name for n in trace.layer(pass_, "library").children]


def test_emulated_traces_say_what_they_are(emulated):
    t = emulated["a64fx"]["conv2d"]
    assert t.meta["machine"]["arch"] == "aarch64"
    assert t.meta["emulated"]["cpu"] == "a64fx" and t.meta["emulated"]["emulated"] is True
    assert "A64FX" in t.meta["machine"]["cpu"] and "(emulated)" in t.meta["machine"]["cpu"]
    assert t.meta["emulated"]["by"].startswith("QEMU ") and t.meta["library"]["oneDNN"]["isa"].startswith("AArch64 SVE")
    assert t.layer("forward", "native") is None
    # PyPI's aarch64 torch links NVIDIA's NVPL BLAS, which reports no calls: the trace names it
    assert t.meta["blas"] == "nvpl" and t.meta["framework_version"].endswith("+cu130")


def test_x86_against_each_arm_cpu_names_both_sides_implementations(cpu_traces, emulated):
    x86 = cpu_traces[("torch", "default", "conv2d", "functional")].load()
    x86_impl = [c for c in calls(x86, "forward") if c.startswith("convolution ")]
    assert x86_impl, calls(x86, "forward")
    assert x86.meta["blas"] == "mkl"
    # A64FX: oneDNN's SVE 512 kernels, forward and both backward passes
    a64fx = emulated["a64fx"]["conv2d"]
    assert any("sve_512" in c for c in calls(a64fx, "forward") if c.startswith("convolution "))
    assert all("sve_512" in c for c in calls(a64fx, "backward") if c.startswith("convolution "))
    (lib,) = [ld for ld in diff_traces(x86, a64fx, k=K).layers if ld.layer == "library"]
    (split,) = lib.splits
    assert any(b.label in x86_impl for b in split.only_a)
    assert any("sve_512" in b.label for b in split.only_b)
    assert split.classification == "ISA-specific code"
    # Neoverse-N1 (NEON only): the Arm Compute Library forward, oneDNN's reference code backward
    n1 = emulated["neoverse-n1"]["conv2d"]
    assert any(c.startswith("convolution ") and ":acl" in c for c in calls(n1, "forward"))
    assert {c for c in calls(n1, "backward") if c.startswith("convolution ")} == {
        "convolution gemm:ref (backward_data)", "convolution gemm:ref (backward_weights)"}
    (lib,) = [ld for ld in diff_traces(x86, n1, k=K).layers if ld.layer == "library"]
    (split,) = lib.splits
    assert split.classification == "library choice" and "Arm Compute Library" in split.reason
    # dense on Neoverse-N1: no oneDNN call; torch's BLAS, NVIDIA's NVPL, reports its SGEMM and platform
    dense = emulated["neoverse-n1"]["dense"]
    assert [(n.frame.module, n.frame.name) for n in dense.layer("forward", "library").children] == [("NVPL", "SGEMM")]
    assert dense.meta["library"]["NVPL"]["platform"]


def test_default_report_has_the_arm_audit(survey_report):
    page = (survey_report.parent / "torch.html").read_text()
    assert 'id="arm-table"' in page
    assert "a64fx (emulated)" in page and "neoverse-n1 (emulated)" in page
    assert "brgconv:sve_512" in page and "gemm:ref (backward_data)" in page and "reference code" in page
    head = page[page.index('id="arm-table"'):]
    head = head[:head.index("</tr>")]
    assert "BLAS the build links: NVPL" in head and "BLAS the build links: MKL" in head
    assert "SGEMM (NVPL, " in page
    traces, _, _ = sv.read_folders([survey_report.parent / "traces" / "torch"])
    assert {t.meta["emulated"]["cpu"] for t in traces if isinstance(t.meta.get("emulated"), dict)} == set(CPUS)


def test_x86_and_arm_run_one_torch_release_and_their_splits_are_decisions_or_shown_apart(cpu_traces, emulated):
    """The aarch64 wheels are x86's torch release in another build (+cu130 against
    +cpu): no split is a version difference. What aarch64's mkldnn_convolution adds (a
    contiguous() copy before oneDNN) is an allocation, no decision: oneDNN's ISA choice
    between the two is the library's own row."""
    from tracer.processing.diff.context import VERSION_DIFFERENCE
    from tracer.processing.diff.result import walk_splits
    from tracer.analysis.portability import framework_report

    x86 = cpu_traces[("torch", "default", "conv2d", "functional")].load()
    a64fx = emulated["a64fx"]["conv2d"]
    releases = {t.meta["framework_version"].split("+")[0] for t in (x86, a64fx)}
    assert len(releases) == 1 and x86.meta["framework_version"] != a64fx.meta["framework_version"]
    result = diff_traces(x86, a64fx, k=K)
    assert "framework_version" not in result.differs and "framework_build" in result.differs
    classes = {s.frame: s.classification for ld in result.layers for s in walk_splits(ld.splits)}
    assert VERSION_DIFFERENCE not in classes.values(), classes
    assert classes.get("aten::mkldnn_convolution") == "allocation/transfer", classes
    # the copy names no decision: oneDNN's ISA choice is the library's own row and site
    rep = framework_report("torch", [x86, a64fx], [], k=K)
    (row,) = [d for d in rep.dispatch_points if d.frame == "aten::mkldnn_convolution"]
    assert row.classification == "allocation/transfer", row
    isa = [d for d in rep.dispatch_points if d.layer == "library" and d.classification == "ISA-specific code"]
    assert isa and {d.site for d in isa} == {"ISA dispatch inside oneDNN"}, rep.dispatch_points
    assert any("sve_512" in e for d in isa for e in d.evidence), isa
