"""The portability scorecard and the names at a split, on the session survey's real
traces: machine-code bytes read from the real shared objects the probes mapped,
TensorFlow's oneDNN-on conv2d naming MklConvOp / _MklNativeConv2D against Eigen's
Conv2DOp, and the scorecard first on the rendered index for all five frameworks."""

from __future__ import annotations

import json
import re

from tests.conftest import dltrace
from tracer.elf_code import ElfCode, _trie, key
from tracer.analysis.portability import framework_report
from tracer.processing.ran_kernels import split_kernels
from tracer.analysis.scorecard import COLUMNS, scorecard
from tracer.knowledge import knowledge
from tracer.trace import load

K = knowledge()

FRAMEWORKS = ("torch", "tensorflow", "chainer", "mxnet", "jax")


def test_demangled_names_compare_as_py_spy_prints_them():
    # GNU's demangler prints parameters, qualifiers and a template's return type; py-spy does not
    assert key("void dnnl::impl::parallel<F>(int, F const&)") == "dnnl::impl::parallel<F>"
    assert key("ns::A::operator()(int) const") == "ns::A::operator()"
    assert key("f(int) const::{lambda(int, int)#1}::operator()(int, int) const") == \
        "f(int) const::{lambda(int, int)#1}::operator()"
    assert key("at::native::foo(at::Tensor const&) [clone .cold]") == "at::native::foo"


def test_the_symbol_scan_trie_finds_what_an_alternation_of_the_names_finds():
    # the longest name where several start at one place, names that are prefixes of
    # others, and characters re would read as syntax
    words = [b"4call", b"4cast", b"14callback", b"3add", b"5addmm", b"foo", b"foobar", b"[unknown]", b"a.b", b"x+"]
    alternation = re.compile(b"|".join(sorted(map(re.escape, words), key=len, reverse=True)))
    trie = re.compile(_trie(words))
    rows = [b"_ZN2at4_ops4call14callback", b"_ZN2at3add5addmm4cast", b"foobarfoo", b"foofoobar", b"[unknown]a.bx+",
            b"axb", b"xx", b"4cal", b"", b"14callbackfoobar5addm"]
    for row in rows:
        assert trie.findall(row) == alternation.findall(row), row
    assert trie.findall(b"foobar 4callback") == [b"foobar", b"4call"]


def test_native_capture_records_the_shared_objects_and_jit_code(native_traces):
    trace = load(native_traces[("torch", "default")].path)
    libs = trace.meta["native"]["lib_paths"]
    assert "libtorch_cpu.so" in libs and libs["libtorch_cpu.so"]["bytes"] > 0
    jit = [row for run in trace.runs for row in run.stats.get("layers", {}).get("native", {}).get("jit_code", [])]
    # oneDNN's JIT kernels as its perf map names them (jit_uni_reorder_kernel_f32, brgemm..., and
    # a reorder's direct_copy_kernel_t), each with its code size
    assert jit and all(name and size > 0 for name, size, _ in jit)
    assert any(name.startswith(("jit_", "brg")) for name, _, _ in jit)


def test_elf_code_bytes_come_from_the_real_shared_objects(native_traces):
    trace = load(native_traces[("torch", "default")].path)
    info = trace.meta["native"]["lib_paths"]["libtorch_cpu.so"]
    names = {n.frame.name for run in trace.runs if "native" in run.layers for _, n in run.layers["native"].walk()
             if n.frame.lib == "libtorch_cpu.so" and not n.frame.name.startswith("[")}
    code = ElfCode().sizes(info["path"], info["bytes"], names)
    assert not code.error
    assert sum(code.sizes.values()) > 10_000
    # most sampled names are found in the tables: the key matches py-spy's naming
    assert len(code.sizes) >= 0.7 * len(names), code.missing[:5]
    changed = ElfCode().sizes(info["path"], info["bytes"] + 1, names)
    assert changed.error.startswith("changed since the capture") and not changed.sizes
    # read ahead in another process (as a report does, while it makes the framework
    # reports): the same answers, and the file is not read again here
    with ElfCode() as elf:
        elf.read_ahead({(info["path"], info["bytes"]): names, (info["path"], info["bytes"] + 1): names})
        assert len(elf._ahead) == 2
        again, stale = elf.sizes(info["path"], info["bytes"], names), elf.sizes(info["path"], info["bytes"] + 1, names)
        assert not elf._ahead and elf._pool is not None
    assert again.sizes == code.sizes and again.missing == code.missing
    assert stale.error == changed.error and elf._pool is None


