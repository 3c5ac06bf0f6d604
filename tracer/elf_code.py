"""Bytes of machine code behind the native symbols a path reached, from the shared
objects' own symbol tables (pyelftools), for the scorecard's "backend-specific code
reached, measured".

Why a symbol table and not a line count: a port replaces what a path runs, and a
symbol's ``st_size`` is exactly the machine code of one function. The sampler
records each library's path as it was mapped (``meta.native.lib_paths``); this
module reads those files in the tool's own process (never inside a framework
environment: pyelftools is the tool's), once per file, and is told nothing it does
not find: a file that is gone or changed since the capture, or a name its tables do
not hold, is counted as such, not guessed.

py-spy names a native frame by its demangled symbol without the parameter list
(``dnnl::impl::cpu::x64::jit_avx2_conv_fwd_kernel_f32::execute_forward``); the
tables hold mangled names, which are demangled with the C++ runtime's own
demangler (cxxfilt) and cut the same way. A name several symbols carry (overloads,
per-file copies of a static function, ``[clone .cold]`` parts) counts once, at its
largest: one of them ran, and no more than that.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import struct
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping

from tracer.machine import usable_cpus

if TYPE_CHECKING:  # the annotations only (pyelftools is imported where a file is read)
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

#: Qualifiers after a demangled parameter list, and compiler-made clone suffixes.
_QUALIFIERS = (" const", " volatile", " &&", " &", "&&", "&", " noexcept")
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass
class LibraryCode:
    """What one shared object says of the symbols asked for."""

    path: str
    sizes: dict[str, int] = field(default_factory=dict)  # name as sampled -> bytes
    missing: list[str] = field(default_factory=list)  # names its tables do not hold
    error: str = ""  # why the file could not be read (gone, changed, not ELF)


def _strip_trailer(name: str) -> str:
    name = name.strip()
    while True:
        if name.endswith("]") and "[clone " in name:
            name = name[: name.rindex("[clone ")].rstrip()
            continue
        for q in _QUALIFIERS:
            if name.endswith(q) and not name.endswith("operator" + q.strip()):
                name = name[: -len(q)].rstrip()
                break
        else:
            return name


def _strip_params(name: str) -> str:
    """``ns::f<T>(int) const`` -> ``ns::f<T>``: the last top-level parameter list and
    what follows it go; ``operator()`` keeps its own parentheses."""
    name = _strip_trailer(name)
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch in ")>":
            depth += 1
        elif ch in "(<":
            depth -= 1
            if depth == 0 and ch == "(":
                head = name[:i]
                return head if not head.endswith("operator") else name
    return name


def _without_return_type(name: str) -> str:
    """``void ns::f<int>`` -> ``ns::f<int>``: GNU's demangler prints a function
    template's return type, py-spy's does not."""
    op = name.find("operator")
    depth, cut = 0, -1
    for i, ch in enumerate(name if op < 0 else name[:op]):
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            depth -= 1
        elif ch == " " and depth == 0 and name[i - 1:i] != ")" and not name.startswith(("const", "volatile"), i + 1):
            cut = i  # not the space of a qualifier: ``f(int) const::{lambda()#1}``
    return name[cut + 1:]


def key(name: str) -> str:
    """The form both a sampled name and a demangled table entry are compared in."""
    return _without_return_type(_strip_params(name))


#: Words of a demangled name that are not written as themselves in its mangled form.
_NOT_LITERAL = frozenset({"std", "operator", "anonymous", "namespace", "lambda", "const", "unnamed", "auto"})


def _tokens(name: str) -> list[bytes]:
    """What the mangled form of ``name`` must contain: each identifier of its own
    path (no template arguments) as the Itanium ABI writes it, length first
    (``at::_ops::add::call`` -> ``4_ops``, ``3add``, ``4call``); a C name as itself.
    They pick the few symbols worth demangling among hundreds of thousands."""
    k = key(name)
    if "::" not in k and "<" not in k:
        return [k.encode()]
    bare, depth = [], 0
    for ch in k:
        depth += ch in "<(" or -(ch in ">)" and depth > 0)
        bare.append(ch if depth == 0 and ch not in ">)" else " ")
    words = [w for w in _IDENT.findall("".join(bare)) if w not in _NOT_LITERAL]
    return sorted({f"{len(w)}{w}".encode() for w in words}, key=len, reverse=True)


def _demangle(mangled: str) -> str:
    if not mangled.startswith("_Z"):
        return mangled
    import cxxfilt  # the C++ runtime's __cxa_demangle

    try:
        name: str = cxxfilt.demangle(mangled)  # cxxfilt ships no types
        return name
    except cxxfilt.InvalidName:
        return mangled


#: Elf32_Sym / Elf64_Sym rows: (st_name, st_value, st_size, st_info, st_shndx).
_SYM_LAYOUT = {32: ("IIIBBH", (0, 1, 2, 3, 5)), 64: ("IBBHQQ", (0, 4, 5, 1, 3))}
_FUNC_TYPES = (2, 10)  # STT_FUNC, STT_GNU_IFUNC


def _rows(elf: ELFFile, section: SymbolTableSection) -> Iterator[tuple[int, int, int]]:
    """(name offset, address, size) of each defined function in a symbol table.
    pyelftools finds the table and its layout; the fixed-size rows are unpacked in
    bulk, because its per-symbol objects cost ~125 µs each (75 s for the 600k
    symbols of libtorch_cpu.so)."""
    fmt, (i_name, i_value, i_size, i_info, i_shndx) = _SYM_LAYOUT[elf.elfclass]
    fmt = ("<" if elf.little_endian else ">") + fmt
    if struct.calcsize(fmt) != section["sh_entsize"]:
        raise ValueError(f"{section.name}: entries of {section['sh_entsize']} bytes")
    for row in struct.iter_unpack(fmt, section.data()):
        if row[i_size] and row[i_info] & 0xF in _FUNC_TYPES and row[i_shndx] != 0:
            yield row[i_name], row[i_value], row[i_size]


def _trie(words: Iterable[bytes]) -> bytes:
    """A pattern matching the longest of ``words`` that starts at a place, written as a
    trie (``4call|4cast`` -> ``4ca(?:ll|st)``). re tries an alternation's branches one
    after the other at each place: with the hundreds of names sampled in a framework's
    core library, an alternation took 30 s over its symbols, the trie 2 s."""
    children: list[dict[int, int]] = [{}]  # node -> byte -> node; a child is made after its parent
    ends: set[int] = set()  # nodes where a word ends
    for word in words:
        node = 0
        for byte in word:
            if byte not in children[node]:
                children[node][byte] = len(children)
                children.append({})
            node = children[node][byte]
        ends.add(node)
    pattern = [b""] * len(children)
    for node in reversed(range(len(children))):  # each node's children first, without recursion
        branches = [re.escape(bytes([b])) + pattern[child] for b, child in sorted(children[node].items())]
        either = b"" if not branches else branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        pattern[node] = b"(?:" + either + b")?" if node in ends and branches else either  # greedy: longer first
    return pattern[0]


def _function_sizes(path: str, wanted: set[str]) -> dict[str, set[tuple[int, int]]]:
    """key -> {(address, size)} of the defined functions in ``path``'s symbol tables
    whose key is wanted. Only names holding every identifier of a wanted name are
    demangled (a framework's core has hundreds of thousands of symbols)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    # each name is looked for by its token the fewest wanted names share (then the longest):
    # a namespace every name holds (10tensorflow) found in most symbols, and each of those
    # symbols was tested against hundreds of names (9 of TensorFlow's core's 22 s)
    tokens_of = {w: _tokens(w) for w in wanted}
    shared = Counter(t for tokens in tokens_of.values() for t in set(tokens))
    by_hint: dict[bytes, list[tuple[list[bytes], str]]] = {}
    for w, tokens in tokens_of.items():
        if tokens:
            i = min(range(len(tokens)), key=lambda j: (shared[tokens[j]], -len(tokens[j])))
            by_hint.setdefault(tokens[i], []).append((tokens[:i] + tokens[i + 1:], w))
    hint = re.compile(_trie(by_hint)) if by_hint else None
    within = re.compile(_trie(w.encode(errors="surrogatepass") for w in wanted))
    out: dict[str, set[tuple[int, int]]] = {}
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        for section in elf.iter_sections():
            if not isinstance(section, SymbolTableSection):
                continue
            strings = elf.get_section(section["sh_link"]).data()
            for offset, address, size in _rows(elf, section):
                raw = strings[offset:strings.find(b"\0", offset)]
                hints = hint.findall(raw) if hint is not None else ()
                if not hints or not any(all(t in raw for t in rest) for h in set(hints) for rest, _ in by_hint[h]):
                    continue
                name = _demangle(raw.decode(errors="replace"))
                if not within.search(name.encode(errors="surrogatepass")):  # a key is part of its name
                    continue  # most names end here, before the slower key
                k = key(name)
                if k in wanted:
                    out.setdefault(k, set()).add((address, size))
    return out


class ElfCode:
    """Reads each shared object once per report; the answers are cached per file.

    :meth:`read_ahead` reads them in other processes while the caller goes on, one per
    core, the largest files first: pyelftools is pure Python, and a survey's reads
    (TensorFlow's 750 MiB core among them) took 25 s of its report, one core, while the
    other idled. ``close`` ends those processes."""

    def __init__(self) -> None:
        #: keyed by the size at capture too: a file that has changed since one capture answers
        #: that capture otherwise than another's
        self._cache: dict[tuple[str, int | None, frozenset[str]], LibraryCode] = {}
        self._ahead: dict[tuple[str, int | None, frozenset[str]], Future[LibraryCode]] = {}
        self._pool: ProcessPoolExecutor | None = None

    def read_ahead(self, wanted: Mapping[tuple[str, int | None], Iterable[str]]) -> None:
        """Start reading what :meth:`sizes` will be asked ((path, size at capture) ->
        names), in processes beside this one."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max(1, min(usable_cpus(), len(wanted))),
                                             mp_context=multiprocessing.get_context("fork"))
        for (path, expected), names in sorted(wanted.items(), key=lambda kv: -(kv[0][1] or 0)):
            names = frozenset(n for n in names if n)
            if (path, expected, names) not in self._cache and (path, expected, names) not in self._ahead:
                self._ahead[(path, expected, names)] = self._pool.submit(_sizes, path, expected, names)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "ElfCode":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sizes(self, path: str, expected_bytes: int | None, names: Iterable[str]) -> LibraryCode:
        """Bytes of machine code per sampled name in ``path`` (a file of
        ``expected_bytes``, as the capture saw it)."""
        names = frozenset(n for n in names if n)
        cached = self._cache.get((path, expected_bytes, names))
        if cached is not None:
            return cached
        ahead = self._ahead.pop((path, expected_bytes, names), None)
        out = None
        if ahead is not None:
            try:
                out = ahead.result()
            except Exception:  # noqa: BLE001 - the reading process died (memory): read it here
                out = None
        if out is None:
            out = _sizes(path, expected_bytes, names)
        self._cache[(path, expected_bytes, names)] = out
        return out

    @staticmethod
    def _read(path: str, names: frozenset[str]) -> LibraryCode:
        out = LibraryCode(path)
        by_key: dict[str, list[str]] = {}
        for n in names:
            by_key.setdefault(key(n), []).append(n)
        try:
            found = _function_sizes(path, set(by_key))
        except Exception as exc:  # noqa: BLE001 - pyelftools raises its own and struct errors on odd files
            out.error = f"unreadable symbol table ({type(exc).__name__}: {exc})"[:200]
            out.missing = sorted(names)
            return out
        for k, sampled in by_key.items():
            for n in sampled:
                if k in found:  # one of them ran: the largest is the most it can be
                    out.sizes[n] = max(size for _, size in found[k])
                else:
                    out.missing.append(n)
        out.missing.sort()
        return out


def _sizes(path: str, expected_bytes: int | None, names: frozenset[str]) -> LibraryCode:
    """:meth:`ElfCode.sizes`, uncached: what a file that is gone or changed since the
    capture cannot tell, said as such."""
    out = LibraryCode(path)
    try:
        actual = os.stat(path).st_size
    except OSError as exc:
        out.error = f"not on this machine ({exc.strerror or exc})"
        out.missing = sorted(names)
    else:
        if expected_bytes is not None and actual != expected_bytes:
            out.error = f"changed since the capture ({expected_bytes} bytes then, {actual} now)"
            out.missing = sorted(names)
        else:
            out = ElfCode._read(path, names)
    return out
