"""The `dltrace` command line. Each command is thin: it validates, calls the engine,
and hands the result to a renderer. User errors are one line, never a traceback.

Commands by what they work on: tracer.cli.environments (list, env), tracing (probe,
diff, export: one trace or two), surveys (survey, report, audit, import: folders of
traces); what they share, the command group ``main`` included, is in tracer.cli.common, the floor
below them, so that no command module imports this package's ``__init__``."""

from __future__ import annotations

from tracer.cli import environments, scaffold, surveys, tracing  # noqa: F401 - each registers its commands on main
from tracer.cli.common import main

__all__ = ["main"]
