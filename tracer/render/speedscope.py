"""speedscope's file format (https://www.speedscope.app/file-format-schema.json):
one "evented" profile per exported tree (open and close events laid out by weight),
frames shared across profiles. Evented, not "sampled": a sampled profile repeats
the whole stack for every node, which for a deep trace is frames x depth; events
are two per frame. Streamed to the file for the same reason."""

from __future__ import annotations

import json

from tracer import __version__
from tracer.render.export import Tree, frame_name, inclusive_weights, walk_events
from tracer.render.terminal import TextSink
from tracer.trace import Frame, Trace

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_UNITS = {"samples": "none", "calls": "none", "nanoseconds": "nanoseconds"}


class _Frames:
    """speedscope's shared frame table: each distinct frame once."""

    def __init__(self) -> None:
        self.rows: list[dict[str, str | int]] = []  # name, file, line
        self.index: dict[tuple[str, Frame], int] = {}

    def id(self, frame: Frame, tree: Tree) -> int:
        key = (tree.name if frame.kind == "root" else "", frame)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.rows)
            entry: dict[str, str | int] = {"name": frame_name(frame, tree)}
            if frame.file:
                entry["file"] = frame.file
                if frame.line:
                    entry["line"] = frame.line
            elif frame.lib:
                entry["file"] = frame.lib
            self.rows.append(entry)
        return i


def write(trace: Trace, trees: list[Tree], out: TextSink) -> None:
    frames = _Frames()
    out.write('{"$schema":' + json.dumps(SCHEMA) + ',"profiles":[')
    for n, tree in enumerate(trees):
        inclusive = inclusive_weights(tree)
        head = {"type": "evented", "name": f"{tree.name} {tree.pass_} ({tree.phase}, {tree.unit})",
                "unit": _UNITS[tree.unit], "startValue": 0, "endValue": inclusive[id(tree.root)]}
        out.write(("," if n else "") + json.dumps(head)[:-1] + ',"events":[')
        # a node opens where its parent's earlier children ended, children first, and
        # closes after its inclusive weight; ends[i] is the open node i's close time
        at, ends, first = 0, [], True
        for entering, node, _ in walk_events(tree, inclusive):
            fid = frames.id(node.frame, tree)
            if entering:
                start = at
                ends.append(start + inclusive[id(node)])
                out.write(f'{"" if first else ","}{{"type":"O","frame":{fid},"at":{start}}}')
            else:
                at = ends.pop()
                out.write(f',{{"type":"C","frame":{fid},"at":{at}}}')
            first = False
        out.write("]}")
    m = trace.info
    name = f"{m.framework} {m.primitive} ({m.api}, {m.device}, {m.variant})"
    out.write('],"shared":{"frames":' + json.dumps(frames.rows) + '},"name":' + json.dumps(name)
              + ',"activeProfileIndex":0,"exporter":' + json.dumps(f"dltrace {__version__}") + "}\n")
