"""User-facing errors: each one is printed as a single line, never as a traceback."""

from typing import Literal

#: How a probe failed: a gap record says it, and the survey decides on it (a crash or a
#: timeout costs the job's remaining cases a process of their own; an interrupt stops).
FailureKind = Literal["failed", "crashed", "timeout", "no-device", "import", "interrupted"]


class DltraceError(Exception):
    """Base of every error the CLI reports in one line."""


class UsageError(DltraceError):
    """Unknown framework, primitive, device, variant, or a bad option value."""


class EnvNotReady(DltraceError):
    """A framework's environment has not been set up."""


class ProbeFailed(DltraceError):
    """A probe subprocess crashed, hung, or could not run the case."""

    def __init__(self, message: str, kind: FailureKind = "failed", detail: str = ""):
        super().__init__(message)
        self.kind: FailureKind = kind
        #: what the probe said beyond the line: a user's workload's own frames (--verbose)
        self.detail = detail
