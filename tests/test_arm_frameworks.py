"""The ARM audit beyond torch: TensorFlow, JAX and Chainer from their own aarch64
wheels under QEMU (one small emulated probe each), and MXNet's marked gap.

Emulation is slow (TensorFlow's import alone takes 20 to 90 s there), so each
framework runs one primitive on one CPU model; the survey's emulated jobs cover the
rest (tracer/survey.py ``plan(arm=True)``)."""

from __future__ import annotations

import pytest

from tracer import registry
from tracer import survey as sv
from tracer.contract import PRIMITIVES, UserWorkload
from tracer.analysis.arm_audit import arm_audit
from tracer.analysis.arm_ops import arm_op_table
from tracer.processing.diff import diff_traces
from tracer.analysis.portability import survey_reports
from tracer.analysis.survey_model import assemble
from tracer.knowledge import knowledge
from tracer.render.html import write_report
from tracer.registry import RegistryError
from tracer.runner import CaseSpec, run_probe

LAYERS = ("python", "op", "library")

K = knowledge()


def probe(fw, primitive: str, out, cpu: str = "", variant: str = "default"):
    (res,) = run_probe(fw, [CaseSpec(primitive, layers=LAYERS)], out, variant=variant, timeout=900,
                       command="ARM test", cpu=cpu)
    assert res.error is None, f"{fw.name} {primitive} {cpu or 'x86'} {variant}: {res.error}"
    return res.load()


def calls(trace, pass_: str) -> list[str]:
    return [n.frame.name for n in trace.layer(pass_, "library").children]


@pytest.fixture(scope="session")
def tf_conv2d(frameworks, tmp_path_factory):
    """TensorFlow's conv2d with oneDNN forced on (off by default on ARM), on this
    machine and on an emulated A64FX."""
    tf = frameworks["tensorflow"]
    return (probe(tf, "conv2d", tmp_path_factory.mktemp("tf-x86"), variant="onednn-on"),
            probe(tf, "conv2d", tmp_path_factory.mktemp("tf-a64fx"), cpu="a64fx", variant="onednn-on"))


def test_tensorflow_onednn_on_a64fx_against_x86_names_both_implementations(tf_conv2d):
    x86, a64fx = tf_conv2d
    assert a64fx.meta["emulated"]["cpu"] == "a64fx" and a64fx.meta["variant"] == "onednn-on"
    assert a64fx.meta["library"]["oneDNN"]["isa"].startswith("AArch64 SVE")
    x86_conv = [c for c in calls(x86, "forward") if c.startswith("convolution ")]
    arm_conv = [c for c in calls(a64fx, "forward") if c.startswith("convolution ")]
    assert x86_conv and arm_conv and any("sve_512" in c for c in arm_conv), (x86_conv, arm_conv)
    (lib,) = [ld for ld in diff_traces(x86, a64fx, k=K).layers if ld.layer == "library"]
    labels_a = {b.label for s in lib.splits for b in s.only_a}
    labels_b = {b.label for s in lib.splits for b in s.only_b}
    assert set(x86_conv) & labels_a and set(arm_conv) & labels_b, (labels_a, labels_b)
    # the audit sets the two side by side, in the onednn-on columns
    audit = arm_audit([x86, a64fx], [], k=K)
    cells = audit.rows["conv2d"]
    assert cells["a64fx (emulated), onednn-on"].calls["forward"] == calls(a64fx, "forward")
    assert any(m.endswith("(this machine), onednn-on") for m in audit.machines)


def test_jax_on_neoverse_n1_records_what_xla_compiled(frameworks, tmp_path_factory):
    t = probe(frameworks["jax"], "dense", tmp_path_factory.mktemp("jax-n1"), cpu="neoverse-n1")
    assert t.meta["machine"]["arch"] == "aarch64" and t.meta["emulated"]["cpu"] == "neoverse-n1"
    cell = arm_audit([t], [], k=K).rows["dense"]["neoverse-n1 (emulated)"]
    # XLA:CPU hands the matrix product to YNNPACK, named by the custom fusion's kind
    assert any(k.endswith(":__ynn_fusion") for k in cell.compiled["forward"]), cell.compiled
    assert cell.compiled["backward"]
    # per op of the program (the per-op ARM table a workload gets): what XLA:CPU made of it
    table = arm_op_table([t])
    assert table is not None and table.machines == ["neoverse-n1 (emulated)"]
    cells = {r.op: r.cells["neoverse-n1 (emulated)"] for r in table.rows}
    assert "YNNPACK: __ynn_fusion" in cells["stablehlo.dot_general"].calls, cells["stablehlo.dot_general"]
    assert cells["stablehlo.dot_general"].library_calls  # a library: no "own kernel"
    fused = [op for op, c in cells.items() if c.calls == ["XLA: fusion(kLoop)"]]
    assert fused and all(cells[op].said == "XLA: fusion(kLoop)" and not cells[op].library_calls for op in fused)


