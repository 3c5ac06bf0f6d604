"""Probes: one module per framework, each running the basic DNN primitives.

A probe module is imported only inside its framework's environment, by
tracer.collect.harness, which checks it against tracer.contract.Probe:

    gpu_available() -> bool
    make_case(primitive, api, device, shape) -> tracer.probes.base.Case

and optionally tracer.contract.OpRecorder (record_ops: the framework's own op records),
DispatchTable (dispatch_table) and DeviceCheck (device_available: devices other than a
GPU, such as torch's stand-in backend in torch_standin.py, on the device of torch_device.py).

``device`` is the selector string from frameworks.yaml (e.g. "cuda", "/GPU:0").
"""
