"""Renderers: each output format in its own module, over the processing stages'
data. The export formats are chosen through :data:`EXPORTS`, the one table the
command line's ``--format`` choices come from."""

from __future__ import annotations

from typing import Callable

from tracer.render import collapsed, speedscope
from tracer.render.export import Tree
from tracer.render.terminal import TextSink
from tracer.trace import Trace

#: format -> (writer, what it is for): ``writer(trace, trees, stream)``.
EXPORTS: dict[str, tuple[Callable[[Trace, list[Tree], TextSink], None], str]] = {
    "speedscope": (speedscope.write, "JSON for https://www.speedscope.app"),
    "collapsed": (collapsed.write, "'a;b;c N' lines for flamegraph.pl"),
}
