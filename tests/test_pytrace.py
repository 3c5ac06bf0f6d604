"""The Python collector on small, known call patterns."""

import markupsafe
import pytest

from tests import samplefw
from tracer.collect.pytrace import PythonTracer


@pytest.fixture()
def tracer():
    return PythonTracer(["tests.samplefw"])


def labels(tree):
    return [(d, n.frame.kind, n.frame.name) for d, n in tree.walk()]


def child(node, name):
    (hit,) = [c for c in node.children if c.frame.name == name]
    return hit


def test_tree_nests_framework_calls_with_counts_and_lines(tracer):
    tree, result = tracer.record(lambda: samplefw.forward(3), "step")
    assert result == 7
    assert labels(tree) == [
        (0, "root", "step"),
        (1, "python", "forward"),
        (2, "python", "forward_cpu"),
        (3, "python", "double"),
    ]
    fwd = child(tree, "forward")
    assert fwd.frame.module == "tests.samplefw"
    assert fwd.frame.file.endswith("tests/samplefw/__init__.py")
    src = tracer.sources[(fwd.frame.file, fwd.frame.line)]
    ran = {src[ln - fwd.frame.line].strip() for ln in fwd.lines}
    # the branch that ran is recorded, the one that did not is absent
    assert ran == {'if device == "gpu":', "return backend.forward_cpu(x)"}
    cpu = child(fwd, "forward_cpu")
    assert [src[ln - fwd.frame.line].strip() for ln in cpu.call_lines] == ["return backend.forward_cpu(x)"]


def test_other_branch_gives_other_child_and_lines(tracer):
    tree, _ = tracer.record(lambda: samplefw.forward(3, device="gpu"))
    fwd = child(tree, "forward")
    assert [c.frame.name for c in fwd.children] == ["forward_gpu"]


def test_repeated_calls_merge_and_recursion_nests(tracer):
    tree, _ = tracer.record(lambda: [samplefw.forward(i) for i in range(4)])
    assert child(tree, "forward").count == 4
    tree, _ = tracer.record(lambda: samplefw.recurse(3))
    depths = [d for d, n in tree.walk() if n.frame.name == "recurse"]
    assert depths == [1, 2, 3, 4]


def test_foreign_frames_are_transparent(tracer):
    def user_code(x):
        return helper(x)

    def helper(x):  # two levels outside the framework: transparent
        return samplefw.backend.double(x)

    tree, _ = tracer.record(lambda: samplefw.through_callback(user_code, 2))
    # the callback the framework calls directly is a hand-off; below it, only framework frames
    assert labels(tree) == [
        (0, "root", "probe"),
        (1, "python", "through_callback"),
        (2, "ext", "test_foreign_frames_are_transparent.<locals>.user_code"),
        (3, "python", "double"),
    ]


def test_c_handoffs_kept_builtins_dropped(tracer):
    tree, _ = tracer.record(lambda: samplefw.handoff("<a>"))
    h = child(tree, "handoff")
    assert [(c.frame.kind, c.frame.module, c.frame.name) for c in h.children] == \
        [("c", "markupsafe._speedups", "_escape_inner")]


def test_exceptions_and_generators_keep_the_stack_balanced(tracer):
    tree, result = tracer.record(samplefw.catches)
    assert result == "caught"
    assert labels(tree) == [(0, "root", "probe"), (1, "python", "catches"), (2, "python", "failing")]
    tree, result = tracer.record(lambda: list(samplefw.gen(3)))
    assert result == [0, 2, 4]
    g = child(tree, "gen")
    assert g.count == 4  # one entry per resumption (3 yields + the final return)
    assert child(g, "double").count == 3


def test_generated_code_matched_by_module_name(tracer):
    tree, _ = tracer.record(lambda: samplefw.generated(1))
    (node,) = tree.children
    assert (node.frame.module, node.frame.name, node.frame.file) == ("tests.samplefw.gen_ops", "generated", "<string>")


def test_tracer_is_removed_after_recording(tracer):
    import sys

    tracer.record(lambda: samplefw.forward(1))
    assert sys.gettrace() is None and sys.getprofile() is None


def test_ctypes_calls_are_handoffs(tracer):
    tree, result = tracer.record(lambda: [samplefw.via_ctypes(-3) for _ in range(2)])
    assert result == [3, 3]
    (fn,) = tree.children
    (lib,) = fn.children
    assert (lib.frame.kind, lib.frame.name, lib.count) == ("c", "abs", 2)
    assert lib.call_lines == fn.lines[-1:]


def test_direct_calls_into_other_libraries_are_ext_handoffs(tracer):
    tree, _ = tracer.record(lambda: samplefw.via_library("<a>"))
    (fn,) = tree.children
    (ext,) = fn.children
    assert (ext.frame.kind, ext.frame.module, ext.frame.name) == ("ext", "markupsafe", "escape")
    assert [(c.frame.kind, c.frame.name) for c in ext.children] == [("c", "_escape_inner")]
    # user code outside any framework is not an ext hand-off
    tree, _ = tracer.record(lambda: markupsafe.escape("<a>"))
    assert tree.children == []


def test_identical_functions_in_two_modules_stay_apart(tracer):
    # CPython's code objects compare equal without their file name: two identical
    # functions (chainer's _pair in convolution_2d and deconvolution_2d) must not merge.
    from tests.samplefw import conv, deconv

    assert conv._pair.__code__ == deconv._pair.__code__
    tree, _ = tracer.record(lambda: (conv._pair(1), deconv._pair(2)))
    assert sorted((n.frame.module, n.frame.name) for n in tree.children) == [
        ("tests.samplefw.conv", "_pair"), ("tests.samplefw.deconv", "_pair")]


def test_dltrace_own_code_and_its_probes_are_never_part_of_a_trace():
    # the probes live in the package (tracer.probes): even named as a framework root,
    # or called back by the framework (else an ext hand-off), none of their frames count
    from tracer.probes import base

    tracer = PythonTracer(["tests.samplefw", "tracer.probes"])
    tree, result = tracer.record(lambda: (base.nhwc((1, 2, 3, 4)), samplefw.through_callback(base.nhwc, (1, 2, 3, 4))))
    assert result == ((1, 3, 4, 2), (1, 3, 4, 2))
    assert labels(tree) == [(0, "root", "probe"), (1, "python", "through_callback")]
    # the same callback from a module that is not dltrace's is a hand-off
    tree, _ = tracer.record(lambda: samplefw.through_callback(markupsafe.escape, "<a>"))
    assert [(d, n.frame.kind, n.frame.module) for d, n in tree.walk()][1:3] == [
        (1, "python", "tests.samplefw"), (2, "ext", "markupsafe")]
