"""The durable outbox: seqs, acks, replay after a restart, torn lines, compaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from truerun.v1 import runtime_service_pb2 as pb

from truerun_runtime import Outbox, OutboxCorrupt, _outbox, make_event

OUTPUT = pb.RUNTIME_EVENT_TYPE_OUTPUT


def event(attempt_id: str, event_type: pb.RuntimeEventType.ValueType = OUTPUT) -> pb.RuntimeEvent:
    return make_event(attempt_id, f"t-{attempt_id}", "cb", event_type, payload={"data": "x"})


def test_seqs_are_per_attempt_and_gapless(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, fsync=False)
    seqs = [outbox.append(event(a)).seq for a in ("a", "a", "b", "a", "b")]
    assert seqs == [1, 2, 1, 3, 2]
    assert [e.seq for e in outbox.unacked("a")] == [1, 2, 3]
    assert [(e.attempt_id, e.seq) for e in outbox.unacked()] == [
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 1),
        ("b", 2),
    ]


def test_an_event_is_on_disk_before_a_listener_sees_it(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, fsync=False)
    seen: list[int] = []

    def listener(e: pb.RuntimeEvent) -> None:
        assert Outbox(tmp_path, fsync=False).last_seq(e.attempt_id) == e.seq
        seen.append(e.seq)

    outbox.subscribe(listener)
    outbox.append(event("a"))
    outbox.append(event("a"))
    assert seen == [1, 2]


def test_acks_drop_events_durably(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, fsync=False)
    for _ in range(4):
        outbox.append(event("a"), meta={"log_offset": 7})
    assert outbox.ack("a", 2)
    assert not outbox.ack("a", 1), "an older ack changes nothing"
    assert not outbox.ack("zzz", 5), "an unknown attempt is ignored"
    assert [e.seq for e in outbox.unacked("a")] == [3, 4]

    again = Outbox(tmp_path, fsync=False)
    assert again.last_seq("a") == 4 and again.acked_seq("a") == 2
    assert [e.seq for e in again.unacked("a")] == [3, 4]
    assert again.meta("a") == {"log_offset": 7} and again.count("a", OUTPUT) == 4
    assert again.ack("a", 99) and again.acked_seq("a") == 4, "clamped to the last seq"
    assert again.append(event("a")).seq == 5


def test_a_torn_last_line_is_cut_and_appends_go_on(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, fsync=False)
    outbox.append(event("a"))
    outbox.append(event("a"))
    journal = tmp_path / "a.jsonl"
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-20])  # killed in the middle of writing seq 2
    again = Outbox(tmp_path, fsync=False)
    assert again.last_seq("a") == 1
    assert again.append(event("a")).seq == 2
    assert Outbox(tmp_path, fsync=False).last_seq("a") == 2


def test_a_corrupt_line_before_the_end_is_refused(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, fsync=False)
    for _ in range(3):
        outbox.append(event("a"))
    journal = tmp_path / "a.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    lines[1] = "{not json\n"
    journal.write_text("".join(lines))
    with pytest.raises(OutboxCorrupt):
        Outbox(tmp_path, fsync=False)


def test_compaction_keeps_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_outbox, "COMPACT_AFTER_ACKED_LINES", 10)
    outbox = Outbox(tmp_path, fsync=False)
    for i in range(30):
        outbox.append(event("a"), meta={"log_offset": i})
    outbox.ack("a", 25)
    journal = tmp_path / "a.jsonl"
    assert len(journal.read_text().splitlines()) == 2 + 5, "header, base, 5 unacked events"
    again = Outbox(tmp_path, fsync=False)
    assert (again.last_seq("a"), again.acked_seq("a")) == (30, 25)
    assert [e.seq for e in again.unacked("a")] == [26, 27, 28, 29, 30]
    assert again.meta("a") == {"log_offset": 29} and again.count("a", OUTPUT) == 30
    assert again.append(event("a")).seq == 31


def test_forget_deletes_the_journal(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, fsync=False)
    outbox.append(event("a"))
    outbox.forget("a")
    assert outbox.unacked() == [] and not (tmp_path / "a.jsonl").exists()
    assert Outbox(tmp_path, fsync=False).attempts() == []
