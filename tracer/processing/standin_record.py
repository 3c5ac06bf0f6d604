"""What a stand-in run's trace says of itself beyond its list: the passes it lost, and
the ops its graphs placed on the host. Pure:
reads one trace. The analysis (tracer.analysis.standin_needs) and the probe command
read it alike, so that a list missing a pass is called incomplete wherever it shows."""

from __future__ import annotations

from tracer.trace import Trace


def lost_passes(trace: Trace) -> dict[str, str]:
    """"CASE PASS" -> why, for each pass of a stand-in trace whose op layer could not be
    recorded (the warm run's ``op_error``): its list of what reached the device is that
    much short (JAX's stand-in could not run a program of the pass). A list missing a
    pass is no list. (A cold run records no op layer, and a probe asked for other layers
    only records none: neither is a loss.)"""
    out: dict[str, str] = {}
    for r in trace.runs:
        why = r.info.not_captured.get("op")
        if r.phase == "warm" and "op" not in r.layers and why:
            out.setdefault(f"{trace.info.primitive} ({trace.info.api}) {r.pass_}", why)
    return out


def host_placed(traces: list[Trace]) -> dict[str, list[str]]:
    """op -> the passes in which a graph (a tf.function) of the stand-in's run placed it
    on the host (``meta.standin.host``, tracer.probes.tensorflow_placement): ops a port
    would lose to the host unseen, which no skeleton can stand in for."""
    out: dict[str, dict[str, None]] = {}
    for t in traces:
        found = (t.meta.get("standin") or {}).get("host")
        for pass_, ops in (found.items() if isinstance(found, dict) else ()):
            for op in ops if isinstance(ops, list) else ():
                out.setdefault(str(op), {})[str(pass_)] = None
    return {op: list(passes) for op, passes in out.items()}
