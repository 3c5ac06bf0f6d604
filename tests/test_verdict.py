"""The headline figures and the verdict on synthetic traces (no framework needed):
a decision site is counted once however many ops it chose for, what is no decision
is shown apart, a kernel cell never names a binding or a reference count, and the
index opens with the verdict, the grid and survey.json beside it."""

from __future__ import annotations

import json
import re

from tracer.contract import PRIMITIVES
from tracer.analysis.decisions import COMPILATION_MODE, PRECISION_MODE, decisions
from tracer.processing.kernel_names import implausible, not_a_kernel
from tracer.analysis.portability import framework_report
from tracer.processing.reach import native_kernels, suspect_kernels
from tracer.analysis.needs_figures import interface_entries
from tracer.analysis.scorecard import COLUMNS, HEADLINE, scorecard
from tracer.analysis.survey_model import assemble
from tracer.knowledge import knowledge
from tracer.render.report import render
from tracer.trace import Frame, Node, Run, Trace

K = knowledge()

META = {"framework": "torch", "framework_version": "2.13.0", "primitive": "conv2d", "api": "functional",
        "device": "cpu", "variant": "default", "shape": [2, 3, 8, 8], "machine": {"arch": "x86_64", "cpu": "test"}}


def op(name, *children, module="aten"):
    return Node(Frame("op", module, name), 1, 0, [], [], list(children))


def py(name, *children, file="fw/api.py", line=1):
    return Node(Frame("python", "torch.api", name, file, line), 1, 0, [], [line], list(children))


def step(name, *children):
    return Node(Frame("root", "", name), 1, 0, [], [], list(children))


def trace(layers_by_pass, **meta):
    runs = [Run(p, "warm", layers) for p, layers in layers_by_pass.items()]
    return Trace({**META, **meta}, runs, {})


def kernel(name):
    return op(name, module="cuda")


def torch_pair():
    """A conv2d step whose CPU and GPU paths part three times: _convolution's own code
    calls another op per device; tanh and add_ get another kernel from the registry."""
    cpu = step("conv2d.forward", op("aten::_convolution", op("aten::mkldnn_convolution")),
               op("aten::tanh"), op("aten::add_"))
    gpu = step("conv2d.forward", op("aten::_convolution", op("aten::cudnn_convolution", kernel("sm80_xmma_fprop"))),
               op("aten::tanh", kernel("tanh_kernel_cuda")), op("aten::add_", kernel("vectorized_elementwise_kernel")))
    return trace({"forward": {"op": cpu}}), trace({"forward": {"op": gpu}}, device="gpu")


def test_a_registry_choosing_kernels_for_many_ops_is_one_decision_site():
    rep = framework_report("torch", list(torch_pair()), [], k=K)
    assert len([p for p in rep.dispatch_points if p.layer == "op"]) == 3  # three rows in the page's table
    found = decisions(rep, k=K)
    sites = {s.site: s for s in found.sites}
    assert set(sites) == {"aten::_convolution", "op registry"}, sites
    assert sites["aten::_convolution"].kind == "op code"
    assert sites["op registry"].kind == "registry" and sites["op registry"].entries == ["aten::add_", "aten::tanh"]
    (row,) = scorecard([rep], list(torch_pair()), None, K)
    assert row.figures["decisions"].value == "2" and "1 registry (2 ops)" in row.figures["decisions"].explain


def test_jit_against_eager_and_version_differences_are_never_decisions():
    jit = step("conv2d.forward", py("apply", py("jitted_call", file="jax/pjit.py", line=9), file="jax/api.py"))
    eager = step("conv2d.forward", py("apply", py("eager_call", file="jax/core.py", line=3), file="jax/api.py"))
    jmeta = {"framework": "jax", "framework_version": "0.10.2"}
    variant = [trace({"forward": {"python": jit}}, **jmeta), trace({"forward": {"python": eager}}, **jmeta,
                                                                   variant="nojit")]
    rep = framework_report("jax", variant, [], k=K)
    assert rep.splits > 0
    found = decisions(rep, k=K)
    assert found.sites == [] and found.apart == {COMPILATION_MODE: rep.splits}
    # the same split between two versions of the framework is the versions' own code
    old = step("conv2d.forward", py("apply", py("bind_old", file="jax/core.py", line=5), file="jax/api.py"))
    new = step("conv2d.forward", py("apply", py("bind_new", file="jax/core.py", line=7), file="jax/api.py"))
    versions = [trace({"forward": {"python": old}}, **jmeta),
                trace({"forward": {"python": new}}, framework="jax", framework_version="0.11.2", device="gpu")]
    found = decisions(framework_report("jax", versions, [], k=K), K)
    assert found.sites == [] and set(found.apart) <= {"version difference", "unclassified"}, found.apart


