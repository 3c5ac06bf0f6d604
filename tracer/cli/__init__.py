"""The `dltrace` command line. Each command is thin: it validates, calls the engine,
and hands the result to a renderer. User errors are one line, never a traceback.

Commands by what they work on: tracer.cli.environments (list, env), tracing (probe,
diff, export: one trace or two), surveys (survey, report, audit, import: folders of
traces); what they share is in tracer.cli.common."""

from __future__ import annotations

import click

from tracer.cli.common import Group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dltrace")
def main() -> None:
    """Trace where deep-learning frameworks choose their CPU or GPU code."""


from tracer.cli import environments, surveys, tracing  # noqa: E402,F401 - registers the commands