def test_tensorflow_onednn_split_names_the_kernels_each_side_ran(native_traces, cpu_traces):
    # the default path is one side, so that the report pairs them: against the oneDNN
    # variant, or where TensorFlow turns oneDNN on by itself (an AVX-512 CPU: the default
    # is the oneDNN path), against the variant that turns it off
    # (there a survey leaves onednn-on out: tracer.survey.plan, frameworks.yaml default_on)
    default_on = load(native_traces[("tensorflow", "default")].path).meta.get("onednn_enabled")
    on_variant, off_variant = ("default", "onednn-off") if default_on else ("onednn-on", "default")
    on_path, off_path = (native_traces[("tensorflow", v)].path for v in (on_variant, off_variant))
    on, off = load(on_path), load(off_path)
    assert on.meta["onednn_enabled"] is True and off.meta["onednn_enabled"] is False
    only_on, only_off = split_kernels(on, off, "forward", k=K)
    # the rewrite record names each side's kernel deterministically; sampled kernel names
    # add to it where py-spy caught them (a sample may miss one): never on the wrong side
    assert "Conv2D -> _MklNativeConv2D (oneDNN rewrite)" in only_on
    assert "Conv2D: the registry's CPU kernel, not rewritten to _MklNativeConv2D" in only_off
    assert not any(n.startswith("tensorflow::Conv2DOp") for n in only_on), only_on
    assert not any(n.startswith("tensorflow::MklConvOp") for n in only_off), only_off
    assert any(n.startswith(("tensorflow::MklConvOp", "tensorflow::Conv2DOp")) for n in only_on + only_off), \
        (only_on, only_off)
    # at the default shape too, from the op rewrite record (no native layer there)
    small_on = load(cpu_traces[("tensorflow", on_variant, "conv2d", "functional")].path)
    small_off = load(cpu_traces[("tensorflow", "onednn-off", "conv2d", "functional")].path)
    assert split_kernels(small_on, small_off, "forward", k=K) == (
        ["Conv2D -> _MklNativeConv2D (oneDNN rewrite)"],
        ["Conv2D: the registry's CPU kernel, not rewritten to _MklNativeConv2D"])
    proc = dltrace("diff", str(off_path), str(on_path), "--pass", "forward", "--json")
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(proc.stdout)["kernels"]
    assert any("_MklNativeConv2D" in k for k in ran["B"]) and any("not rewritten" in k for k in ran["A"])
    assert not any("MklConvOp" in k for k in ran["A"]) and not any("tensorflow::Conv2DOp" in k for k in ran["B"])
    rep = framework_report("tensorflow", [on, off], [], k=K)
    rows = [d for d in rep.dispatch_points if d.a_kernels or d.b_kernels]
    assert rows, [(d.layer, d.display) for d in rep.dispatch_points]
    # the row names oneDNN's kernel on one side and Eigen's on the other: from the rewrite
    # record always, and by the sampled class names where py-spy caught them (a loaded
    # machine's samples can miss one: never the only evidence)
    sides = {*rows[0].a_kernels, *rows[0].b_kernels}
    assert any("_MklNativeConv2D" in k or "MklConvOp" in k for k in sides), sides
    assert any("not rewritten to _MklNativeConv2D" in k or "tensorflow::Conv2DOp" in k for k in sides), sides


