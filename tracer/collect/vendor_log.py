"""What vendor libraries report they ran, parsed from the lines they print when
asked (:data:`VERBOSE_ENV`): oneDNN's verbose log (``onednn_verbose`` v3,
``dnnl_verbose``/``mkldnn_verbose`` v1-v2: the primitive, its implementation and
ISA, the pass), MKL's (``MKL_VERBOSE SGEMM(...)``) and NVIDIA's NVPL BLAS's
(``NVPL_BLAS_VERBOSE: sgemm_(...)``, the BLAS of PyPI's aarch64 torch). Evidence without sampling:
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
#: (v1-v2, as in MXNet 1.9); MKL reads MKL_VERBOSE, NVPL BLAS NVPL_BLAS_VERBOSE. Level 1:
#: one line per execution.
#: On a CUDA machine: cuDNN's API log at level 3 (info: every call with its arguments,
#: the execution plan's engine among them), cuBLAS's API log, and cuBLASLt's trace
#: level (one line per matmul with the algorithm it ran), all to standard output.
VERBOSE_ENV = {"ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1", "MKLDNN_VERBOSE": "1", "MKL_VERBOSE": "1",
               "NVPL_BLAS_VERBOSE": "1",
               "CUDNN_LOGLEVEL_DBG": "3", "CUDNN_LOGDEST_DBG": "stdout",
               "CUBLAS_LOGINFO_DBG": "1", "CUBLAS_LOGDEST_DBG": "stdout", "CUBLASLT_LOG_LEVEL": "2"}

ONEDNN, MKL, NVPL, CUDNN, CUBLAS, CUBLASLT = "oneDNN", "MKL", "NVPL", "cuDNN", "cuBLAS", "cuBLASLt"
#: The first line of a cuDNN or cuBLAS API-log block (I!/W!/E! by severity); the
#: block's lines that follow start with the lower-case letter.
_CUDA_BLOCK = re.compile(r"^([IWE])! (CuDNN|cuBLAS) \(v([\d.]+)[^)]*\) function (?:\w+ )?(\w+)\(.*\) called:$")
_CUBLASLT = re.compile(r"^\[[^]]*\]\[cublasLt\]\[\d+\]\[Trace\]\[(\w+)\]\s*(.*)$")
#: cuDNN and cuBLAS calls that compute (the rest create, set, get or destroy descriptors
#: and handles): cuDNN's graph API executes a finalized plan, its legacy API names the
#: operation and its direction; every cuBLAS routine but its set-up ones.
_CUDNN_COMPUTES = re.compile(r"^cudnn(?!Get|Set|Create|Destroy|Find)"
                             r"(?:BackendExecute|\w*(?:Forward|Backward)\w*|\w*Transform\w*|"
                             r"OpTensor|AddTensor|ReduceTensor|ScaleTensor)$")
_CUBLAS_SETUP = re.compile(r"^cublas(?:Create|Destroy|Set|Get|Xt|LoggerConfigure|Init)")
_ONEDNN_PREFIX = re.compile(r"^(?:onednn|dnnl|mkldnn)_verbose,")
#: (the time is any text before its unit: one that is no duration, nan or -1, is an unreadable line)
_MKL_CALL = re.compile(r"^MKL_VERBOSE\s+([A-Za-z_][\w]*)\(([^)]*)\)\s+(\S+?)(ns|us|ms|s)(?:\s|$)")
_MKL_INFO = re.compile(r"^MKL_VERBOSE\s+(?:Intel\(R\) MKL|oneMKL)\s+(.*)$")
_UNIT_NS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
#: NVPL BLAS: a call (the Fortran name, its arguments, the time in microseconds), its
#: version, and the platform it chose its kernels for ("Neoverse V2", "Generic ASIMD")
_NVPL_CALL = re.compile(r"^NVPL_BLAS_VERBOSE:\s+([A-Za-z]\w*?)_?\(([^)]*)\)\s+time_us:(\S+)")
_NVPL_VERSION = re.compile(r"^NVPL_BLAS_VERBOSE:\s+NVPL BLAS version\s+(\S+)")
_NVPL_PLATFORM = re.compile(r"^NVPL_BLAS_VERBOSE:\s+Platform:\s+([^,]+),.*?sve_width:(\d+)")


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


def _cuda_block(severity: str, lib: str, version: str, fn: str, body: list[str], log: VendorLog) -> None:
    """One cuDNN or cuBLAS API-log block: a call with its arguments. A call's return
    is logged as a second block holding its status alone, and a warning (W!) or error
    (E!) block about a call (an implementation that did not apply) is no call."""
    log.info.setdefault(CUDNN if lib == "CuDNN" else CUBLAS, {})["version"] = version
    args = [b for b in body if not b.startswith(("status:", "Time:", "Process=", "COMPILED WITH:"))]
    if severity != "I" or not args:
        return
    if lib == "CuDNN":
        if not _CUDNN_COMPUTES.match(fn):
            return
        ops = [m.group(1).lower() for b in body if (m := re.match(r"operation: type=CUDNN_BACKEND_OPERATION_(\w+?)"
                                                                  r"(?:_DESCRIPTOR)?:$", b))]
        engine = next((m.group(1) for b in body if (m := re.match(r"engine_id: type=int; val=(-?\d+);", b))), "")
        if fn == "cudnnBackendExecute" and not ops:
            return
        name = f"{fn} {'+'.join(ops)}" if ops else fn
        name += f" engine {engine}" if engine else ""
        name += " (tensor cores)" if any(b.startswith("CUDNN_NUMERICAL_NOTE_TENSOR_CORE: type=bool; val=true")
                                         for b in body) else ""
        dims = [m.group(1) for b in body if (m := re.match(r"dimA: type=int; val=\[([\d,]+)\];", b))]
        log.calls.append(LibraryCall(CUDNN, name, " ".join(d.replace(",", "x") for d in dims[:4]), 0))
        return
    if _CUBLAS_SETUP.match(fn):
        return
    given = {m.group(1): m.group(2) for b in args if (m := re.match(r"(\w+): type=[^;]*; val=([^\s(]+)", b))}
    trans = ",".join(given[k].replace("CUBLAS_OP_", "") for k in ("transa", "transb") if k in given)
    detail = " ".join(f"{k}={given[k]}" for k in ("m", "n", "k", "batchCount") if k in given)
    log.calls.append(LibraryCall(CUBLAS, fn + (f" ({trans})" if trans else ""), detail, 0))


def _cublaslt(fn: str, rest: str, log: VendorLog) -> None:
    """A cuBLASLt trace line: the matmul, the algorithm it ran (id, tile, stages,
    split-K) and the problem (the operands' types and shapes, the compute type)."""
    algo = re.search(r"algo=\[([^]]*)\]", rest)
    parts = dict(p.split("=", 1) for p in (algo.group(1).split() if algo else []) if "=" in p)
    how = " ".join(f"{k}={parts[k].replace('MATMUL_TILE_', '').replace('MATMUL_STAGES_', '')}"
                   for k in ("algoId", "tile", "stages", "numSplitsK") if k in parts)
    shapes = " ".join(f"{m.group(1)}[{m.group(2)} {m.group(3)}x{m.group(4)}]" for m in
                      re.finditer(r"\b([ABD])desc=\[type=(\w+) rows=(\d+) cols=(\d+)", rest))
    compute = re.search(r"computeType=(\w+)", rest)
    epilogue = re.search(r"epilogue=(\w+)", rest)
    detail = " ".join(x for x in (shapes, compute.group(1) if compute else "",
                                  epilogue.group(1) if epilogue else "") if x)
    log.calls.append(LibraryCall(CUBLASLT, f"{fn} {how}".strip(), detail, 0))


def parse(text: str, log: VendorLog | None = None) -> VendorLog:
    """Every library line of ``text`` (other output is left alone), added to ``log``.
    A line that looks like a report but cannot be read is counted in ``unreadable``.
    cuDNN and cuBLAS log a call as a block of lines; a block ends at the first line
    that does not continue it."""
    log = log or VendorLog()
    block: tuple[str, str, str, str] | None = None
    body: list[str] = []

    def close() -> None:
        nonlocal block
        if block is not None:
            try:
                _cuda_block(*block, body, log)
            except (ValueError, IndexError):
                log.unreadable += 1
        block = None
        body.clear()

    for line in text.splitlines():
        line = line.strip()
        if block is not None and line[:2] == block[0].lower() + "!":
            body.append(line[2:].strip())
            continue
        close()
        m = _CUDA_BLOCK.match(line)
        if m:
            block = m.group(1), m.group(2), m.group(3), m.group(4)
            continue
        try:
            _line(line, log)
        except (ValueError, OverflowError, IndexError):
            log.unreadable += 1
    close()
    return log


def _line(line: str, log: VendorLog) -> None:
    m = _CUBLASLT.match(line)
    if m:
        _cublaslt(m.group(1), m.group(2), log)
        return
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
        return
    if line.startswith("NVPL_BLAS_VERBOSE:"):
        _nvpl(line, log)


def _nvpl(line: str, log: VendorLog) -> None:
    m = _NVPL_CALL.match(line)
    if m:
        fn, args, value = m.groups()
        detail = ",".join(a.strip() for a in args.split(",")[:5])  # transposes and sizes, not pointers
        log.calls.append(LibraryCall(NVPL, fn.upper(), detail, _ns(value, 1e3)))
        return
    m = _NVPL_VERSION.match(line)
    if m:
        log.info.setdefault(NVPL, {})["version"] = m.group(1)
        return
    m = _NVPL_PLATFORM.match(line)
    if m:
        facts = log.info.setdefault(NVPL, {})
        facts["platform"], facts["sve_width"] = m.group(1).strip(), m.group(2)
