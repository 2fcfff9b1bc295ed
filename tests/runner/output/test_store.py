"""Store: layout, manifest, failures, resume planning and shard completion markers."""

from __future__ import annotations

import os
import subprocess
import sys

from runner.output.store import COMPLETE_DIR, SHARD, SHARD_ENV, Store, sample_path


def _commit(store: Store, idx: int) -> None:
    src = os.path.join(store.tmp, f"x{idx}")
    with open(src, "wb") as f:
        f.write(b"data")
    store.commit(idx, src, 3, 4, "00")


def test_plan_marks_complete_shards_and_agrees_without_them(tmp_path):
    total = SHARD + 50
    store = Store(str(tmp_path))
    store.prepare()
    assert store.plan(total).remaining == list(range(total))
    for i in range(SHARD - 1):
        _commit(store, i)
    store.fail(SHARD - 1, "bad row", 0, permanent=True)  # a permanent failure settles it too
    assert store.complete_shards() == {"rows_0-2000"}
    for i in range(SHARD, SHARD + 50, 2):
        _commit(store, i)
    assert "rows_2000-4000" not in store.complete_shards()
    fresh = Store(str(tmp_path)).plan(total)
    assert fresh.remaining == list(range(SHARD + 1, SHARD + 50, 2))
    assert set(fresh.failed) == {SHARD - 1}
    # the slow path (no markers) gives the same plan
    for name in os.listdir(tmp_path / COMPLETE_DIR):
        os.unlink(tmp_path / COMPLETE_DIR / name)
    slow = Store(str(tmp_path)).plan(total)
    assert (slow.committed, slow.remaining, set(slow.failed)) == (
        fresh.committed,
        fresh.remaining,
        set(fresh.failed),
    )


def test_requeue_reopens_a_complete_shard(tmp_path):
    store = Store(str(tmp_path))
    store.prepare()
    store.plan(10)
    for i in range(10):
        _commit(store, i)
    assert store.complete_shards() == {"rows_0-2000"}
    os.unlink(sample_path(str(tmp_path), 4))  # e.g. moved to quarantine by verify --repair
    store.requeue(4, "corrupt")
    assert store.complete_shards() == set()
    assert Store(str(tmp_path)).plan(10).remaining == [4]


def test_orphan_without_manifest_line_is_found_and_torn_tail_is_cut(tmp_path):
    store = Store(str(tmp_path))
    store.prepare()
    store.plan(5)
    _commit(store, 0)
    _commit(store, 1)
    # a crash between rename and manifest line: the file exists, the line does not
    os.makedirs(os.path.dirname(sample_path(str(tmp_path), 2)), exist_ok=True)
    open(sample_path(str(tmp_path), 2), "wb").close()
    with open(store.manifest_path, "ab") as f:
        f.write(b'{"idx":3,"seq"')  # torn last line
    s2 = Store(str(tmp_path))
    s2.prepare()
    with open(s2.manifest_path, "rb") as f:
        assert f.read().endswith(b"\n")
    plan = s2.plan(5)
    assert plan.orphans == [2] and plan.remaining == [3, 4]


def test_prepare_removes_stale_temp_files(tmp_path):
    store = Store(str(tmp_path))
    store.prepare()
    for n in ("a.ckpt", "a.json", "b.ckpt"):
        open(os.path.join(store.tmp, n), "w").close()
    assert Store(str(tmp_path)).prepare() == 3
    assert os.listdir(store.tmp) == []


def _ckpt_files(out) -> set[str]:
    """Every file SpecForge would train on: *.ckpt / *.ckpt.gz anywhere, hidden folders too."""
    return {
        os.path.relpath(os.path.join(d, n), out)
        for d, _dirs, names in os.walk(out)
        for n in names
        if n.endswith((".ckpt", ".ckpt.gz"))
    }


def test_a_crash_inside_commit_never_leaves_an_unrecorded_ckpt(tmp_path, monkeypatch):
    import pytest

    from runner.output import store as st

    out = str(tmp_path)
    store = Store(out)
    store.prepare()
    store.plan(5)
    _commit(store, 0)

    def crash(*_a, **_k):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(st.os, "replace", crash)  # killed after the manifest line, before the rename
    with pytest.raises(KeyboardInterrupt):
        _commit(store, 1)
    monkeypatch.undo()
    monkeypatch.setattr(st.jsonl, "append", crash)  # killed before the manifest line
    with pytest.raises(KeyboardInterrupt):
        _commit(store, 2)
    monkeypatch.undo()
    recorded = {os.path.relpath(sample_path(out, i), out) for i in store.manifest()}
    assert _ckpt_files(out) == {os.path.relpath(sample_path(out, 0), out)} <= recorded
    plan = Store(out).plan(5)  # the listing is the truth: 1 and 2 are extracted again
    assert plan.remaining == [1, 2, 3, 4] and plan.orphans == []


def test_shards_are_specforge_s_2000_rows_unless_a_test_sets_the_seam():
    """HSX_SHARD_ROWS is read once, at import: a fresh process shows what a runner would use."""
    code = "from runner.output import store, ranks; print(store.SHARD, ranks.SHARD, store.shard_name(4321))"
    env = {k: v for k, v in os.environ.items() if k != SHARD_ENV}

    def shown(**extra) -> str:
        p = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    assert shown() == "2000 2000 rows_4000-6000"
    assert shown(**{SHARD_ENV: "200"}) == "200 200 rows_4200-4400"


def test_a_sample_a_running_compact_has_away_is_planned_as_committed(tmp_path):
    import json

    from runner.output import compact

    store = Store(str(tmp_path))
    store.prepare()
    for i in range(4):
        _commit(store, i)
    os.rename(sample_path(str(tmp_path), 2), os.path.join(str(tmp_path), "x.old"))  # between its renames
    os.makedirs(os.path.join(str(tmp_path), compact.DIR))
    assert store.plan(4).remaining == [2]  # without the journal: the listing misses it
    with open(os.path.join(str(tmp_path), compact.DIR, compact.JOURNAL), "w") as f:
        json.dump({"line": {"idx": 2}}, f)
    assert compact.away(str(tmp_path)) == {2}
    plan = store.plan(4, away=compact.away(str(tmp_path)))
    assert plan.remaining == [] and plan.committed == {0, 1, 2, 3} and plan.orphans == []


def test_only_ascii_whole_names_are_shards_samples_or_rank_files(tmp_path):
    """A name in other digits or with a trailing newline is nobody's sample, shard or rank file."""
    store = Store(str(tmp_path))
    store.prepare()
    _commit(store, 1)
    for shard in ("rows_0-2000", "rows_\u0662000-4000", "rows_2000-4000\n"):
        os.makedirs(tmp_path / shard, exist_ok=True)
        for name in ("data_\u0663.ckpt", "data_4.ckpt\n", "data_\uff15.ckpt.gz", "data_6.ckpt.bad"):
            (tmp_path / shard / name).write_bytes(b"x")
    for name in ("manifest.rank\u0663.jsonl", "manifest.rank3.jsonl\n", "manifest.rankx.jsonl"):
        (tmp_path / name).write_bytes(b'{"idx":7,"seq":3}\n')
    (tmp_path / "manifest.rank2.jsonl").write_bytes(b'{"idx":9,"seq":3}\n')
    assert store.listing() == {1}
    assert store.manifest_indices() == {1, 9}
    assert store.plan(20).orphans == []
