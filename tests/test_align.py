"""tracer/processing/diff/align.py on its own: how two trees of one layer are aligned
(roots whatever their names, children by normalised identity in any order, repeated
identities merged, noise set aside) and what the LayerDiff counts. The diff's rules on
top (classification, sampling evidence) are tests/test_diff_synthetic.py's. Fast tier."""

from __future__ import annotations

from tracer.processing.diff.align import _above_count, _group, _without, diff_trees
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node

K = knowledge()


def n(name: str, *children: Node, kind: str = "python", count: int = 1, lib: str = "") -> Node:
    return Node(Frame(kind, "fw" if kind == "python" else "", name, lib=lib), count, 1000 * count,
                children=list(children))


def test_roots_align_whatever_their_names() -> None:
    d = diff_trees(n("conv2d.forward", n("f", n("g"))), n("other.step", n("f", n("g"))), k=K)
    assert d.splits == [] and d.shared == d.nodes_a == d.nodes_b == 3


def test_children_align_by_identity_in_any_order() -> None:
    a = n("step", n("f"), n("g"), n("h"))
    b = n("step", n("h"), n("f"), n("g"))
    d = diff_trees(a, b, k=K)
    assert d.splits == [] and d.shared == 4


def test_a_one_sided_child_is_a_split_at_its_parent_and_the_counts_say_so() -> None:
    a = n("step", n("dispatch", n("common"), n("cpu_kernel", n("omp"))))
    b = n("step", n("dispatch", n("common"), n("gpu_kernel")))
    d = diff_trees(a, b, k=K)
    (split,) = d.splits
    assert split.frame.endswith("dispatch") and split.depth == 1
    assert [br.label for br in split.only_a][0].endswith("cpu_kernel")
    assert [br.label for br in split.only_b][0].endswith("gpu_kernel")
    assert (d.nodes_a, d.nodes_b, d.shared) == (5, 4, 3)  # step, dispatch, common aligned


def test_a_split_below_a_split_nests_under_the_first_decision() -> None:
    a = n("step", n("x", n("y", n("a1"))), n("z"))
    b = n("step", n("x", n("y", n("b1"))))
    d = diff_trees(a, b, k=K)
    levels = [(level, s.frame.rsplit(".", 1)[-1]) for level, s in d.all_splits()]
    assert levels[0] == (0, "step") and (1, "y") in levels


def test_identities_are_normalised_before_alignment() -> None:
    """Native frames without a symbol are one frame per library; addresses never split."""
    a = n("step", n("0x7f00aa01", kind="native", lib="libdnnl.so.3"), kind="root")
    b = n("step", n("0x7f99bb02", kind="native", lib="libdnnl.so.3"), kind="root")
    d = diff_trees(a, b, "native", sampled=False, k=K)
    assert d.splits == [] and d.shared == 2


def test_group_merges_repeated_identities_into_a_list() -> None:
    x, y, z = n("x"), n("y"), n("z")
    groups = _group([1, 2, 1], [x, y, z])
    assert groups == {1: [x, z], 2: y}


def test_without_sets_noise_aside_and_keeps_the_rest() -> None:
    groups = {1: "a", 2: "b", 3: ["c", "d"]}
    assert _without(groups, {9}) == (groups, [])
    kept, noise = _without(groups, {3})
    assert kept == {1: "a", 2: "b"} and noise == [["c", "d"]]


def test_above_count_prunes_below_the_minimum() -> None:
    root = n("step", n("hot", n("warm", count=5), n("cold", n("hot-under-cold", count=50), count=1), count=50),
             count=60)
    assert _above_count(root, 5) == 2   # hot, warm: cold is below, and what is under it is not looked at
    assert _above_count(root, 0) == 4
    assert _above_count(root, 100) == 0


def test_sampled_layers_ignore_frames_under_the_threshold() -> None:
    a = n("step", n("kernel", count=980), n("rare", count=20), kind="root", count=1000)
    b = n("step", n("kernel", count=1000), kind="root", count=1000)
    quiet = diff_trees(a, b, "native", threshold=0.05, sampled=True, k=K)
    assert quiet.splits == [] and quiet.ignored_a == 1 and quiet.sampled
