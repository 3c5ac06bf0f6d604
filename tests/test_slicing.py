"""tracer/importers/slicing.py on its own, on small Kineto documents written here: which
ops are a primitive's instances, which profiler step is sliced, how an op and the kernels
it launched become a tree, how a step's instances merge, and how a deep nest of backward
nodes is cut and kept once. Fast tier (but for one slow bound on a 60,000-deep nest)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tracer.importers import hierarchy, import_file, kineto
from tracer.importers.slicing import MAX_DEPTH, build_slices, choose_step, find_instances, op_tree
from tracer.importers.source import Source
from tracer.registry_entries import OpRule

CONV = OpRule("conv2d", forward=("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"),
              backward=("ConvolutionBackward0",))
EVALUATE = "autograd::engine::evaluate_function: "
MAIN, AUTOGRAD = 1, 2  # host threads


class Doc:
    """A Kineto document built event by event (times in microseconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.correlation = 0

    def op(self, name: str, ts: float, dur: float, tid: int = MAIN, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
                            "args": args})

    def step(self, n: int, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": ts, "dur": dur,
                            "pid": 1, "tid": MAIN})

    def kernel(self, name: str, launch_ts: float, tid: int = MAIN, dur: float = 2.5) -> None:
        self.correlation += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch_ts, "dur": 0.5,
                            "pid": 1, "tid": tid, "args": {"correlation": self.correlation}})
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "ts": launch_ts + 10, "dur": dur, "pid": 0,
                            "tid": 7, "args": {"correlation": self.correlation, "device": 0}})

    def conv(self, ts: float) -> None:
        """conv2d > convolution > _convolution > cudnn_convolution, which launches one kernel."""
        self.op("aten::conv2d", ts, 10)
        self.op("aten::convolution", ts + 1, 8)
        self.op("aten::_convolution", ts + 2, 6)
        self.op("aten::cudnn_convolution", ts + 3, 4)
        self.kernel("sm80_xmma_fprop_implicit_gemm", ts + 4)

    def backward(self, ts: float) -> None:
        self.op(EVALUATE + "ConvolutionBackward0", ts, 10, tid=AUTOGRAD)
        self.op("ConvolutionBackward0", ts + 1, 8, tid=AUTOGRAD)
        self.op("aten::convolution_backward", ts + 2, 6, tid=AUTOGRAD)
        self.kernel("dgrad_engine", ts + 3, tid=AUTOGRAD)

    def profile(self) -> tuple[kineto.KinetoProfile, hierarchy.Hierarchy]:
        data = json.dumps({"traceEvents": self.events}).encode()
        prof = kineto.parse(Source(Path("synthetic.json"), "0" * 64, len(data), False, data))
        return prof, hierarchy.build(prof)


def two_steps() -> Doc:
    """Step 1: conv forward and backward; step 2: the same, twice forward; step 3: forward only."""
    d = Doc()
    d.step(1, 0, 100)
    d.conv(10)
    d.backward(50)
    d.step(2, 100, 100)
    d.conv(110)
    d.conv(130)
    d.backward(150)
    d.step(3, 200, 100)
    d.conv(210)
    return d


def test_forward_instances_are_the_outermost_ops_and_backward_nodes_are_linked_by_name() -> None:
    _, hier = two_steps().profile()
    inst = find_instances(hier, CONV)
    assert [op.name for op in inst.forward] == ["aten::conv2d"] * 4  # never the convolution inside one
    assert [op.start for op in inst.forward] == [10, 110, 130, 210]
    assert inst.linked_by == "autograd node names"
    assert [b.name for b, f in inst.backward] == [EVALUATE + "ConvolutionBackward0"] * 2  # the engine's frame on top
    assert all(f is None for _, f in inst.backward) and inst.recomputed == []


def test_a_forward_op_rerun_inside_the_backward_pass_is_not_an_instance() -> None:
    d = Doc()
    d.conv(10)
    d.op(EVALUATE + "ReluBackward0", 50, 30, tid=AUTOGRAD)  # activation checkpointing reruns conv2d here
    d.op("aten::conv2d", 55, 10, tid=AUTOGRAD)
    inst = find_instances(d.profile()[1], CONV)
    assert [op.start for op in inst.forward] == [10]
    assert [op.start for op in inst.recomputed] == [55]


def test_the_last_step_with_both_passes_is_chosen() -> None:
    prof, hier = two_steps().profile()
    step, fwd, bwd = choose_step(find_instances(hier, CONV), prof.steps)
    assert step is not None and step.name == "ProfilerStep#2"  # step 3 is later but has no backward
    assert [op.start for op in fwd] == [110, 130] and [b.start for b in bwd] == [150]


def test_without_steps_the_whole_file_is_sliced() -> None:
    d = Doc()
    d.conv(10)
    d.conv(40)
    prof, hier = d.profile()
    step, fwd, bwd = choose_step(find_instances(hier, CONV), prof.steps)
    assert step is None and len(fwd) == 2 and bwd == []


