"""The `dltrace` command line. Each command is thin: it validates, calls the engine,
and hands the result to a renderer. User errors are one line, never a traceback.

Commands by what they work on: tracer.cli.environments (list, env), tracing (probe,
diff, export: one trace or two), surveys (survey, report, audit, import: folders of
traces); what they share is in tracer.cli.common."""

from __future__ import annotations

import os

import click

from tracer.cli.common import Group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dltrace")
@click.option("--trust-registry", is_flag=True,
              help="Let the registry's install steps (DLTRACE_REGISTRY) hold pip options, paths and URLs: they "
                   "run code from wherever they point, so only for a registry you wrote.")
def main(trust_registry: bool) -> None:
    """Trace where deep-learning frameworks choose their CPU or GPU code."""
    from tracer import tempdirs

    tempdirs.sweep()  # what a killed dltrace left in the temporary folder (its lock is free)
    if os.environ.get("DLTRACE_HOME"):  # absolute for every process this one starts, whatever its folder
        os.environ["DLTRACE_HOME"] = os.path.abspath(os.environ["DLTRACE_HOME"])
    if trust_registry:
        from tracer.registry import TRUST_ENV

        os.environ[TRUST_ENV] = "1"  # for this process and what it starts


from tracer.cli import environments, surveys, tracing  # noqa: E402,F401 - registers the commands
