"""The user's workload without a framework: how a reference names a file and function
(tracer.contract.UserWorkload), what the registry accepts as an example or an extra,
the per-op table's files (tracer.render.coverage_export), the workload's
coverage and layer costs read from traces (tracer.analysis.workload_coverage), and
the fleet's rule that a worker runs only workloads its own side has. Fast tier."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tracer import fleet, registry
from tracer import survey as sv
from tracer.contract import USER_API, UserWorkload, WorkloadError
from tracer.analysis.arm_ops import arm_op_table
from tracer.analysis.workload_coverage import CoverageRow, WorkloadCoverage, coverage, layer_costs
from tracer.registry import RegistryError
from tracer.render import coverage_export
from tracer.runner import CaseSpec
from tracer.trace import Frame, Node, Run, Trace

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, file, name, function", [
    ("model.py", "model.py", "model", "workload"),
    ("dir/my-net.py:train_step", "dir/my-net.py", "my-net-train_step", "train_step"),
    ("a:b/model.py", "a:b/model.py", "model", "workload"),  # a colon in a folder's name is the path's
])
def test_a_reference_names_its_file_and_function(tmp_path, text, file, name, function):
    w = UserWorkload.parse(text, base=str(tmp_path))
    assert (w.file, w.name, w.function) == (str(tmp_path / file), name, function)
    assert UserWorkload.from_json(w.to_json()) == w


@pytest.mark.parametrize("text, name, said", [
    ("model.txt", None, "give a Python file"),
    ("model.py:1bad", None, "not a Python function name"),
    ("relu.py", None, "built-in primitive's or model's"),
    ("LeNet.py", None, "built-in primitive's or model's"),
    ("x.py", "two words", "letters, digits"),
    ("x.py", "a" * 65, "at most 64"),
    ("x.py", "../escape", "letters, digits"),
])
def test_a_reference_that_names_no_workload_is_refused(text, name, said):
    with pytest.raises(WorkloadError, match=said):
        UserWorkload.parse(text, name)


def test_the_registry_declares_an_example_per_framework_with_its_extras():
    fws = registry.load()
    for name, fw in fws.items():
        assert fw.examples, f"{name} has no example"
        for ex in fw.examples.values():
            assert ex.path.is_file() and ex.path.is_relative_to(ROOT / "examples")
            assert all(x in fw.extras for x in ex.extras)
    # what an example needs beyond the framework is pinned to the framework's build
    assert fws["torch"].extras["torchvision"].requirements == ("torchvision==0.28.0",)
    assert fws["torch"].extras_for(str(fws["torch"].examples["resnet18"].path)) == ("torchvision",)
    assert fws["torch"].extras_for("/elsewhere/resnet18.py") == ()


@pytest.mark.parametrize("entry, said", [
    ("examples: {x: {file: /etc/passwd.py}}", "must be a Python file under examples/"),
    ("examples: {x: {file: examples/../../x.py}}", "must be a Python file under examples/"),
    ("examples: {x: {file: examples/x.py, extras: [nope]}}", "names extra 'nope'"),
    ("extras: {tv: {requirements: ['--index-url=http://x/ tv']}}", "is not a requirement specifier"),
    ("extras: {tv: {requirements: [tv], unknown: 1}}", "unknown field 'unknown'"),
])
def test_the_registry_refuses_a_bad_example_or_extra(tmp_path, entry, said):
    reg = tmp_path / "frameworks.yaml"
    reg.write_text("frameworks:\n  fw:\n    import: json\n    version: '0'\n    probe: tests.crashprobe\n"
                   "    install: [{requirements: [nothing]}]\n    devices: {cpu: cpu}\n    source_roots: [json]\n"
                   f"    apis: [functional]\n    {entry}\n")
    with pytest.raises(RegistryError, match=said):
        registry.load(reg)


def test_the_table_is_csv_a_spreadsheet_will_not_run():
    cov = WorkloadCoverage("torch", "net", "standin", [
        CoverageRow("aten::relu_", "aten::relu_", "", ["forward"], 3, [], True),
        CoverageRow("=HYPERLINK(1)", "=HYPERLINK(1)", "", ["backward"], 1, ["lenet", "relu"], False),
    ])
    rows = list(csv.reader(io.StringIO(coverage_export.to_csv(cov))))
    assert rows[0] == list(coverage_export.COLUMNS)
    assert rows[1] == ["aten::relu_", "aten::relu_", "", "forward", "3", "", "yes", ""]
    assert rows[2][0] == "'=HYPERLINK(1)" and rows[2][5] == "lenet;relu" and rows[2][6] == "no"
    doc = coverage_export.to_json(cov)
    assert doc["coverage_version"] == coverage_export.COVERAGE_VERSION and doc["rows"][0]["beyond_built_in"]


def test_no_cell_of_the_table_starts_a_row_or_a_formula():
    """Names from a trace written elsewhere: a bare CR would start a row in a reader that
    splits on it, whose first cell a spreadsheet runs; every text column is made inert."""
    evil = "x\r=cmd|' /C calc'!A0"
    cov = WorkloadCoverage("torch", "net", "standin", [
        CoverageRow(evil, evil, "@SUM(1)", ["+forward"], 1, ["-lenet"], True)], incomplete="=why\n@")
    text = coverage_export.to_csv(cov)
    assert "\r=" not in text and "\n=" not in text and "\n@" not in text
    for line in text.split("\r\n")[:-1]:  # RFC 4180: CRLF ends each row, and no other CR or LF is left
        assert "\r" not in line and "\n" not in line
    row = next(csv.reader(io.StringIO(text.split("\r\n")[1])))
    assert row[0] == "x\ufffd=cmd|' /C calc'!A0"
    assert all(not cell.startswith(("=", "+", "-", "@")) for cell in row), row


@pytest.mark.parametrize("workload, framework", [
    ("../../ESCAPED", "torch"), ("/tmp/abs", "torch"), ("net", "../up"), ("a/b", "torch"), ("..", "torch"),
    ("x" * 100_000, "torch"), (".hidden", "torch"),
])
def test_the_tables_files_stay_in_their_folder(tmp_path, workload, framework):
    folder = tmp_path / "out" / "workloads"
    folder.mkdir(parents=True)
    cov = WorkloadCoverage(framework, workload, "standin", [CoverageRow("aten::relu_", "aten::relu_", "", [], 1, [])])
    paths = coverage_export.write(cov, folder, set())
    for p in paths:
        assert p.parent == folder and p.is_file() and not p.name.startswith(".") and len(p.name) < 120
    assert sorted(x.name for x in tmp_path.rglob("*") if x.is_file()) == sorted(p.name for p in paths)


def test_two_workloads_whose_names_join_alike_keep_both_tables(tmp_path):
    taken: set[str] = set()
    rows = [CoverageRow("aten::relu_", "aten::relu_", "", [], 1, [])]
    first = coverage_export.write(WorkloadCoverage("c", "a-b", "cpu", rows), tmp_path, taken)
    second = coverage_export.write(WorkloadCoverage("b-c", "a", "cpu", rows), tmp_path, taken)
    again = coverage_export.write(WorkloadCoverage("c", "a-b", "cpu", rows), tmp_path, taken)  # the same pair twice
    assert len({first[0], second[0], again[0]}) == 3 and len(list(tmp_path.iterdir())) == 6
    # a plain name keeps its plain file name
    assert coverage_export.write(WorkloadCoverage("torch", "torch_mlp", "cpu", rows), tmp_path)[0].name \
        == "torch_mlp-torch.coverage.csv"


def _trace(primitive: str, device: str, ops: dict[str, list[str]], reached: dict[str, list[str]] | None = None,
           stats: dict | None = None) -> Trace:
    runs = []
    for pass_, names in ops.items():
        root = Node(Frame("root", "", f"{primitive}.{pass_}"), 1, 0,
                    children=[Node(Frame("op", "aten", n), 2, 0) for n in names])
        runs.append(Run(pass_, "warm", {"op": root}, dict(stats or {})))
    meta = {"framework": "torch", "primitive": primitive, "api": USER_API if primitive == "net" else "functional",
            "device": device, "variant": "default", "passes": list(ops)}
    if reached is not None:
        meta["standin"] = {"reached": reached}
    return Trace(meta, runs)


def test_coverage_names_the_builtin_cases_that_name_each_entry():
    net = _trace("net", "standin", {"forward": ["aten::relu_", "aten::addmm.out"]},
                 {"setup": ["aten::_copy_from"], "forward": ["aten::relu_", "aten::addmm.out"]})
    dense = _trace("dense", "standin", {"forward": ["aten::addmm.out"]}, {"setup": ["aten::_copy_from"]})
    relu_cpu = _trace("relu", "cpu", {"forward": ["aten::relu"]})  # the CPU path's op: no overload, not relu_
    emulated = _trace("tanh", "cpu", {"forward": ["aten::relu_"]})
    emulated.set_meta("emulated", {"cpu": "a64fx", "model": "A64FX"})  # an emulated path is no list's source
    items = ["aten::_copy_from", "aten::relu_", "aten::addmm.out"]
    cov = coverage("torch", "net", items, [net], [dense, relu_cpu, emulated])
    by = {r.op: r for r in cov.rows}
    assert by["aten::addmm.out"].also_in == ["dense"] and by["aten::addmm.out"].overload == "out"
    assert by["aten::addmm.out"].name == "aten::addmm" and by["aten::addmm.out"].calls == 2
    assert by["aten::relu_"].also_in == [] and cov.beyond == ["aten::relu_"]
    assert by["aten::_copy_from"].passes == ["setup"] and by["aten::_copy_from"].also_in == ["dense"]
    # the lists set apart upstream (the same unit) decide what is beyond, where given
    given = coverage("torch", "net", items, [net], [dense], beyond=["aten::addmm.out"])
    assert given.beyond == ["aten::addmm.out"]


def test_a_compilers_per_op_record_fills_the_arm_columns_and_its_own_code_calls_no_library():
    """JAX's per-op record is the op layer's (what XLA:CPU compiled each StableHLO op
    into): XLA's own fusions are the framework's own code, a library fusion a library."""
    def compiled(per_op: dict[str, list[str]], emulated: bool) -> Trace:
        doc = {op: {"count": 1, "calls": {c: 1 for c in calls}} for op, calls in per_op.items()}
        t = _trace("net", "cpu", {"forward": list(per_op)}, stats={"layers": {"op": {"per_op": doc}}})
        t.set_meta("framework", "jax")
        t.set_meta("machine", {"arch": "aarch64" if emulated else "x86_64"})
        if emulated:
            t.set_meta("emulated", {"cpu": "neoverse-n1", "model": "Neoverse-N1"})
        return t

    host = compiled({"stablehlo.dot_general": ["YNNPACK: __ynn_fusion"], "stablehlo.add": ["XLA: fusion(kLoop)"]},
                    False)
    arm = compiled({"stablehlo.dot_general": ["XLA: fusion(kLoop)"], "stablehlo.add": ["XLA: fusion(kLoop)"]}, True)
    table = arm_op_table([host, arm])
    assert table is not None and table.machines == ["x86_64 (this machine)", "neoverse-n1 (emulated)"]
    flags = {r.op: r.flags for r in table.rows}
    assert flags["stablehlo.dot_general"] == {"neoverse-n1 (emulated)": [
        "no library (this machine: YNNPACK: __ynn_fusion)"]} and flags["stablehlo.add"] == {}
    cov = coverage("jax", "net", ["stablehlo.add", "stablehlo.dot_general", "stablehlo.constant"], [host], [],
                   arm=table)
    by = {r.op: r.arm for r in cov.rows}
    assert by["stablehlo.add"] == {m: "XLA: fusion(kLoop)" for m in table.machines}
    assert by["stablehlo.dot_general"]["neoverse-n1 (emulated)"].startswith("XLA: fusion(kLoop); no library")
    assert by["stablehlo.constant"] == {}  # folded into the program: no CPU op of its name


def test_layer_costs_read_each_layers_factor_and_tolerate_odd_stats():
    t = _trace("net", "cpu", {"forward": ["aten::relu"]},
               stats={"untraced_s": 0.01, "overhead": 1.5, "layers": {"op": {"seconds": 0.02},
                                                                      "native": {"slowdown": 3.0}}})
    (c,) = layer_costs(t)  # a trace of before the pairs: one timing each side, no spread
    assert (c.pass_, c.untraced_s, c.python.factor, c.op.factor, c.native.factor) == ("forward", 0.01, 1.5, 2.0, 3.0)
    assert (c.python.said, c.op.said) == ("×1.50", "×2.00")
    odd = _trace("net", "cpu", {"forward": ["x"]}, stats={"untraced_s": True, "layers": {"op": "nope"}})
    (c,) = layer_costs(odd)
    assert (c.untraced_s, c.python.factor, c.op.factor, c.native.factor) == (None, None, None, None)
    assert c.python.said == "not measured"


def test_a_cost_is_a_paired_median_and_noise_is_never_a_cost():
    """The harness's stats (tracer.collect.costs): the median of the pairs' ratios with
    their quartiles. A factor under 1, or one whose quartiles reach 1, is within noise."""
    t = _trace("net", "cpu", {"forward": ["aten::relu"]},
               stats={"untraced_s": 0.01, "overhead": 1.43, "overhead_spread": [1.3, 1.6],
                      "layers": {"op": {"seconds": 0.5, "overhead": 0.79, "overhead_spread": [0.7, 0.9]},
                                 "native": {"slowdown": 0.64}}})
    (c,) = layer_costs(t)
    assert c.python.said == "×1.43 (×1.30–×1.60)"
    assert c.op.said == "within noise (×0.70–×0.90)"  # the paired factor, never seconds / untraced (×50)
    assert c.native.said == "within noise"
    from tracer.analysis.workload_coverage import Cost
    assert Cost(1.1, 0.97, 1.2).said == "within noise (×0.97–×1.20)" and not Cost(1.1, 1.02, 1.2).noise


def test_the_native_cost_has_the_spread_of_its_windows_over_both_unsampled_timings():
    """py-spy's slowdown: each sampled window's time per iteration over the unsampled loop's
    time before py-spy attached and after it left, both halves' windows together; the
    quartiles are its spread, and a spread reaching 1 is within noise."""
    from tracer.collect.attribution import merge_stats

    halves = [{"slowdown": 1.5, "slowdowns": [1.2, 1.6, 1.4, 1.9]},
              {"slowdown": 1.7, "slowdowns": [1.5, 1.8, 1.3, 2.0]}]
    merged = merge_stats(halves)
    assert merged["slowdowns"] == [1.2, 1.6, 1.4, 1.9, 1.5, 1.8, 1.3, 2.0]
    assert (merged["slowdown_low"], merged["slowdown_high"]) == (1.375, 1.825)
    t = _trace("net", "cpu", {"forward": ["aten::relu"]},
               stats={"untraced_s": 0.01, "layers": {"native": {"slowdown": merged["slowdown"],
                                                               "slowdown_low": merged["slowdown_low"],
                                                               "slowdown_high": merged["slowdown_high"]}}})
    (c,) = layer_costs(t)
    assert c.native.said == "×1.60 (×1.38–×1.82)"
    drifted = merge_stats([{"slowdown": 1.2, "slowdowns": [0.9, 1.5]}, {"slowdown": 1.3, "slowdowns": [0.95, 1.6]}])
    t = _trace("net", "cpu", {"forward": ["x"]}, stats={"layers": {"native": drifted}})
    assert layer_costs(t)[0].native.said.startswith("within noise (×0.")
    assert "slowdown_low" not in merge_stats([{"slowdown": 2.0}])  # a trace of before: no spread


def test_paired_timing_alternates_its_order_and_reads_the_median_block_ratio():
    """ABBA: the pairs' order alternates, each two pairs of opposite order are one block
    whose ratio (the geometric mean of the two) cancels an order's bias; the cost is the
    blocks' median, with their quartiles; the collector is off while timing."""
    import gc

    from tracer.collect import costs

    calls: list[str] = []
    gc_on: list[bool] = []

    def side(name: str, seconds: list[float]):
        def step() -> float:
            calls.append(name)
            gc_on.append(gc.isenabled())
            return seconds[len([c for c in calls if c == name]) - 1]
        return step

    # the second side of each pair pays 1.2: the per-pair ratios swing, the blocks' do not
    got = costs.paired(side("u", [1.2, 1.0, 1.2, 1.0, 1.2, 1.0]), side("t", [1.8, 1.5, 1.8, 1.5, 1.8]),
                       lambda: None, first=1.5, least=5, most=5)
    assert calls == ["u", "u", "t", "t", "u", "u", "t", "t", "u", "u", "t"]  # T(kept) U, U T, T U, U T, ...
    assert got["pairs"] == 6 and got["overhead"] == pytest.approx(1.5) and got["overhead_spread"] == \
        pytest.approx([1.5, 1.5])
    assert not any(gc_on) and gc.isenabled()
    calls.clear()
    costs.paired(side("u", [1.0] * 9), side("t", [2.0] * 9), lambda: None, least=2, most=2, warmup=1)
    assert calls == ["u", "t", "u", "t", "t", "u"]  # one untimed step of each side, then U T, T U


