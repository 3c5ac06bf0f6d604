"""A survey keeps, in its own folder, every trace its report read from elsewhere (the
package's recorded GPU traces, --with-traces), so its report is reproducible from it."""

from __future__ import annotations

import os

from tests.test_verdict import torch_pair
from tracer import survey as sv
from tracer.trace import save


def test_inputs_are_kept_in_the_survey_folder_byte_for_byte(tmp_path):
    elsewhere = tmp_path / "gpu-machine" / "gpu-default"
    cpu, gpu = torch_pair()
    elsewhere.mkdir(parents=True)
    (tmp_path / "survey" / "traces" / "torch" / "cpu-default").mkdir(parents=True)
    save(gpu, elsewhere / "conv2d-functional.json")
    (elsewhere / "relu-functional.gap.json").write_text(
        '{"framework": "torch", "device": "gpu", "variant": "default", "primitive": "relu", "api": "functional", '
        '"error": "no GPU"}')
    root = tmp_path / "survey"
    save(cpu, root / "traces" / "torch" / "cpu-default" / "conv2d-functional.json")
    kept = sv.keep_inputs([("torch-recorded", elsewhere)], root)
    assert kept == [{"name": "torch-recorded", "source": "gpu-default", "files": 2}]
    copy = root / "traces" / sv.INPUTS / "torch-recorded" / "conv2d-functional.json"
    assert copy.read_bytes() == (elsewhere / "conv2d-functional.json").read_bytes()
    # the survey's folder alone now holds what the survey plus the outside folder held
    alone = sv.read_folders([root / "traces"])
    both = sv.read_folders([root / "traces" / "torch", elsewhere])
    assert sorted(t.meta["device"] for t in alone[0]) == sorted(t.meta["device"] for t in both[0]) == ["cpu", "gpu"]
    assert [g.primitive for g in alone[1]] == [g.primitive for g in both[1]] == ["relu"]
    # kept twice, it is one copy
    sv.keep_inputs([("torch-recorded", elsewhere)], root)
    assert len(list((root / "traces" / sv.INPUTS).rglob("*.json"))) == 2


def test_inputs_never_copy_what_a_folder_links_to_nor_what_is_no_trace(tmp_path):
    """A folder someone else filled (`--with-traces`): links to secrets, a link out of the
    folder, a file that is not a trace: none of it reaches the report's published inputs."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:$6$hash:19000:0:99999:7:::\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    cpu, gpu = torch_pair()
    save(gpu, outside / "elsewhere.json")
    given = tmp_path / "given"
    given.mkdir()
    save(cpu, given / "conv2d-functional.json")
    (given / "shadow.json").symlink_to(secret)
    (given / "out.json").symlink_to(outside / "elsewhere.json")  # a real trace, but outside the folder
    (given / "notes.json").write_text('{"not": "a trace"}')
    (given / "sub").symlink_to(outside, target_is_directory=True)
    os.mkfifo(given / "pipe.json")  # would block a reader
    (given / "zero.json").symlink_to("/dev/zero")  # would never end
    root = tmp_path / "survey"
    kept = sv.keep_inputs([("with-0-given", given)], root)
    assert kept[0]["files"] == 1 and kept[0]["skipped"] >= 3
    copied = sorted(p.relative_to(root) for p in (root / "traces").rglob("*") if p.is_file())
    assert [str(p) for p in copied] == [f"traces/{sv.INPUTS}/with-0-given/conv2d-functional.json"]
    assert all(secret.read_text() not in p.read_text(errors="replace") for p in (root / "traces").rglob("*.json"))
