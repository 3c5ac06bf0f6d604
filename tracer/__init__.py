"""dltrace: where does a deep-learning framework choose its CPU or GPU code?

Stages, each in one place (as in coverage.py and pyinstrument):
collect/ (run inside a framework's environment, stdlib only) -> trace.py (the
versioned trace file) -> processing functions -> render/.
This package's top level imports nothing heavy: probes import it from inside
framework environments that have neither click nor rich.
"""

__version__ = "0.1.0"