def test_float32_against_bfloat16_is_never_a_decision():
    """torch's bf16 variant (frameworks.yaml switches: precision): the library picks other
    kernels for another element type; shown apart, never a decision site."""
    f32 = step("conv2d.forward", Node(Frame("op", "aten", "aten::_convolution"), 1, 0, children=[
        Node(Frame("op", "aten", "aten::mkldnn_convolution", lib="oneDNN"), 1, 0)]))
    bf16 = step("conv2d.forward", Node(Frame("op", "aten", "aten::_convolution"), 1, 0, children=[
        Node(Frame("op", "aten", "aten::mkldnn_convolution_bf16", lib="oneDNN"), 1, 0,
             children=[Node(Frame("op", "jit", "jit_bf16:avx512_core_bf16", lib="JIT code"), 1, 0)])]))
    tmeta = {"framework": "torch", "framework_version": "2.13.0"}
    rep = framework_report("torch", [trace({"forward": {"op": f32}}, **tmeta),
                                     trace({"forward": {"op": bf16}}, **tmeta, variant="bf16")], [], k=K)
    assert rep.splits > 0
    found = decisions(rep, k=K)
    assert found.sites == [] and found.apart == {PRECISION_MODE: rep.splits}, (found.sites, found.apart)


def test_a_kernel_cell_never_names_a_binding_refcount_accessor_or_helper():
    for name in ("c10::intrusive_ptr<c10::TensorImpl>::retain_", "c10::TensorOptions::device", "torch::getTHPDtype",
                 "mkl_serv_dsecnd", "nanobind::detail::getattr_or_raise", "jax::PyTreeDef::FlattenImpl",
                 "jax::Traceback::Get", "std::vector<long>::_M_realloc_insert", "dispatcher_vectorcall",
                 "pybind11::cpp_function::dispatcher", "absl::Mutex::Lock", "c10::ListType::~ListType",
                 "c10::SymBool::expect_true", "at::TensorBase::const_data_ptr<float>",
                 "jax::ArgumentSignature::operator==",
                 "absl::container_internal::raw_hash_set<P>::find<K>", "tsl::detail_robin_hash::robin_hash<K>::find",
                 "google::protobuf::internal::TcParser::MpVarint<false>", "tensorflow::swig::IsObjectProxy",
                 "mxnet::common::CastNonDefaultStorage", "tensorflow::EagerContext::GetCachedKernel",
                 "MakeTensorIDList"):
        assert not_a_kernel(name, k=K), name
    for name in ("at::native::cpu_kernel_vec", "sgemm_kernel_SKYLAKEX", "Eigen::internal::gebp_kernel",
                 "tensorflow::Conv2DOp<Eigen::ThreadPoolDevice, float>::Compute", "mxnet::op::UnaryOp::Compute<cpu>",
                 "dnnl::impl::cpu::x64::jit_uni_eltwise_fwd_t::execute", "__xla_cpu_runtime_EigenMatMulF32"):
        assert not not_a_kernel(name, k=K) and not implausible(name, k=K), name
    assert "complex" in implausible("ztrtri_LN_single", k=K) and implausible("dgemm_kernel", k=K)
    def leaf(name, lib, count):
        return Node(Frame("native", "", name, lib=lib), count, 0, [], [], [])

    native = Node(Frame("root", "", "conv2d.forward"), 100, 0, [], [], [
        Node(Frame("native", "", "at::native::conv", lib="libtorch_cpu.so"), 100, 0, [], [], [
            leaf("c10::intrusive_ptr<c10::TensorImpl>::retain_", "libc10.so", 40),
            leaf("ztrtri_LN_single", "libopenblas.so", 30), leaf("sgemm_kernel_SKYLAKEX", "libopenblas.so", 30)])])
    assert native_kernels(native, k=K) == [("sgemm_kernel_SKYLAKEX", 30)]
    assert [w.split(":")[0] for w in suspect_kernels(native, k=K)] == ["ztrtri_LN_single"]


def test_must_implement_entries_leave_out_compiler_artefacts_and_cpu_library_ops():
    ops = ["stablehlo.convolution", "fusion(kLoop)", "bitcast", "custom_jvp_call", "stop_gradient",
           "aten::mkldnn_convolution",
           "DeleteVariable", "Convolution (forward)", "aten::convolution_overrideable"]
    assert interface_entries(ops, k=K) == ["stablehlo.convolution", "Convolution (forward)",
                                      "aten::convolution_overrideable"]


