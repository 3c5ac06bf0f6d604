"""The call patterns of tests/samplefw the collectors are checked on, one step each (user
code, outside the sample framework, calling it): shared by the
in-process tests (tests/test_ctrace.py) and by tests/collector_twins.py, which runs
them under another interpreter (the C core's sys.monitoring events on 3.12+)."""

from __future__ import annotations

from typing import Any, Callable

import markupsafe

from tests import samplefw
from tests.samplefw import conv, deconv


def _callback_step() -> Any:
    def user_code(x: int) -> Any:
        return helper(x)

    def helper(x: int) -> Any:
        return samplefw.backend.double(x)

    return samplefw.through_callback(user_code, 2)


PATTERNS: dict[str, Callable[[], Any]] = {
    "branch": lambda: samplefw.forward(3),
    "other branch": lambda: samplefw.forward(3, device="gpu"),
    "repeated": lambda: [samplefw.forward(i) for i in range(4)],
    "recursion": lambda: samplefw.recurse(3),
    "transparent callback": _callback_step,
    "c hand-off": lambda: samplefw.handoff("<a>"),
    "exception": lambda: samplefw.catches(),
    "generator": lambda: list(samplefw.gen(3)),
    "generated code": lambda: samplefw.generated(1),
    "ctypes": lambda: [samplefw.via_ctypes(-3) for _ in range(2)],
    "ext hand-off": lambda: samplefw.via_library("<a>"),
    "user code only": lambda: markupsafe.escape("<a>"),
    "identical code, two modules": lambda: (conv._pair(1), deconv._pair(2)),
}
