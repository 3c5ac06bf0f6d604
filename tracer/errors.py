"""User-facing errors: each one is printed as a single line, never as a traceback."""


class DltraceError(Exception):
    """Base of every error the CLI reports in one line."""


class UsageError(DltraceError):
    """Unknown framework, primitive, device, variant, or a bad option value."""


class EnvNotReady(DltraceError):
    """A framework's environment has not been set up."""


class ProbeFailed(DltraceError):
    """A probe subprocess crashed, hung, or could not run the case."""

    def __init__(self, message: str, kind: str = "failed"):
        super().__init__(message)
        self.kind = kind  # failed | crashed | timeout | no-device | import
