"""The audit log: every attempt and outcome on record, whatever a crash left in the file."""

from __future__ import annotations

from bot.verbs.audit import AuditLog


def test_a_line_torn_by_a_crash_costs_only_itself(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path))
    ref = log.attempt("U1", "stop")
    with open(path, "ab") as f:  # the bot killed mid-write: half a line, no newline
        f.write(b'{"t": "2026-12-03T10:00:00Z", "user": "U2", "act')
    log.record("U1", "stop", "ok", "runner pid 7 stopped", ref=ref)
    got = log.read()
    assert [(e["user"], e["result"]) for e in got] == [("U1", "attempt"), ("U1", "ok")]
    assert got[1]["id"] == ref and got[1]["detail"] == "runner pid 7 stopped"
    assert path.read_bytes().count(b"\n") == 3  # the torn line ended, not glued to the next


def test_an_empty_or_missing_log_reads_as_no_entries(tmp_path):
    assert AuditLog(str(tmp_path / "none.jsonl")).read() == []
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert AuditLog(str(tmp_path / "empty.jsonl")).read() == []
