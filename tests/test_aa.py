"""A/A: two independent probes of the same configuration ran the same code, so every
split between them is false. Measured on real frameworks, all layers, the native
layer sampled at the kernel shapes where the kernels are a visible share."""

from __future__ import annotations

import pytest

from tracer.contract import LAYERS, PASSES, PRIMITIVES
from tracer.processing.diff import diff_traces
from tracer.knowledge import knowledge
from tracer.runner import CaseSpec, run_probe

K = knowledge()

AA_FRAMEWORKS = ("torch", "tensorflow", "chainer", "mxnet")
AA_PRIMITIVES = ("conv2d", "softmax", "maxpool2d")


@pytest.fixture(scope="session")
def aa_traces(frameworks, tmp_path_factory):
    """(framework, primitive) -> two traces of the same case from two probe processes."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [CaseSpec(p, "functional", PRIMITIVES[p].kernel_shape, layers=LAYERS) for p in AA_PRIMITIVES]

    def probe(fw: str, out):
        return fw, run_probe(frameworks[fw], cases, out, timeout=900, command="A/A test")

    # folders made here: tmp_path_factory is not to be called from several threads
    jobs = [(fw, tmp_path_factory.mktemp(f"aa-{fw}-{r}")) for fw in AA_FRAMEWORKS for r in (0, 1)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda job: probe(*job), jobs))
    out: dict[tuple[str, str], list] = {}
    for fw, results in done:
        for res in results:
            assert res.error is None, f"{fw} {res.spec.primitive}: {res.error}"
            out.setdefault((fw, res.spec.primitive), []).append(res.load())
    return out


@pytest.mark.parametrize("fw", AA_FRAMEWORKS)
def test_two_probes_of_the_same_case_have_no_split(aa_traces, fw):
    found = []
    for prim in AA_PRIMITIVES:
        a, b = aa_traces[(fw, prim)]
        assert a.layer("forward", "native") is not None and a.run("forward", "warm").replicas["native"]
        for pass_ in PASSES:
            for layer in diff_traces(a, b, pass_=pass_, k=K).layers:
                found += [(prim, pass_, layer.layer, s.frame, [x.label for x in s.only_a], [x.label for x in s.only_b])
                          for _, s in layer.all_splits()]
    assert found == []


def test_replicas_are_the_halves_of_the_native_layer(aa_traces):
    a, _ = aa_traces[("torch", "conv2d")]
    run = a.run("forward", "warm")
    halves = run.replicas["native"]
    assert len(halves) == 2 and all(h.count > 0 for h in halves)
    assert run.layers["native"].count == sum(h.count for h in halves)
    assert run.stats["layers"]["native"]["replicas"] == 2
