"""The survey's bare baseline, run inside a framework's environment
(``PYTHON benchmarks/bare_worker.py REQUEST``): import the framework, apply the
variant, and run every probe case once, forward and backward, untraced. This is
the least any survey must do; benchmarks/run.py compares the survey with it.
"""

from __future__ import annotations

import importlib
import json
import sys

from tracer.collect.harness import set_dotted  # the harness's own switch, so both apply variants alike


def main(path: str) -> int:
    with open(path) as fh:
        req = json.load(fh)
    importlib.import_module(req["import"])
    for dotted, value in req["variant_set"].items():
        set_dotted(dotted, value)
    probe = importlib.import_module(req["probe"])
    for c in req["cases"]:
        try:
            case = probe.make_case(c["primitive"], c["api"], req["device_select"], tuple(c["shape"]))
        except Exception as exc:  # noqa: BLE001 - a case the survey also cannot run
            print(f"skip {c['primitive']} {c['api']}: {exc}", file=sys.stderr)
            continue
        case.backward(case.forward())
        case.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
