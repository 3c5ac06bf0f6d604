"""What the checks of the backend skeletons share (tracer.probes.torch_skeleton,
tensorflow_skeleton, jax_skeleton): the manifest a skeleton carries, the cases it
names, how many steps are run, and the one-line failure. Run inside a framework's
environment: the standard library only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """The skeleton's manifest and the cases it names."""
    manifest: dict[str, Any] = json.loads((folder / MANIFEST).read_text())
    return manifest, [Spec(c["workload"], c["api"], tuple(c["shape"]), c.get("user")) for c in manifest["cases"]]
