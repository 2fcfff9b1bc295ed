"""Atomic writes: an unpredictable temp beside the target, never a symlink followed, owner-only."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from runner.contract.atomic import write_atomic


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_symlink_planted_at_the_old_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target = tmp_path / "status.json"
    for pid in (os.getpid(), os.getpid() + 1):  # the name the temp file used to have
        os.symlink(victim, f"{target}.{pid}.tmp")
    write_atomic(str(target), "new")
    assert victim.read_text() == "keep me" and target.read_text() == "new"
    assert not target.is_symlink()


def test_a_symlink_at_the_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target = tmp_path / "status.json"
    os.symlink(victim, target)
    write_atomic(str(target), "new")
    assert victim.read_text() == "keep me" and target.read_text() == "new" and not target.is_symlink()


def test_state_files_are_owner_only_even_over_an_older_world_readable_one(tmp_path):
    target = tmp_path / "status.json"
    write_atomic(str(target), "one")
    assert mode(target) == 0o600
    os.chmod(target, 0o644)  # as an older hsx left it
    write_atomic(str(target), "two")
    assert mode(target) == 0o600 and target.read_text() == "two"
    write_atomic(str(tmp_path / "shown.txt"), "x", mode=0o644)
    assert mode(tmp_path / "shown.txt") == 0o644


def test_concurrent_writers_never_clobber_each_other_s_temp(tmp_path):
    target = str(tmp_path / "state.json")
    texts = [f"{w}:" + str(w) * 200_000 for w in range(6)]
    errors: list[BaseException] = []

    def writer(text: str) -> None:
        try:
            for _ in range(15):
                write_atomic(target, text)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open(target) as f:
        assert f.read() in texts  # one writer's text, whole
    assert os.listdir(tmp_path) == ["state.json"]  # no temp left behind


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "status.json"
    write_atomic(str(target), "old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(str(target), "\ud800")  # a lone surrogate cannot be written as UTF-8
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["status.json"]
