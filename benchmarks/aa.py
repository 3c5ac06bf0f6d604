"""A/A: the whole default survey (every framework, primitive and API level, the
default variant, with native stacks at the kernel shapes), probed twice by two
independent sets of probe processes, and each trace diffed with its twin, pass by
pass. Both sides ran the same code, so every split found is false. Not a test: it
prints the false splits per framework and layer, and what the diff set aside.

    .venv/bin/python benchmarks/aa.py [--frameworks torch,tensorflow] [--keep DIR [--reuse]]

``--reuse`` diffs the traces kept in DIR again without probing (after a change to
the diff's rules; the figure that counts is that of fresh probes).

About 12 minutes for all five frameworks on a 2-core machine (two surveys).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer import envs, registry  # noqa: E402
from tracer import survey as sv  # noqa: E402
from tracer.contract import LAYERS, PASSES  # noqa: E402
from tracer.processing.diff import DiffError, diff_traces  # noqa: E402
from tracer.knowledge import knowledge
from tracer.trace import load  # noqa: E402

K = knowledge()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default="")
    ap.add_argument("--keep", type=Path, help="keep the two surveys' traces here")
    ap.add_argument("--reuse", action="store_true", help="diff the traces kept in --keep again, without probing")
    args = ap.parse_args()
    fws = [f for f in registry.load().values() if envs.status(f).ready
           and (not args.frameworks or f.name in args.frameworks.split(","))]
    jobs = sv.plan(fws, variants=False, native=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="dltrace-aa-"))
    t0 = time.monotonic()
    for side in ("a", "b"):
        if args.reuse and args.keep:
            continue
        gaps = sv.run(jobs, root / side, workers=2, fresh=True)
        if gaps:
            print(f"{side}: {len(gaps)} gaps: "
                  + "; ".join(f"{g.framework} {g.primitive} {g.api}: {g.error}" for g in gaps[:5]))
    print(f"two surveys in {time.monotonic() - t0:.0f} s ({root})")
    splits: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    diffs: dict[str, int] = defaultdict(int)
    examples: list[str] = []
    for job in jobs:
        for spec in job.cases:
            pa, pb = sv.case_path(root / "a", job, spec), sv.case_path(root / "b", job, spec)
            if not (pa.exists() and pb.exists()):
                continue
            a, b = load(pa), load(pb)
            fw = job.framework.name
            for pass_ in PASSES:
                try:
                    result = diff_traces(a, b, pass_=pass_, k=K)
                except DiffError:
                    continue
                diffs[fw] += 1
                for layer in result.layers:
                    found = [s for _, s in layer.all_splits()]
                    splits[fw][layer.layer] += len(found)
                    splits[fw]["set aside (not replicated)"] += layer.unreplicated
                    splits[fw]["set aside (follow an exact layer, same kernels)"] += layer.consequences
                    examples += [f"{fw} {spec.slug()} {pass_} {layer.layer}: {s.frame}" for s in found[:1]]
    cols = [*LAYERS, "set aside (not replicated)", "set aside (follow an exact layer, same kernels)"]
    print("\n## A/A: false splits between two probes of the same configuration\n")
    print("| framework | diffs | " + " | ".join(cols) + " | false splits |")
    print("|---|---|" + "---|" * len(cols) + "---|")
    total = 0
    for fw in sorted(diffs):
        false = sum(splits[fw][layer] for layer in LAYERS)
        total += false
        print(f"| {fw} | {diffs[fw]} | " + " | ".join(str(splits[fw][c]) for c in cols) + f" | {false} |")
    print(f"\n{total} false splits in {sum(diffs.values())} diffs")
    for line in examples[:20]:
        print("  " + line)


if __name__ == "__main__":
    main()