@pytest.fixture(scope="session")
def chainer_dense(frameworks, tmp_path_factory):
    """Chainer's dense on this machine and on an emulated A64FX."""
    ch = frameworks["chainer"]
    return (probe(ch, "dense", tmp_path_factory.mktemp("chainer-x86")),
            probe(ch, "dense", tmp_path_factory.mktemp("chainer-a64fx"), cpu="a64fx"))


def test_chainer_on_a64fx_names_openblas_kernels(chainer_dense):
    x86, t = chainer_dense
    blas = t.meta["library"]["OpenBLAS"]
    # numpy's aarch64 OpenBLAS picks its kernels for the emulated CPU: an ARM core, not x86's
    assert blas["core"].lower().startswith(("armv8", "a64fx", "neoverse")), blas
    assert blas["core"] != x86.meta["library"]["OpenBLAS"]["core"]
    cell = arm_audit([x86, t], [], k=K).rows["dense"]["a64fx (emulated)"]
    assert blas["core"] in cell.blas and not cell.failed
    # per op (a FunctionHook): no vendor library reports a call; NumPy's kernels, with the
    # OpenBLAS kernels each CPU got
    table = arm_op_table([x86, t], K.pure_python)
    assert table is not None and table.machines[1] == "a64fx (emulated)"
    row = next(r for r in table.rows if r.op == "LinearFunction.forward")
    assert row.cells["a64fx (emulated)"].said == f"own kernel (NumPy; OpenBLAS {blas['core']} kernels)"
    assert row.cells[table.machines[0]].said != row.cells["a64fx (emulated)"].said and not row.flags


def test_report_has_the_arm_audit_and_the_x86_vs_arm_column(chainer_dense, tmp_path):
    index = write_report(assemble(survey_reports(list(chainer_dense), [], k=K), [], [], K), tmp_path)
    page = (tmp_path / "chainer.html").read_text()
    assert 'id="arm-table"' in page and "a64fx (emulated)" in page
    assert f"OpenBLAS, {chainer_dense[1].meta['library']['OpenBLAS']['core']} kernels" in page
    table = index.read_text().split('id="primitive-table"', 1)[1].split("</table>", 1)[0]
    assert "x86 vs ARM (emulated)" in table and "Fujitsu A64FX" in table.split("<b>dense</b>", 1)[1]


def test_mxnet_on_arm_is_a_marked_gap(frameworks, tmp_path):
    fw = frameworks["mxnet"]
    jobs = [j for j in sv.plan([fw], ["dense"], arm=True) if j.cpu]
    assert {j.cpu for j in jobs} == set(fw.aarch64.cpus) and fw.aarch64.unavailable
    gaps = [g for j in jobs for g in sv.run_job(j, tmp_path).gaps]
    assert len(gaps) == len(jobs) and all("no aarch64 build" in g.error and "libarmpl" in g.error for g in gaps)
    audit = arm_audit([], gaps, k=K)
    assert all(c.failed for c in audit.rows["dense"].values()) and len(audit.machines) == len(jobs)


def test_survey_runs_the_arm_variants(frameworks):
    tf = [j for j in sv.plan([frameworks["tensorflow"]], ["conv2d"], arm=True) if j.cpu]
    want = {(c, v) for c in ("a64fx", "neoverse-n1") for v in ("default", "onednn-on")}
    assert {(j.cpu, j.variant) for j in tf} == want
    assert not [j for j in sv.plan([frameworks["tensorflow"]], ["conv2d"], arm=True, variants=False)
                if j.cpu and j.variant != "default"]


def test_the_default_survey_runs_the_examples_on_arm_but_those_it_skips(frameworks):
    jax = frameworks["jax"]
    examples = [UserWorkload.parse(str(ex.path)) for ex in jax.examples.values()]
    jobs = [j for j in sv.plan([jax], ["dense"], arm=True, workloads={"jax": examples}) if j.cpu]
    users = [(j.cpu, c.primitive) for j in jobs for c in j.cases if c.user]
    assert sorted(users) == sorted((c, "flax_cnn") for c in jax.aarch64.cpus)
    # the example runs last in the process of its CPU's primitives: one import under QEMU, and
    # every built-in case is written before the workload runs
    assert all([c.user is not None for c in j.cases] == [False, True] for j in jobs)
    every = [j for j in sv.plan([jax], ["dense"], arm=True, arm_all=True, workloads={"jax": examples}) if j.cpu]
    assert sorted(c.primitive for j in every for c in j.cases if c.user) == sorted(
        ["flax_cnn", "mobilenet_v2"] * len(jax.aarch64.cpus))
    # no two workloads share a process: the second has one of its own
    assert all(sum(c.user is not None for c in j.cases) <= 1 for j in every)
    assert any(len(j.cases) == 1 and j.cases[0].user for j in every)
    # survey.json says what each job timed, apart from the primitives-only jobs of the same folder
    (a64fx,) = [j for j in jobs if j.cpu == "a64fx"]
    (prims,) = [j for j in sv.plan([jax], ["dense"], arm=True) if j.cpu == "a64fx"]
    assert a64fx.folder == prims.folder == "jax/aarch64-a64fx-default"
    assert (a64fx.label, prims.label) == ("jax/aarch64-a64fx-default + flax_cnn", "jax/aarch64-a64fx-default")
    (alone,) = [j for j in every if j.cpu == "a64fx" and j.cases[0].user]
    assert alone.label == f"jax/aarch64-a64fx-default {alone.cases[0].primitive}"


