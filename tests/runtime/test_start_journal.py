"""The Start journal: what it proves ("never received") and, above all, when it proves nothing
(another instance id, a copied file, a configured id, an id older than the journal, a damaged
line); a torn last record counts as received."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from truerun_runtime import StartJournal
from truerun_runtime._starts import _torn_prefix
from truerun_runtime.agent.config import INSTANCE_FILE, STARTS_FILE, AgentConfig

ID = "rt-1"


def created(path: Path, *attempts: str) -> StartJournal:
    journal = StartJournal.create(path, ID, fsync=False)
    for attempt in attempts:
        journal.record(attempt)
    return journal


def reloaded(path: Path, instance_id: str = ID) -> StartJournal:
    return StartJournal.load(path, instance_id, may_prove=True, fsync=False)


def test_a_recorded_start_is_received_after_a_reload_and_others_never_were(
    tmp_path: Path,
) -> None:
    path = tmp_path / "starts.jsonl"
    journal = created(path, "a1", "a2", "a1")
    assert journal.never_received("a3") and not journal.never_received("a1")
    again = reloaded(path)
    assert again.proof
    assert not again.never_received("a1") and not again.never_received("a2")
    assert again.never_received("a3")
    lines = path.read_text().splitlines()
    assert len(lines) == 3, "one line per distinct Start after the header"
    assert json.loads(lines[0])["instance_id"] == ID


def test_records_go_on_after_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "starts.jsonl"
    created(path, "a1")
    again = reloaded(path)
    again.record("a2")
    assert not reloaded(path).never_received("a2")


@pytest.mark.parametrize("cut", [1, 4, 9, 12, 14])
def test_a_torn_last_record_counts_as_received_and_later_records_still_load(
    tmp_path: Path, cut: int
) -> None:
    path = tmp_path / "starts.jsonl"
    created(path, "a1", "attempt-9")
    raw = path.read_bytes()
    path.write_bytes(raw[:-cut])  # the writer died inside the last line

    journal = reloaded(path)
    assert journal.proof
    assert not journal.never_received("a1")
    assert not journal.never_received("attempt-9"), "a partial line is counted as received"
    journal.record("a2")  # the repaired file takes further records on their own lines
    after = reloaded(path)
    assert not after.never_received("attempt-9") and not after.never_received("a2")
    # cut inside the id: its readable start is kept; inside the opening: any attempt
    assert after.never_received("b1") == (cut <= 11)


def test_zeros_left_past_the_written_end_count_as_any_attempt(tmp_path: Path) -> None:
    path = tmp_path / "starts.jsonl"
    created(path, "a1")
    with path.open("ab") as handle:
        handle.write(b"\0" * 20)  # a crash after the size grew, before the data landed
    journal = reloaded(path)
    assert not journal.never_received("anything"), "an unreadable record could be any Start"
    assert not reloaded(path).never_received("anything else")


def test_the_torn_prefix_is_only_what_the_record_surely_began_with() -> None:
    assert _torn_prefix(b'{"start":"abc') == "abc"
    assert _torn_prefix(b'{"start":"abc"}') == "abc"
    assert _torn_prefix(b'{"start":"a\\u00') == "a"
    assert _torn_prefix(b'{"start":"a\\') == "a"
    assert _torn_prefix(b'{"start":"a\\ud83d') == "a", "half a character is not kept"
    assert _torn_prefix(b'{"star') == ""
    assert _torn_prefix(b'{"start":"ab\0\0') == "ab"


def test_a_journal_of_another_instance_id_proves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "starts.jsonl"
    created(path, "a1")
    other = reloaded(path, "rt-2")
    assert not other.proof and not other.never_received("a9")
    other.record("a9")  # writes nothing to another id's journal
    assert reloaded(path).never_received("a9")


def test_a_copied_journal_proves_nothing(tmp_path: Path) -> None:
    """A copy (or a file-level restore from a backup) may lack the latest Starts."""
    created(tmp_path / "starts.jsonl", "a1")
    copy = tmp_path / "copy" / "starts.jsonl"
    copy.parent.mkdir()
    shutil.copy2(tmp_path / "starts.jsonl", copy)
    assert not reloaded(copy).proof


@pytest.mark.parametrize(
    "content",
    [b"", b'{"start_journal":1,"inst', b'{"start":"a1"}\n', b"junk\n"],
    ids=["empty", "torn header", "no header", "junk"],
)
def test_a_journal_without_a_whole_header_proves_nothing(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "starts.jsonl"
    path.write_bytes(content)
    assert not reloaded(path).proof


def test_a_damaged_line_before_the_last_proves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "starts.jsonl"
    created(path, "a1", "a2")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"start":"a\n' + lines[2])
    assert not reloaded(path).proof


def test_a_missing_journal_or_may_prove_false_proves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "starts.jsonl"
    assert not reloaded(path).proof
    created(path, "a1")
    journal = StartJournal.load(path, ID, may_prove=False, fsync=False)
    assert not journal.proof and not journal.never_received("a9")


def test_a_journal_deleted_under_the_writer_fails_the_record(tmp_path: Path) -> None:
    """Nothing may act on a Start whose record is not on disk."""
    path = tmp_path / "starts.jsonl"
    journal = created(path)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        journal.record("a1")
    assert not journal.never_received("a1"), "this process still counts it as received"


def test_a_journal_missing_a_held_attempt_is_void_for_good(tmp_path: Path) -> None:
    """E.g. an older agent ran on the state dir for a while and accepted a Start unrecorded."""
    path = tmp_path / "starts.jsonl"
    journal = created(path, "a1")
    journal.void_unless_received(["a1"])
    assert journal.proof
    journal.void_unless_received(["a1", "a2"])
    assert not journal.proof and not journal.never_received("a9")
    assert not reloaded(path).proof, "void after a restart too, once a2 is pruned"
    with path.open("ab") as handle:
        handle.write(b'{"start":"a3"}\n')
    assert not reloaded(path).proof, "a void line anywhere voids it"


# -- the agent's rules: which instance id a journal can prove anything for -------------------


def config(state_dir: Path, instance_id: str = "") -> AgentConfig:
    return AgentConfig("x:1", "t", "o", state_dir, instance_id=instance_id, fsync=False)


def test_a_generated_id_is_born_with_its_journal_and_keeps_it(tmp_path: Path) -> None:
    instance_id, journal = config(tmp_path).resolved_identity()
    assert journal.proof and journal.never_received("a1")
    journal.record("a1")
    header = json.loads((tmp_path / STARTS_FILE).read_text().splitlines()[0])
    assert header["instance_id"] == instance_id
    again_id, again = config(tmp_path).resolved_identity()
    assert again_id == instance_id
    assert again.proof and not again.never_received("a1") and again.never_received("a2")


def test_a_configured_id_never_proves_and_writes_nothing(tmp_path: Path) -> None:
    instance_id, journal = config(tmp_path, "dev-7").resolved_identity()
    assert instance_id == "dev-7"
    journal.record("a1")
    assert not journal.proof and not journal.never_received("a2")
    assert not (tmp_path / STARTS_FILE).exists()


def test_a_configured_id_ignores_a_journal_naming_it(tmp_path: Path) -> None:
    """A configured id can outlive a wiped state dir: even its own journal is not proof."""
    StartJournal.create(tmp_path / STARTS_FILE, "dev-7", fsync=False)
    assert not config(tmp_path, "dev-7").resolved_identity()[1].proof


def test_a_generated_id_from_before_journals_proves_nothing(tmp_path: Path) -> None:
    (tmp_path / INSTANCE_FILE).write_text("rt-old\n")
    instance_id, journal = config(tmp_path).resolved_identity()
    assert instance_id == "rt-old"
    assert not journal.proof and not journal.never_received("a1")
    journal.record("a1")
    assert not (tmp_path / STARTS_FILE).exists(), "a late journal would still prove nothing"


def test_a_journal_left_by_an_id_that_was_never_stored_is_replaced(tmp_path: Path) -> None:
    """The agent died between creating the journal and storing its id: that id was never
    used; the next one is born with a fresh journal."""
    StartJournal.create(tmp_path / STARTS_FILE, "rt-unborn", fsync=False).record("a1")
    instance_id, journal = config(tmp_path).resolved_identity()
    assert instance_id != "rt-unborn"
    assert journal.proof and journal.never_received("a1")
    assert config(tmp_path).resolved_identity()[1].proof
