"""What a run writes of the command that made it (tracer.cli.common.command_line): every
path named by its last part, never by where it is on this machine. Fast tier."""

from __future__ import annotations

from tracer.cli.common import command_line


def test_paths_are_named_by_their_last_part():
    said = command_line(["survey", "torch", "-o", "/home/alice/secret/reports", "--with-traces", "/srv/gpu-run/",
                         "--workload", "torch=/home/alice/models/net.py:step", "--timeout=600",
                         "--output=/home/alice/x y"])
    assert said == "dltrace survey torch -o reports --with-traces gpu-run --workload torch=net.py:step " \
                   "--timeout=600 '--output=x y'"
    assert "alice" not in said and "/srv" not in said


def test_a_command_without_paths_is_kept_as_it_was():
    assert command_line(["probe", "torch", "conv2d", "--device", "standin"]) == \
        "dltrace probe torch conv2d --device standin"
    assert command_line(["probe", "torch", "--workload", "net.py:step"]) == "dltrace probe torch --workload net.py:step"
