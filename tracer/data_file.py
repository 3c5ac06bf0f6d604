"""The package's YAML data files (frameworks.yaml, libraries.yaml, or the file
$DLTRACE_REGISTRY names), read safely: only a regular file, at most MAX_BYTES of it,
refused when it expands to more than MAX_NODES nodes once its aliases are followed; a
problem is a one-line :class:`RegistryError` naming the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tracer.bounded import NotRegular, TooLarge, read_regular

if TYPE_CHECKING:
    # importlib.resources.abc is new in 3.11; 3.10 has Traversable in importlib.abc
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

#: The largest registry file read (the package's is 26 KB), and the most YAML nodes
#: it may expand to, aliases followed (the package's has 900): an alias bomb of a
#: few hundred bytes expands to billions when printed or copied.
MAX_BYTES = 1 << 20
MAX_NODES = 100_000


class RegistryError(Exception):
    """frameworks.yaml is malformed; the message names the entry and field."""


def read_text(path: Path | Traversable) -> str:
    """A data file's text. A file named by the user (DLTRACE_REGISTRY) is read as traces
    are: only a regular file (a named pipe would block, /dev/zero never end), at most
    MAX_BYTES of it; a problem is a one-line RegistryError."""
    try:
        return (read_regular(path, MAX_BYTES) if isinstance(path, Path) else path.read_bytes()).decode()
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror}") from None
    except (NotRegular, TooLarge) as exc:
        raise RegistryError(f"cannot read {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{path.name} is not valid YAML: {exc}".splitlines()[0]) from None


def _expanded_nodes(text: str) -> int:
    """How many YAML nodes ``text`` holds once every alias is followed (each node
    counted once per place it appears), without expanding anything."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if not done:
            if id(node) in visiting:  # an alias inside its own anchor: endless once expanded
                return MAX_NODES + 1
            visiting.add(id(node))
        kids: list[yaml.Node] = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                                 else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            sizes[id(node)] = min(1 + sum(sizes.get(id(k), 0) for k in kids), MAX_NODES + 1)
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def safe_yaml(file_name: str, text: str) -> Any:
    """``text`` (the file ``file_name``) through yaml.safe_load, refused with a one-line
    RegistryError when it is not YAML or expands to more than MAX_NODES nodes."""
    try:
        if _expanded_nodes(text) > MAX_NODES:
            raise RegistryError(f"{file_name}: expands to more than {MAX_NODES:,} YAML nodes once its aliases are "
                                "followed (an alias bomb?)")
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise RegistryError(f"{file_name} is not valid YAML: {exc}".splitlines()[0]) from None
