"""Probes: one module per framework, each running the basic DNN primitives.

A probe module is imported only inside its framework's environment, by
tracer.collect.harness. It provides:

    gpu_available() -> bool
    make_case(primitive, api, device, shape) -> probes.base.Case

``device`` is the selector string from frameworks.yaml (e.g. "cuda", "/GPU:0").
"""