def test_op_tree_hangs_each_kernel_under_the_op_that_launched_it() -> None:
    d = Doc()
    d.conv(10)
    _, hier = d.profile()
    counts: Counter[str] = Counter()
    kernels: Counter[str] = Counter()
    tree = op_tree(hier.by_name["aten::conv2d"][0], "NVIDIA", counts, kernels, "torch", frozenset({"aten"}))
    chain = [node for _, node in tree.walk()]
    assert [n.frame.name for n in chain] == ["aten::conv2d", "aten::convolution", "aten::_convolution",
                                             "aten::cudnn_convolution", "sm80_xmma_fprop_implicit_gemm"]
    assert chain[0].frame.module == "aten" and chain[0].time_ns == 10_000  # microseconds recorded, ns kept
    assert chain[-1].time_ns == 2_500 and chain[-1].frame.kind == "op"
    assert counts["kernel"] == 1 and kernels == Counter({"sm80_xmma_fprop_implicit_gemm": 1})


def test_op_tree_cuts_a_chain_deeper_than_max_depth_and_counts_the_cut() -> None:
    d = Doc()
    depth = MAX_DEPTH + 5
    for i in range(depth + 1):
        d.op(f"aten::level{i}", i * 0.01, 1000 - i * 0.02)
    _, hier = d.profile()
    counts: Counter[str] = Counter()
    tree = op_tree(hier.by_name["aten::level0"][0], "NVIDIA", counts, Counter(), "torch")
    assert max(level for level, _ in tree.walk()) == MAX_DEPTH
    assert counts["ops cut at depth"] == depth - MAX_DEPTH


def test_build_slices_merges_a_steps_instances_under_one_root() -> None:
    prof, hier = two_steps().profile()
    (sl,) = build_slices(prof, hier, "NVIDIA", "torch", (CONV,))
    assert sl.primitive == "conv2d" and sl.step == "ProfilerStep#2"
    fwd = sl.trees["forward"]
    assert fwd.frame.name == "conv2d.forward" and fwd.frame.kind == "root"
    (conv,) = fwd.children  # two instances, one path with counts
    assert conv.frame.name == "aten::conv2d" and conv.count == 2
    assert sl.stats["forward"]["layers"]["op"]["instances"] == 2
    assert sl.stats["backward"]["layers"]["op"]["linked_by"] == "autograd node names"
    assert sl.kernels == Counter({"sm80_xmma_fprop_implicit_gemm": 2, "dgrad_engine": 1})
    assert sl.trees["backward"].children[0].frame.name == EVALUATE + "ConvolutionBackward0"


def nested_backward_pairs(n: int) -> dict:
    """``n`` forward convolutions each linked by a fwdbwd flow to a backward node, the
    backward nodes nested one inside the next (2n deep) on the autograd thread."""
    ev: list[dict] = []
    for i in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
                   "args": {}})
        ev.append({"ph": "s", "cat": "fwdbwd", "id": i, "pid": 1, "tid": 1, "ts": 10 * i + 1})
    t = 10 * n + 100
    for i in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: ConvolutionBackward0",
                   "pid": 1, "tid": 2, "ts": t + 3 * i, "dur": 6 * n - 6 * i, "args": {}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "ConvolutionBackward0", "pid": 1, "tid": 2,
                   "ts": t + 3 * i + 0.5, "dur": 6 * n - 6 * i - 1, "args": {}})
        ev.append({"ph": "f", "cat": "fwdbwd", "id": i, "pid": 1, "tid": 2, "ts": t + 3 * i + 1, "bp": "e"})
    return {"traceEvents": ev}


def test_nested_backward_nodes_are_sliced_once_each(tmp_path):
    src = tmp_path / "nested.json"
    src.write_text(json.dumps(nested_backward_pairs(300)))
    (r,) = import_file(src, "torch")
    back = r.trace.layer("backward", "op")
    assert len(back.children) == 1  # the outermost node; the nodes inside it are in its tree, once
    info = r.trace.runs[1].stats["layers"]["op"] if r.trace.runs[1].pass_ == "backward" else None
    assert info is not None and info["instances"] == 1
    assert info["ops_cut_at_depth"] == 2 * 300 - 201  # the nest is 600 deep; 200 levels kept under the top
    depth = max(d for d, _ in back.walk())
    assert depth == 201


@pytest.mark.slow
def test_thirty_thousand_nested_pairs_import_in_seconds(tmp_path):
    src = tmp_path / "nested.json"
    src.write_text(json.dumps(nested_backward_pairs(30_000)))
    t0 = time.monotonic()
    (r,) = import_file(src, "torch")
    took = time.monotonic() - t0
    # a bound an order of magnitude above the 3 s measured, far below the 150 s of the quadratic walk
    assert took < 40, took
    assert r.trace.layer("backward", "op").children
