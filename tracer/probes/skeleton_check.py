"""What the checks of the backend skeletons share (tracer.probes.torch_skeleton,
tensorflow_skeleton, jax_skeleton): the manifest a skeleton carries, the cases it
names, how many steps are run, the one-line failure and the verdict printed. Run
inside a framework's environment: the standard library and the contract only."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracer.contract import Exit

MANIFEST = "scaffold.json"
STEPS = 2  # the first step makes an optimizer's state, the second uses it


class CheckFailed(Exception):
    """One line: why the skeleton does not pass."""


@dataclass(frozen=True)
class Spec:
    workload: str
    api: str
    shape: tuple[int, ...]
    #: a user's own workload (tracer.contract.UserWorkload.to_json), where ``workload`` names one
    user: dict[str, str] | None = None

    @property
    def label(self) -> str:
        return f"{self.workload} ({self.api})"


def read_manifest(folder: Path) -> tuple[dict[str, Any], list[Spec]]:
    """The skeleton's manifest and the cases it names; a workload's file is named relative
    to the skeleton (tracer.scaffold.workload_refs), or absolute in a skeleton of before
    2026-12."""
    manifest: dict[str, Any] = json.loads((folder / MANIFEST).read_text())
    return manifest, [Spec(c["workload"], c["api"], tuple(c["shape"]), _kept(folder, c.get("user")))
                      for c in manifest["cases"]]


def _kept(folder: Path, user: dict[str, str] | None) -> dict[str, str] | None:
    if not user or Path(user["file"]).is_absolute():
        return user
    return {**user, "file": str((folder / user["file"]).resolve())}


def first_line(exc: BaseException) -> str:
    """A failure in one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def verdict(check: Callable[[], list[str]], said: Callable[[BaseException], str] = first_line) -> int:
    """Run ``check`` (a skeleton's whole check: the lines it passed with); print them and
    the time it took (Exit.OK), or the one line why it failed on stderr (Exit.ERROR): its
    CheckFailed, or, for anything else (an edited skeleton that does not load), ``said``."""
    t0 = time.perf_counter()
    try:
        lines = check()
    except CheckFailed as exc:
        print(f"check failed: {exc}", file=sys.stderr)
        return Exit.ERROR
    except Exception as exc:  # noqa: BLE001 - an edited skeleton that does not import, install or build
        print(f"check failed: the skeleton does not load: {said(exc)}", file=sys.stderr)
        return Exit.ERROR
    print("\n".join(lines))
    print(f"checked in {time.perf_counter() - t0:.1f} s")
    return Exit.OK
