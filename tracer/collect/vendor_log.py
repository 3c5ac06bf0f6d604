"""What vendor libraries report they ran, parsed from the lines they print when
asked (:data:`VERBOSE_ENV`): oneDNN's verbose log (``onednn_verbose`` v3,
``dnnl_verbose``/``mkldnn_verbose`` v1-v2: the primitive, its implementation and
ISA, the pass) and MKL's (``MKL_VERBOSE SGEMM(...)``). Evidence without sampling:
every primitive the step executed, in order.

Parsing lives apart from capturing (tracer.collect.library), so that it is tested
on captured text alone. Stdlib only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

#: Set for a probe process whose library layer is recorded, before the framework loads
#: the libraries: oneDNN reads ONEDNN_VERBOSE (v3), DNNL_VERBOSE and MKLDNN_VERBOSE
#: (v1-v2, as in MXNet 1.9); MKL reads MKL_VERBOSE. Level 1: one line per execution.
VERBOSE_ENV = {"ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1", "MKLDNN_VERBOSE": "1", "MKL_VERBOSE": "1"}

ONEDNN, MKL = "oneDNN", "MKL"
_ONEDNN_PREFIX = re.compile(r"^(?:onednn|dnnl|mkldnn)_verbose,")
_MKL_CALL = re.compile(r"^MKL_VERBOSE\s+([A-Za-z_][\w]*)\(([^)]*)\)\s+([\d.]+)(ns|us|ms|s)\b")
_MKL_INFO = re.compile(r"^MKL_VERBOSE\s+(?:Intel\(R\) MKL|oneMKL)\s+(.*)$")
_UNIT_NS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}


@dataclass(frozen=True)
class LibraryCall:
    """One execution a library reported: ``name`` says what ran and how (``convolution
    jit:avx2 (forward_training)``, ``SGEMM``), ``detail`` the problem (shapes)."""

    library: str
    name: str
    detail: str
    time_ns: int


@dataclass
class VendorLog:
    calls: list[LibraryCall] = field(default_factory=list)
    #: library -> facts it printed about itself (version, the ISA it dispatches to, threading)
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    #: lines that looked like a library's report but could not be read (a time of
    #: ``nan`` or ``1.2.3us``): counted and skipped, never the cost of a case
    unreadable: int = 0


def _ns(value: str, scale: float) -> int:
    """A reported duration in nanoseconds; ValueError unless it is a finite, non-negative number."""
    number = float(value) * scale
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"not a duration: {value!r}")
    return int(round(number))


def _onednn(fields: list[str], log: VendorLog) -> None:
    if "exec" in fields[:4]:
        i = fields.index("exec")
        rest = fields[i + 1:]
        if len(rest) < 4:
            return
        engine, kind, impl, prop = (x.strip() for x in rest[:4])
        problem = rest[-2] if len(rest) >= 6 else ""
        time_ns = _ns(rest[-1], 1e6) if len(rest) >= 6 else 0
        name = " ".join(x for x in (kind, impl) if x) + (f" ({prop})" if prop and prop != "undef" else "")
        if engine != "cpu":
            name += f" [{engine}]"
        log.calls.append(LibraryCall(ONEDNN, name, problem, time_ns))
        return
    if "info" in fields[:4]:
        text = ",".join(fields[fields.index("info") + 1:])
        facts = log.info.setdefault(ONEDNN, {})
        m = re.match(r"(?:oneDNN|DNNL|MKL-DNN) v(\S+)", text)
        if m:
            facts["version"] = m.group(1)
        for key in ("isa", "runtime"):
            m = re.search(rf"(?:^|,){key}:([^,]+)", text)
            if m and text.startswith("cpu"):
                facts[key] = m.group(1)


def parse(text: str, log: VendorLog | None = None) -> VendorLog:
    """Every library line of ``text`` (other output is left alone), added to ``log``.
    A line that looks like a report but cannot be read is counted in ``unreadable``."""
    log = log or VendorLog()
    for line in text.splitlines():
        try:
            _line(line.strip(), log)
        except (ValueError, OverflowError, IndexError):
            log.unreadable += 1
    return log


def _line(line: str, log: VendorLog) -> None:
    if _ONEDNN_PREFIX.match(line):
        _onednn(line.split(","), log)
        return
    m = _MKL_CALL.match(line)
    if m:
        fn, args, value, unit = m.groups()
        detail = ",".join(a.strip() for a in args.split(",")[:5])  # transposes and sizes, not pointers
        log.calls.append(LibraryCall(MKL, fn.upper(), detail, _ns(value, _UNIT_NS[unit])))
        return
    m = _MKL_INFO.match(line)
    if m:
        log.info.setdefault(MKL, {})["version"] = m.group(1).split(" Product build")[0].strip()