def test_scorecard_measures_and_says_where_evidence_is_thin(native_traces, cpu_traces):
    traces = [load(r.path) for k, r in cpu_traces.items() if r.path and k[0] in ("torch", "chainer")]
    traces += [load(native_traces[("torch", "default")].path)]
    reports = [framework_report(n, [t for t in traces if t.meta["framework"] == n], [], k=K)
               for n in ("torch", "chainer")]
    rows = {r.framework: r for r in scorecard(reports, traces, ElfCode().sizes, k=K)}
    torch, chainer = rows["torch"].figures, rows["chainer"].figures
    assert list(torch) == list(COLUMNS)
    assert all(f.explain and f.link in ("dispatch-table", "audit-table", "primitives")
               for f in torch.values())
    assert int(torch["implement"].value) > 0 and int(torch["free"].value) > 0
    assert torch["bytes"].value.endswith("KiB") and int(torch["bytes"].value.split()[0]) > 0
    assert any("torch core" in d for d in torch["bytes"].details)
    # chainer decides in Python: its device branches are its decision sites, and their lines are measured
    assert int(chainer["decisions"].value) > 0 and int(chainer["lines"].value) > 0
    assert all(site.startswith("chainer.") for site in chainer["decisions"].items), chainer["decisions"].items
    # no dispatch table and no GPU evidence here: the operators its CPU path ran, said to
    # be that (not checked against a device build), never scored as simpler
    assert "recorded evidence" in chainer["implement"].explain
    assert "no GPU evidence derived" in chainer["implement"].thin
    assert "no GPU evidence" in chainer["coverage"].thin and "no ARM trace" in chainer["coverage"].thin


def test_index_opens_with_the_scorecard_for_every_framework(survey_report):
    page = survey_report.read_text()
    assert page.index('id="scorecard-table"') < page.index('id="framework-table"')
    table = page[page.index('id="scorecard-table"'):]
    table = table[: table.index("</table>")]
    assert set(re.findall(r'data-framework="(\w+)"', table)) == set(FRAMEWORKS)
    assert table.count('class="score"') == len(FRAMEWORKS) * len(COLUMNS)
    assert re.search(r"tensorflow.*?data-key=\"bytes\"><a [^>]*><b>[1-9]\d* KiB</b>", table, re.S)


def test_survey_json_and_the_verdict_count_decisions_only(survey_report):
    """The real survey: survey.json beside the index holds every headline figure with its
    definition, unit and list; no decision site of JAX comes from jit against eager;
    TensorFlow's kernel registry is one site however many ops it chooses for."""
    whole = json.loads((survey_report.parent / "survey.json").read_text())
    doc = whole["report"]
    assert whole["format"] == "dltrace-survey-record" and doc["schema_version"] == 1
    assert set(doc["frameworks"]) == set(FRAMEWORKS)
    assert sorted(doc["order"]["frameworks"]) == sorted(FRAMEWORKS)
    assert "no count ranks one framework above another" in doc["order"]["rule"]
    for name, fw in doc["frameworks"].items():
        assert set(fw["figures"]) == set(COLUMNS), name
        assert all(f["definition"] for f in fw["figures"].values()), name
        sites = fw["decision_sites"]
        assert len([s for s in sites if s["kind"] == "registry"]) <= 1, (name, sites)
        assert all(set(s["classes"]) <= {"device dispatch", "library choice", "ISA-specific code"} for s in sites)
    assert "compilation mode (jit vs eager)" in doc["frameworks"]["jax"]["splits_apart"]
    page = survey_report.read_text()
    assert page.index('id="verdict-table"') < page.index('id="verdict-grid"') < page.index('id="scorecard-table"')
    assert len(page.encode()) < 300_000
    assert all(p.stat().st_size < 3_000_000 for p in survey_report.parent.glob("*.html"))