def test_a_fleet_worker_runs_only_workloads_under_its_folders(tmp_path, monkeypatch):
    fw = registry.load()["torch"]
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir(), other.mkdir()
    (mine / "net.py").write_text("")
    (other / "net.py").write_text("")
    job = sv.Job(fw, "cpu", "default", (CaseSpec("net", USER_API, user=UserWorkload.parse(str(mine / "net.py"))),))
    assert fleet.needs(job)[fleet.WORKLOAD_RESOURCE] == 1
    assert fleet.WORKLOAD_RESOURCE not in fleet.needs(sv.Job(fw, "cpu", "default", (CaseSpec("relu"),)))
    monkeypatch.delenv(fleet.WORKLOADS_ENV, raising=False)
    assert not fleet._allowed(str(mine / "net.py"))
    monkeypatch.setenv(fleet.WORKLOADS_ENV, str(mine))
    assert fleet._allowed(str(mine / "net.py")) and not fleet._allowed(str(other / "net.py"))
    link = mine / "link.py"
    link.symlink_to(other / "net.py")  # a link out of the folder is where it points
    assert not fleet._allowed(str(link))


def test_a_survey_plan_runs_workloads_where_models_run(tmp_path):
    fw = registry.load()["torch"]
    w = UserWorkload.parse(str(tmp_path / "net.py"))
    jobs = sv.plan([fw], ["relu"], ["cpu", "standin"], native=True, workloads={"torch": [w]})
    where = {(j.device, j.variant): [c for c in j.cases if c.user is not None] for j in jobs}
    assert [c.layers for c in where[("cpu", "default")]] == [("python", "op", "library", "native")]
    assert [c.layers for c in where[("standin", "default")]] == [("python", "op")]
    assert not where[("cpu", "onednn-off")] and all(c.slug() == "net-user" for c in where[("cpu", "default")])
    no_native = sv.plan([fw], ["relu"], ["cpu"], native=False, variants=False, workloads={"torch": [w]})
    assert [c.layers for j in no_native for c in j.cases if c.user] == [("python", "op", "library")]
    # a workload runs in a probe process of its own: it cannot change a built-in case's trace
    assert all(len(j.cases) == 1 for j in jobs + no_native if any(c.user for c in j.cases))


