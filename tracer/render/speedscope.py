"""speedscope's file format (https://www.speedscope.app/file-format-schema.json):
one "sampled" profile per exported tree, frames shared across profiles."""

from __future__ import annotations

import json

from tracer import __version__
from tracer.render.export import Tree, frame_name, weighted_stacks
from tracer.trace import Frame, Trace

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_UNITS = {"samples": "none", "calls": "none", "nanoseconds": "nanoseconds"}


def to_speedscope(trace: Trace, trees: list[Tree]) -> dict:
    frames: list[dict] = []
    index: dict[tuple[str, Frame], int] = {}

    def fid(frame: Frame, tree: Tree) -> int:
        key = (tree.name if frame.kind == "root" else "", frame)
        if key not in index:
            index[key] = len(frames)
            entry: dict = {"name": frame_name(frame, tree)}
            if frame.file:
                entry["file"] = frame.file
                if frame.line:
                    entry["line"] = frame.line
            elif frame.lib:
                entry["file"] = frame.lib
            frames.append(entry)
        return index[key]

    profiles = []
    for tree in trees:
        samples, weights = [], []
        for path, weight in weighted_stacks(tree):
            samples.append([fid(f, tree) for f in path])
            weights.append(weight)
        profiles.append({
            "type": "sampled",
            "name": f"{tree.name} {tree.pass_} ({tree.phase}, {tree.unit})",
            "unit": _UNITS[tree.unit],
            "startValue": 0,
            "endValue": sum(weights),
            "samples": samples,
            "weights": weights,
        })
    m = trace.meta
    return {
        "$schema": SCHEMA,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": f"{m.get('framework', '')} {m.get('primitive', '')} ({m.get('api', '')}, {m.get('device', '')}, "
                f"{m.get('variant', '')})",
        "activeProfileIndex": 0,
        "exporter": f"dltrace {__version__}",
    }


def render(trace: Trace, trees: list[Tree]) -> str:
    return json.dumps(to_speedscope(trace, trees), separators=(",", ":")) + "\n"