def test_index_opens_with_the_verdict_and_the_grid_and_writes_survey_json(tmp_path):
    traces = list(torch_pair())
    rep = framework_report("torch", traces, [], k=K)
    cards = scorecard([rep], traces, None, K)
    index = render(assemble([rep], cards, [], knowledge()), tmp_path)
    page = index.read_text()
    assert page.index('id="verdict-table"') < page.index('id="scorecard-table"')
    assert page.index('id="verdict-grid"') < page.index('id="scorecard-table"')
    assert "Order, by what each must-implement list rests on, then by its size" in page
    assert "no count ranks one framework above another" in page
    # every grid cell links to a section its framework's page has
    torch_page = (tmp_path / "torch.html").read_text()
    links = re.findall(r'<a href="torch\.html#([^"]+)" class="grid-cell"', page)
    assert len(links) == sum(len(p.passes) for p in PRIMITIVES.values())  # every primitive's passes
    ids = set(re.findall(r'id="([^"]+)"', torch_page))
    assert "conv2d-functional-0-forward" in links and all(a in ids for a in links), set(links) - ids
    doc = json.loads((tmp_path / "survey.json").read_text())["report"]
    assert doc["schema_version"] == 1 and doc["order"]["frameworks"] == ["torch"] and doc["order"]["rule"]
    figures = doc["frameworks"]["torch"]["figures"]
    assert set(figures) == set(COLUMNS)
    assert all(figures[k]["definition"] and figures[k]["headline"] for k in HEADLINE)
    assert "<b>2</b> site(s)" in page  # the verdict counts what the scorecard counts
    assert figures["decisions"]["value"] == "2" and sorted(figures["decisions"]["items"]) == [
        "aten::_convolution", "op registry"]
    assert [s["site"] for s in doc["frameworks"]["torch"]["decision_sites"]] == ["op registry", "aten::_convolution"]


def test_a_repeated_failure_is_one_sentence(tmp_path):
    from tracer.gap import Gap

    why = "ImportError: libarmpl_lp64_mp.so: cannot open shared object file"
    gaps = [Gap("torch", "cpu", "default", p, "functional", why, cpu=c) for p in ("relu", "tanh", "dense")
            for c in ("a64fx", "neoverse-n1")]
    gaps.append(Gap("torch", "gpu", "default", "relu", "functional", "no GPU on this machine"))
    traces = list(torch_pair())
    rep = framework_report("torch", traces, gaps, k=K)
    render(assemble([rep], scorecard([rep], traces, None, K), [], knowledge()), tmp_path)
    for page in ("index.html", "torch.html"):
        text = (tmp_path / page).read_text()
        assert text.count(why) == 1 + (page == "torch.html"), page  # the gap table; the ARM audit's note
        assert text.count('class="gap-row"') == 2, page


def test_a_recorded_gpu_path_is_set_against_its_own_machines_cpu_path():
    """The survey's CPU path is torch 2.13 here; the GPU machine recorded 2.11 on both its
    CPU and GPU: the GPU path is set against that CPU path (like with like, named so), and
    the GPU machine's CPU path enters no other analysis."""
    here = {"machine": {"arch": "x86_64", "cpu": "this machine"}}
    there = {"framework_version": "2.11.0", "machine": {"arch": "x86_64", "cpu": "GPU host"}}
    cpu, gpu = torch_pair()
    survey_cpu = trace({"forward": {"op": cpu.runs[0].layers["op"]}}, **here)
    own_cpu = trace({"forward": {"op": cpu.runs[0].layers["op"]}}, **there)
    gpu_path = trace({"forward": {"op": gpu.runs[0].layers["op"]}}, device="gpu", **there)
    # GPU evidence derived on this machine (read, not run) is set against this machine's CPU path
    derived = trace({"forward": {"op": gpu.runs[0].layers["op"]}}, device="gpu", variant="registered",
                    evidence="registered", **here)
    rep = framework_report("torch", [survey_cpu, own_cpu, gpu_path, derived], [], k=K)
    (case,) = rep.cases
    assert [pr.kind for pr in case.pairs] == ["device", "device"]  # no machine pair with the GPU host's CPU path
    pr, other = case.pairs
    assert other.title == "cpu vs gpu registered" and other.a_label == "cpu"
    assert pr.title == "cpu (the GPU machine's own CPU, 2.11.0) vs gpu"
    assert all("framework_version" not in d.differs for d in pr.diffs.values())
    assert all("framework_version" not in d.differs for d in other.diffs.values())
    assert list(case.sides) == ["cpu", "gpu", "gpu registered"]
    assert rep.machines == ["x86_64 GPU host", "x86_64 this machine"]
    assert rep.versions == ["2.11.0", "2.13.0"]


