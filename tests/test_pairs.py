"""Which traces a survey sets against which (tracer.processing.pairs), on synthetic traces:
side A is always a default CPU path, of the same machine as B where the case has one, so
that a variant or a device is never compared across machines by accident. Fast tier."""

from __future__ import annotations

from tests.conftest import META, op
from tracer.processing.pairs import is_default_cpu, pairs
from tracer.trace import Frame, Node, Run, Trace


def _trace(device: str = "cpu", variant: str = "default", arch: str = "x86_64", **meta) -> Trace:
    tree = Node(Frame("root", "", "conv2d.forward"), 1, 1000, children=[op("aten::conv2d")])
    return Trace({**META, "device": device, "variant": variant, "machine": {"arch": arch, "cpu": f"{arch} cpu"},
                  **meta}, [Run("forward", "warm", {"op": tree})])


def test_a_variant_is_set_against_its_own_machines_default_and_machines_against_each_other():
    x86, arm = _trace(), _trace(arch="aarch64")
    arm_fast = _trace(variant="fast", arch="aarch64")
    got = pairs([arm_fast, x86, arm])
    assert [(p.kind, p.a, p.b) for p in got] == [("variant", arm, arm_fast), ("machine", arm, x86)]
    assert all(is_default_cpu(p.a) for p in got)
    assert got[0].title == "cpu vs cpu fast"  # one machine: not named
    assert got[1].title == "cpu (aarch64 aarch64 cpu) vs cpu (x86_64 x86_64 cpu)"


def test_a_device_pairs_with_the_default_cpu_path_and_other_cases_stay_apart():
    cpu, gpu = _trace(), _trace(device="gpu")
    relu = _trace(device="gpu", primitive="relu")  # no CPU path of its own case: nothing to set it against
    got = pairs([gpu, relu, cpu])
    assert [(p.kind, p.a, p.b) for p in got] == [("device", cpu, gpu)]
    assert pairs([gpu]) == []
