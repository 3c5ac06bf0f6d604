"""Types of the C core, the extension module ``tracer.collect._ctrace``: compiled from
tracer/collect/ctrace/ and loaded under this name by tracer/collect/cbuild.py, which
returns it as a plain module, so tracer/collect/ctracer.py reads its classes through
this stub (tests/test_ctrace.py checks the stub against the built module)."""

from types import FrameType
from typing import Any, Callable, Generic, TypedDict, TypeVar, final

# What the core reads of a kind, once: its frame, is_c and is_ext.
from tracer.collect.pytrace import _Kind as Kind

_N = TypeVar("_N")


#: How a framework function's lines are known: traced ("lines"), none (""), fixed (a
#: branch-free function's lines) or traced where it calls ctypes: offset -> [(line, kind)].
_How = str | frozenset[int] | dict[int, list[tuple[int, Kind]]]


class _Stats(TypedDict):
    code_objects: int
    c_functions: int
    last_build_ns: int
    profile_events: int
    trace_events: int
    trace_switches: int
    hook_ns: int


@final
class Core(Generic[_N]):
    """The event hooks and call tree of one tracer; builds its nodes as ``node_type``
    (tracer.trace.Node), given its field names, without calling it."""

    def __init__(self, node_type: type[_N], fields: tuple[str, ...] | None = None, /) -> None: ...
    def record(self, fn: Callable[[], Any], root_kind: Kind,
               classify_code: Callable[[FrameType], tuple[Kind, _How] | None],
               classify_c: Callable[[Any], tuple[Kind | None, Kind | None]], /) -> tuple[_N, Any]: ...
    def stats(self) -> _Stats: ...
