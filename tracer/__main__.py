"""``python -m tracer``: the dltrace command line, for an environment without the
``dltrace`` script on its PATH."""

from tracer.cli import main

main(prog_name="dltrace")
