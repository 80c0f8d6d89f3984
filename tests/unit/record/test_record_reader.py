"""The one reader of a run's events.jsonl (launcher/record/reader.py): lenient for compare, strict for
status/attach/down, which must say a record is damaged rather than show a wrong run."""

import pytest

from launcher.record.reader import RecordDamaged, read_events

GOOD = '{"time": 1, "event": "run_start"}\n'


@pytest.mark.parametrize("strict", [False, True])
def test_a_last_line_cut_by_a_crash_is_skipped(tmp_path, strict):
    (tmp_path / "events.jsonl").write_text(GOOD + '{"time": 2, "ev')
    assert [(e.kind, e.time) for e in read_events(tmp_path, strict=strict)] == [("run_start", 1.0)]


@pytest.mark.parametrize("strict", [False, True])
def test_no_file_no_events(tmp_path, strict):
    assert read_events(tmp_path / "missing", strict=strict) == []


@pytest.mark.parametrize("bad", ['{"time": 2, "ev\n', '[1, 2]\n', '{"time": 2}\n'])
def test_a_damaged_middle_line_is_skipped_or_named(tmp_path, bad):
    (tmp_path / "events.jsonl").write_text(GOOD + bad + '{"time": 3, "event": "outcome"}\n')
    assert [e["event"] for e in read_events(tmp_path)] == ["run_start", "outcome"]
    with pytest.raises(RecordDamaged, match=r"events\.jsonl line 2 is not an event.*before it are intact"):
        read_events(tmp_path, strict=True)


def test_an_unreadable_file_is_damage_only_when_strict(tmp_path):
    (tmp_path / "events.jsonl").mkdir()  # exists, cannot be read as a file
    assert read_events(tmp_path) == []
    with pytest.raises(RecordDamaged, match=r"cannot read .*events\.jsonl"):
        read_events(tmp_path, strict=True)