def test_the_default_survey_emulates_jax_on_conv2d_and_dense_only(frameworks):
    jax = frameworks["jax"]
    jobs = [j for j in sv.plan([jax], arm=True) if j.cpu]
    assert {(j.cpu, j.variant) for j in jobs} == {(c, "default") for c in jax.aarch64.cpus}
    assert all({c.primitive for c in j.cases} == {"conv2d", "dense"} for j in jobs)
    every = [j for j in sv.plan([jax], arm=True, arm_all=True) if j.cpu]
    assert {(j.cpu, j.variant) for j in every} == {(c, v) for c in jax.aarch64.cpus for v in ("default", *jax.variants)}
    assert all(len(j.cases) == len(PRIMITIVES) for j in every)  # the transformer family too


@pytest.mark.parametrize("line, bad", [("primitives: [conv2d, dense]", "primitives: [conv3d]"),
                                       ("variants: [onednn-on]", "variants: [onednn-maybe]"),
                                       ("skip_examples: [mobilenet_v2]", "skip_examples: [mobilenet_v9]")])
def test_registry_names_an_unknown_arm_primitive_or_variant(tmp_path, line, bad):
    text = registry.registry_path().read_text()
    assert line in text
    path = tmp_path / "frameworks.yaml"
    path.write_text(text.replace(line, bad))
    with pytest.raises(RegistryError, match=r"field 'aarch64\.(primitives|variants|skip_examples)' names no"):
        registry.load(path)


@pytest.mark.parametrize("bad", ["-1", "many", "true"])
def test_registry_refuses_a_warmup_that_is_no_count_of_steps(tmp_path, bad):
    text = registry.registry_path().read_text()
    line = "      warmup: 1\n"
    assert line in text
    path = tmp_path / "frameworks.yaml"
    path.write_text(text.replace(line, f"      warmup: {bad}\n"))
    with pytest.raises(RegistryError, match=r"field 'aarch64\.warmup' must be a number of steps"):
        registry.load(path)


def test_an_emulated_probe_warms_up_as_its_framework_says(frameworks, tmp_path, monkeypatch):
    """Nothing is timed under emulation: the cold call is the warm-up (a ResNet-50 step is
    17 s under QEMU), but where the framework's entry asks for a step (JAX's second call
    ran one Python call of its own), and never more than the caller asked."""
    import json

    from tracer import runner
    from tracer.errors import ProbeFailed

    asked = {}

    def emulated(fw, cpu, binds):  # the request is written by now: read it and stop
        asked[fw.name] = json.loads((binds[0] / "request.json").read_text())["warmup"]
        raise ProbeFailed("not run", "failed")

    monkeypatch.setattr(runner, "_emulated", emulated)
    for name, warmup in (("chainer", 3), ("jax", 3), ("torch", 0)):
        with pytest.raises(ProbeFailed):
            run_probe(frameworks[name], [CaseSpec("dense")], tmp_path, cpu="neoverse-n1", warmup=warmup)
    assert asked == {"chainer": 0, "jax": 1, "torch": 0}


def test_an_emulated_trace_is_shown_without_times(tf_conv2d):
    """QEMU's clock says nothing of the chip: an emulated run is not timed, and its tree
    is printed without the times the libraries reported under emulation."""
    from rich.console import Console

    from tracer.render.console import print_trace

    _, a64fx = tf_conv2d
    assert all(r.info.untraced_s is None for r in a64fx.runs if r.phase == "warm")
    console = Console(record=True, width=200)
    print_trace(a64fx, console, layers=("op", "library"), k=K)
    text = console.export_text()
    assert "its times are not shown" in text and "convolution" in text
    assert " ms" not in text and " µs" not in text, text


def test_tensorflow_tells_the_library_calls_apart_per_op(tf_conv2d):
    """TensorFlow's eager op callbacks give the library layer per op (tracer.contract.OpHooks):
    Conv2D's own oneDNN convolution, on this machine and on A64FX."""
    for trace, isa in zip(tf_conv2d, ("", "sve_512")):
        (run,) = [r for r in trace.runs if r.pass_ == "forward" and r.phase == "warm"]
        per_op = run.info.layers["library"].per_op
        calls = [c for c in per_op["Conv2D"][1] if c.startswith("oneDNN: convolution")]
        assert calls and all(isa in c for c in calls), dict(per_op)