def test_a_python_branch_is_a_device_decision_only_where_its_condition_names_a_device():
    from tracer.processing.candidates import Candidate
    from tracer.analysis.decisions import is_device_branch

    def cand(kind, condition):
        return Candidate("f", "fw/x.py", 1, 2, kind, condition, [], [], 1)

    assert is_device_branch(cand("if", "xp is cupy"))
    assert is_device_branch(cand("if", "x.device.type == 'cuda'"))
    assert not is_device_branch(cand("if", "config.eager_constant_folding.value"))  # compilation mode
    assert not is_device_branch(cand("if", "jit_enabled"))
    assert not is_device_branch(cand("if", "backend.is_keras_tensor(x)"))  # Keras's backend module
    assert is_device_branch(cand("if", "torch.cuda.is_available()")) and is_device_branch(cand("if", "x.device.type"))
    # a try whose device word is only the exception it catches decides nothing about the device
    assert not is_device_branch(cand("try", "try: out = f(x) … except stages.DeviceAssignmentMismatchError"))
    assert is_device_branch(cand("try", "try: import cupy … except ImportError"))


def test_machine_code_is_read_from_each_paths_own_shared_objects():
    """A GPU path recorded on another machine names its libc10.so there: this machine's
    libc10.so must not be read for it, nor the CPU path's left unmeasured because of it."""
    from dataclasses import dataclass, field

    @dataclass
    class Code:
        sizes: dict = field(default_factory=dict)
        missing: list = field(default_factory=list)
        error: str = ""

    def measure(path, size, names):
        if path == "/env/lib/libc10.so":
            return Code({n: 1024 for n in names})
        return Code(error="not on this machine")

    def native_trace(path, **meta):
        tree = Node(Frame("root", "", "conv2d.forward"), 10, 0, [], [], [
            Node(Frame("native", "", "at::native::conv", lib="libc10.so"), 10, 0, [], [], [])])
        t = Trace({**META, **meta, "native": {"lib_paths": {"libc10.so": {"path": path, "bytes": 5}}}},
                  [Run("forward", "warm", {"native": tree})], {})
        return t

    cpu = native_trace("/env/lib/libc10.so")
    gpu = native_trace("/gpu-host/env/lib/libc10.so", device="gpu")
    rep = framework_report("torch", [cpu, gpu], [], k=K)
    (row,) = scorecard([rep], [cpu, gpu], measure, k=K)
    fig = row.figures["bytes"]
    assert fig.value == "1 KiB" and not fig.thin, (fig.value, fig.thin, fig.details)
    assert any(d.startswith("gpu: not measured (libc10.so: not on this machine") for d in fig.details), fig.details
    # the CPU path's own file unreadable: no figure at all, never a partial one
    (row,) = scorecard([rep], [native_trace("/elsewhere/libc10.so"), gpu], measure, k=K)
    assert row.figures["bytes"].value == "—" and "not measured" in row.figures["bytes"].thin


