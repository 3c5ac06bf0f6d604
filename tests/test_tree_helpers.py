"""The call-tree helpers several stages share (tracer.processing.tree) and the compact
views of a sampled native layer built on them (tracer.processing.compact), on small
trees: a frame looked through gives its samples to what it hid, and a pruned view says
how much it left out, so that neither view loses or invents a sample. Fast tier."""

from __future__ import annotations

from tracer.knowledge import knowledge
from tracer.processing.compact import hide_plumbing, prune, short_symbol
from tracer.processing.tree import splice, total_samples
from tracer.trace import Frame, Node


def native(name: str, count: int, *children: Node, lib: str = "libtorch_cpu.so") -> Node:
    return Node(Frame("native", lib, name), count, 0, children=list(children))


def test_splice_moves_hidden_frames_children_up_and_merges_them():
    root = Node(Frame("root", "", "step"), 10, 0, children=[
        native("conv", 4),
        native("glue", 6, native("conv", 3), native("gemm", 2), lib="libc.so.6"),
    ])
    out = splice(root, lambda f: f.name == "glue")
    assert [(c.frame.name, c.count) for c in out.children] == [("conv", 7), ("gemm", 2)]
    assert [c.frame.name for c in root.children] == ["conv", "glue"]  # the input is left as it was


def test_hide_plumbing_looks_through_libc_frames():
    root = Node(Frame("root", "", "step"), 10, 0, children=[
        native("memcpy", 6, native("conv", 5), lib="libc.so.6")])
    out = hide_plumbing(root, k=knowledge())
    assert [(c.frame.name, c.count) for c in out.children] == [("conv", 5)]


def test_prune_drops_small_subtrees_and_counts_their_frames():
    root = Node(Frame("root", "", "step"), 100, 0, children=[
        native("conv", 90, native("kernel", 90)),
        native("malloc", 4, native("brk", 4), native("mmap", 1)),
    ])
    out, dropped = prune(root, 0.05)
    assert [c.frame.name for c in out.children] == ["conv"] and dropped == 3
    assert total_samples(out) == 100
    assert prune(root, 0.0)[1] == 0


def test_short_symbol_drops_nested_template_arguments_and_cuts_to_width():
    name = "Conv2DOp<Eigen::ThreadPoolDevice, std::vector<float>>::Compute"
    assert short_symbol(name) == "Conv2DOp<…>::Compute"
    cut = short_symbol("f" * 200, width=20)
    assert len(cut) == 20 and cut.endswith("…")
