"""Trace-level processing: pure functions over loaded traces (normalise, tag, build
trees, pair and diff two traces, name what a trace reached). No I/O, no framework
imported, nothing about a survey as a whole (that is tracer.analysis)."""
