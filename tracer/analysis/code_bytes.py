"""The scorecard's "backend-specific machine code reached" column: the bytes of machine
code (ELF symbol sizes) of the native functions each path was sampled in, read from that
path's own shared objects by a caller-supplied :data:`Measure` (tracer.elf_code); the JIT
code a library generated for this CPU shown beside it, never counted. Also what kind of
path a path label is (:func:`path_kind`), which the vendor column reads too."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, Protocol

from tracer.analysis.figure import Figure, page
from tracer.analysis.portability import FrameworkReport
from tracer.knowledge import Knowledge
from tracer.processing.pairs import side_label
from tracer.processing.tags import is_system_lib, library_of
from tracer.trace import Frame, Trace


class LibraryCodeLike(Protocol):
    sizes: dict[str, int]
    missing: list[str]
    error: str


#: (shared object's path, its size at capture or None, sampled names) -> what its tables say.
Measure = Callable[[str, "int | None", Iterable[str]], LibraryCodeLike]


def path_kind(side: str) -> str:
    """"gpu", "arm", "cpu" (the default x86 path) or "" (a variant) of a path label."""
    if side.startswith("gpu"):
        return "gpu"
    if side.startswith("cpu"):
        if any(a in side for a in ("aarch64", "arm64")):
            return "arm"
        return "cpu" if side == "cpu" or side.startswith("cpu (") else ""
    return ""


def _native_names(traces: list[Trace]) -> dict[str, dict[str, set[str]]]:
    """path label -> shared object basename -> native symbols its warm passes reached."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for t in traces:
        for run in t.runs:
            tree = run.layers.get("native") if run.phase == "warm" else None
            if tree is None:
                continue
            for _, node in tree.walk():
                f = node.frame
                if f.kind == "native" and f.lib and not f.lib.startswith("["):
                    out[side_label(t)][f.lib].add(f.name)
    return out


def _jit_bytes(traces: list[Trace]) -> dict[str, int]:
    """path label -> bytes of distinct generated kernels its loops reached (perf map);
    an instance two primitives of one probe process reached counts once."""
    seen: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for t in traces:
        for run in t.runs:
            native = run.info.layers.get("native")
            seen[side_label(t)].update(native.jit_code if native is not None else ())
    return {side: sum(r[1] for r in rows) for side, rows in seen.items()}


def _side_paths(traces: list[Trace]) -> dict[str, dict[str, Any]]:
    """path label -> shared object basename -> where its traces mapped it: per path, since
    one basename (libc10.so) is another file on the machine a GPU path was recorded on."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for t in traces:
        out[side_label(t)].update(t.info.native.lib_paths if t.info.native is not None else {})
    return out


def reads(traces: list[Trace], k: Knowledge) -> dict[tuple[str, int | None], frozenset[str]]:
    """(shared object's path, its size at capture) -> the sampled names :func:`bytes_figure`
    asks ``measure`` of, for these traces: what can be read before the figure is made."""
    names, paths = _native_names(traces), _side_paths(traces)
    out: dict[tuple[str, int | None], frozenset[str]] = {}
    for side, by_lib in names.items():
        for lib in by_lib:
            info = paths.get(side, {}).get(lib)
            if is_system_lib(library_of(_frame(lib, ""), k), k) or not isinstance(info, dict) or not info.get("path"):
                continue
            out[(str(info["path"]), info.get("bytes"))] = frozenset(n for by in names.values() for n in by.get(lib, ()))
    return out


def bytes_figure(rep: FrameworkReport, traces: list[Trace], measure: Measure | None, k: Knowledge) -> Figure:
    """The machine code of each path, read from that path's own shared objects (their
    size at capture checked); a path with any of its objects unreadable here (a GPU path
    recorded on another machine) is not measured, and the figure is the largest of the
    measured CPU paths', or none: a sum over whichever files happen to be on this
    machine would measure the machine, not the framework."""
    link = page(rep, "audit-table")
    names = _native_names(traces)
    paths = _side_paths(traces)
    fig = Figure("—", "the largest measured path's", link, unit="KiB")
    if not names:
        fig.thin = "no native layer sampled: not measured"
        return fig
    if measure is None or not any(paths.values()):
        fig.thin = "the traces name no shared-object paths (captured before they were recorded): not measured"
        return fig
    jit = _jit_bytes(traces)
    wanted = reads(traces, k)
    cache: dict[tuple[str, Any], LibraryCodeLike] = {}
    best, measured_sides = 0, []
    for side, by_lib in names.items():
        per_tag: dict[str, int] = defaultdict(int)
        found = asked = 0
        problems: list[str] = []
        for lib, syms in by_lib.items():
            if is_system_lib(library_of(_frame(lib, ""), k), k):
                continue
            info = paths.get(side, {}).get(lib)
            if not isinstance(info, dict) or not info.get("path"):
                problems.append(f"{lib}: no path recorded")
                continue
            key = (str(info["path"]), info.get("bytes"))
            if key not in cache:  # every path's names at once would be smaller; one file is read per path
                cache[key] = measure(key[0], key[1], wanted[key])
            code = cache[key]
            if code.error:
                problems.append(f"{lib}: {code.error}")
                continue
            asked += len(syms)
            for name in syms & set(code.sizes):
                found += 1
                per_tag[library_of(_frame(lib, name), k)] += code.sizes[name]
        per_tag = {tag: v for tag, v in per_tag.items() if not is_system_lib(tag, k)}
        total = sum(per_tag.values())
        # JIT code is what a library generated for this CPU's ISA: shown, never counted
        generated = f"; + {jit[side] / 1024:.1f} KiB JIT code generated for this CPU, not counted" \
            if jit.get(side) else ""
        if problems:
            fig.details.append(f"{side}: not measured ({'; '.join(problems)[:200]})")
            continue
        measured_sides.append(side)
        if path_kind(side) in ("cpu", ""):
            best = max(best, total)
        libs = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sorted(per_tag.items(), key=lambda kv: -kv[1]))
        fig.details.append(f"{side}: {total / 1024:.1f} KiB ({libs or 'none'}); {found} of {asked} symbols sized"
                           f"{generated}")
    if not any(path_kind(side) == "cpu" for side in measured_sides):
        fig.thin = "not measured: the default CPU path's own shared objects could not all be read"
        return fig
    fig.value = f"{best / 1024:.0f} KiB"
    return fig


def _frame(lib: str, name: str) -> Frame:
    return Frame("native", "", name, lib=lib)
