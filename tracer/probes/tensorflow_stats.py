"""TensorFlow's op-stats reader (frameworks.yaml: tensorflow
``profile_vocab.op-stats.reader``). Runs inside dltrace's TensorFlow environment
(never imported by dltrace itself): reads a TensorBoard profile plugin
``tensorflow_stats`` file with the published protobuf classes of XProf
(``xprof.protobuf.tf_stats_pb2``, installed there by the registry's install step)
and writes its records as plain JSON for :mod:`tracer.importers.op_stats`. The
file is protobuf: it is parsed by protobuf, never by a hand-written reader.

Usage: python -m tracer.probes.tensorflow_stats IN.pb OUT.json
Exit status Exit.NOT_ITS_KIND: the file is not a tensorflow_stats database (the reason on
stderr).
Standard library, protobuf, xprof's generated classes and the package's contract only.
"""

from __future__ import annotations

import json
import sys

from tracer.contract import Exit

#: The most records written: a real ResNet50 step has about 10,000.
MAX_RECORDS = 500_000
FIELDS = ("host_or_device", "op_type", "op_name", "occurrences", "total_time_in_us", "total_self_time_in_us")


def main(src: str, out: str) -> Exit:
    try:
        from google.protobuf.message import DecodeError
        from xprof.protobuf import tf_stats_pb2
    except ImportError as exc:
        print(f"XProf's protobuf classes are not installed in this environment ({exc})", file=sys.stderr)
        return Exit.IMPORT
    with open(src, "rb") as fh:
        data = fh.read()
    db = tf_stats_pb2.TfStatsDatabase()
    try:
        db.ParseFromString(data)
    except DecodeError as exc:
        print(f"not a tensorflow_stats protobuf ({exc})", file=sys.stderr)
        return Exit.NOT_ITS_KIND
    table = db.without_idle if db.HasField("without_idle") else db.with_idle
    if not table.tf_stats_record:
        print("a protobuf, but no tensorflow_stats records in it", file=sys.stderr)
        return Exit.NOT_ITS_KIND
    records = [{f: getattr(r, f) for f in FIELDS} for r in table.tf_stats_record[:MAX_RECORDS]]
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"device_type": db.device_type, "records": records,
                   "cut": max(0, len(table.tf_stats_record) - MAX_RECORDS)}, fh)
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