def test_the_arm_verdict_names_what_runs_on_each_cpu_and_the_index_compares_like_with_like(tmp_path):
    """Neoverse-N1 runs conv2d forward on the Arm Compute Library and backward on oneDNN's
    reference code; the ARM wheel is another torch version, so the index counts no split."""
    def lib_layer(*calls):
        return Node(Frame("root", "", "conv2d"), 1, 0, [], [], [Node(Frame("library", "", c, lib="oneDNN"), 1)
                                                                 for c in calls])

    def cpu_trace(version, machine, fwd, bwd, **meta):
        t = trace({"forward": {"library": lib_layer(*fwd)}, "backward": {"library": lib_layer(*bwd)}},
                  framework_version=version, machine=machine, **meta)
        return t

    x86 = cpu_trace("2.13.0", {"arch": "x86_64", "cpu": "here"}, ["convolution brgconv:avx512_core"],
                    ["convolution brgconv_bwd_d:avx512_core"])
    n1_cpu = {"arch": "aarch64", "cpu": "Arm Neoverse-N1 (NEON only) (emulated)"}
    n1 = cpu_trace("2.9.1", n1_cpu, ["reorder jit:uni", "convolution indirect_gemm:acl"],
                   ["convolution gemm:ref (backward_data)"], emulated={"cpu": "neoverse-n1"})
    rep = framework_report("torch", [x86, n1], [], k=K)
    from tracer.analysis.verdict import arm_verdicts
    found = {(a.pass_, a.verdict, a.name) for a in arm_verdicts(rep)}
    assert found == {("forward", "ACL", "convolution indirect_gemm:acl"),
                     ("backward", "reference fallback", "convolution gemm:ref (backward_data)")}
    render(assemble([rep], scorecard([rep], [x86, n1], None, K), [], knowledge()), tmp_path)
    page = (tmp_path / "index.html").read_text()
    cell = page[page.index('class="small arm-cross"'):]
    cell = cell[: cell.index("</td>")]
    assert "reference fallback" in cell and "gemm:ref (backward_data)" in cell and "ACL" in cell
    assert "versions differ (x86 2.13.0, ARM 2.9.1)" in cell and not re.search(r"\d+ splits", cell)
    verdict = page[page.index('id="verdict-table"'):page.index("</table>", page.index('id="verdict-table"'))]
    assert "reference: conv2d backward on neoverse-n1: convolution gemm:ref (backward_data)" in verdict
    # one release in two builds (x86's CPU build, aarch64's CUDA build) is like with like: the split counts
    x86b = cpu_trace("2.13.0+cpu", {"arch": "x86_64", "cpu": "here"}, ["convolution brgconv:avx512_core"],
                     ["convolution brgconv_bwd_d:avx512_core"])
    n1b = cpu_trace("2.13.0+cu130", n1_cpu, ["reorder jit:uni", "convolution indirect_gemm:acl"],
                    ["convolution gemm:ref (backward_data)"], emulated={"cpu": "neoverse-n1"})
    rep = framework_report("torch", [x86b, n1b], [], k=K)
    render(assemble([rep], scorecard([rep], [x86b, n1b], None, K), [], knowledge()), tmp_path / "builds")
    page = (tmp_path / "builds" / "index.html").read_text()
    cell = page[page.index('class="small arm-cross"'):]
    cell = cell[: cell.index("</td>")]
    assert "versions differ" not in cell and re.search(r"library, \d+ splits", cell), cell
    assert "torch: one release in two builds (x86 cpu, ARM cu130): its splits count" in page


def test_a_call_graph_is_drawn_once_a_page(tmp_path):
    cpu, gpu = torch_pair()
    both = [trace({p: {"op": t.runs[0].layers["op"]} for p in ("forward", "backward")}, **(
        {"device": "gpu"} if t is gpu else {})) for t in (cpu, gpu)]
    rep = framework_report("torch", both, [], k=K)
    render(assemble([rep], scorecard([rep], both, None, K), [], knowledge()), tmp_path)
    page = (tmp_path / "torch.html").read_text()
    assert page.count('<div class="graph"><svg') == 1
    assert 'the same call graph as <a href="#conv2d-functional-0-forward">' in page


def test_primitives_not_planned_on_arm_are_said_to_be_that_not_a_gap():
    cpu, _ = torch_pair()
    layers = {"forward": {"op": cpu.runs[0].layers["op"]}}
    n1 = {"machine": {"arch": "aarch64", "cpu": "Neoverse-N1 (emulated)"}, "emulated": {"cpu": "neoverse-n1"}}
    traces = [trace(layers), trace(layers, primitive="relu"), trace(layers, **n1)]
    rep = framework_report("torch", traces, [], k=K)
    (row,) = scorecard([rep], traces, None, K)
    assert "ARM: 1 of 2 primitives traced, 1 not planned there" in row.figures["coverage"].thin


def test_the_order_never_compares_counts_in_different_units():
    """torch's 47 ATen ops against JAX's 32 StableHLO ops is no comparison: two frameworks
    whose lists rest on one kind of evidence are ordered by their decision sites (a unit
    every framework shares), however long their lists."""
    from tracer.analysis.verdict import FrameworkVerdict, _order_key

    def v(name: str, implement: str, unit: str, sites: int) -> FrameworkVerdict:
        return FrameworkVerdict(name, name, [], implement, unit, "run", True, [], [], "", "recorded", sites, sites)

    short = v("jax", "32", "StableHLO ops", 5)
    long = v("torch", "47", "ATen ops", 2)
    assert sorted([short, long], key=_order_key) == [long, short]
    assert sorted([v("torch", "4700", "ATen ops", 2), short], key=_order_key)[0].framework == "torch"