def test_the_probe_prints_each_cost_as_the_audit_words_it():
    """dltrace probe's trees (tracer.render.console) word each layer's cost as Cost.said: no bare factor."""
    import io

    from rich.console import Console

    from tracer.knowledge import knowledge
    from tracer.render.console import print_trace

    stats = {"untraced_s": 0.01, "traced_s": 0.0143, "overhead": 1.43, "overhead_spread": [1.3, 1.6], "pairs": 6,
             "layers": {"op": {"seconds": 0.5, "overhead": 0.79, "overhead_spread": [0.7, 0.9]},
                        "native": {"slowdown": 0.64, "sampled": True}}}
    t = _trace("net", "cpu", {"forward": ["aten::relu"]}, stats=stats)
    run = t.runs[0]
    run.layers["python"] = run.layers["native"] = Node(Frame("root", "", "net.forward"), 1, 0)
    out = io.StringIO()
    print_trace(t, Console(file=out, width=300, color_system=None), layers=("python", "op", "native"), k=knowledge())
    text = " ".join(out.getvalue().split())
    assert "medians of 6 paired steps; recording cost (quartiles): ×1.43 (×1.30–×1.60)" in text
    assert "(the step under the profiler, median of paired steps, quartiles): within noise (×0.70–×0.90)" in text
    assert "recording cost within noise (the sampled loop over the unsampled)" in text
    assert "×0.79" not in text and "×0.6" not in text  # a factor under 1 is never shown as a cost


def test_ops_a_graph_placed_on_the_host_are_said_beside_the_list():
    """A TensorFlow stand-in run whose tf.function placed ops on the host (meta.standin.host):
    the coverage says which, by pass, in the audit's model and the JSON export; they are not
    on the list (the device never ran them)."""
    root = Frame("root", "", "net.forward")
    ops = Node(root, 1, 0, children=[Node(Frame("op", "tf", "MatMul"), 1, 0)])
    meta = {"framework": "tensorflow", "primitive": "net", "api": USER_API, "device": "standin", "variant": "default",
            "shape": [], "passes": ["forward"], "standin": {"host": {"setup": ["HashTableV2"],
                                                                   "forward": ["LookupTableFindV2"]}}}
    standin = Trace(meta, [Run("forward", "warm", {"python": Node(root), "op": ops}, {})])
    cov = coverage("tensorflow", "net", ["MatMul"], [standin], [])
    assert cov.host == {"HashTableV2": ["setup"], "LookupTableFindV2": ["forward"]}
    assert [r.op for r in cov.rows] == ["MatMul"]
    assert coverage_export.to_json(cov)["placed_on_host"] == cov.host
