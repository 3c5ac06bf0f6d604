"""Makes the project's copies of vit-h100 and vit-mi300x from the originals named in
PROVENANCE.md: the same document with ``metadata.system.env`` left out. That field is
the recording machine's environment, and it holds an access token (HF_TOKEN), host
names and internal addresses, which this repository must not republish. Nothing
else changes: every event, field and value is kept as recorded.

    python tracer/reference/imported/redact.py ORIGINAL.kineto.json.gz COPY.kineto.json.gz
"""

import gzip
import json
import sys


def redact(doc: dict) -> dict:
    system = (doc.get("metadata") or {}).get("system")
    if isinstance(system, dict):
        system.pop("env", None)
    return doc


def main(src: str, dst: str) -> None:
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        doc = redact(json.load(fh))
    data = json.dumps(doc, separators=(",", ":")).encode()
    with open(dst, "wb") as fh:
        fh.write(gzip.compress(data, mtime=0))


if __name__ == "__main__":
    main(*sys.argv[1:3])
