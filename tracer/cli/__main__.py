"""``python -m tracer.cli``: the dltrace command line."""

from tracer.cli import main

main(prog_name="dltrace")
