"""`hsx` verbs from a terminal, in this process, against the fake runner (tests/bot/conftest.py)."""

from __future__ import annotations

import json

from bot import cli, demo
from tests.bot.conftest import EXTRACTING
from tests.test_pipes import into_closed_pipe, quiet


def test_status_prints_the_chat_answer_or_the_record(fake, conf, capsys, patient):
    assert cli.main(["status", "--config", conf]) == 0
    assert capsys.readouterr().out.startswith("25,581 / 37,312 — 68.6% done")
    assert cli.main(["status", "--json", "--config", conf]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert {k: rec[k] for k in ("phase", "done", "total", "eta_s")} == {
        k: EXTRACTING[k] for k in ("phase", "done", "total", "eta_s")
    }
    assert fake.verbs() == ["status", "status"]


def test_a_terminal_s_stop_needs_no_confirmation_and_a_bad_reply_exits_non_zero(fake, conf, capsys):
    assert cli.main(["stop", "--config", conf]) == 0
    assert fake.verbs() == ["stop"] and capsys.readouterr().out == "`stop`: stop accepted\n"
    fake.reply("start", {"started": False, "reason": "a runner is running (pid 4242)"}, code=3)
    cli.main(["start", "--config", conf])
    assert capsys.readouterr().out == "`start`: a runner is running (pid 4242)\n"
    fake.reply("status", "Traceback (most recent call last):")  # not JSON: a broken runner
    assert cli.main(["status", "--config", conf]) == 1
    assert capsys.readouterr().out.startswith(
        "The GPU box answered something unreadable: `hsx-runner status`"
    )
    assert cli.main(["status", "--json", "--config", conf]) == 2
    assert "`hsx-runner status` did not answer JSON" in capsys.readouterr().err


def test_adopt_dir_is_made_absolute_here_and_refused_relative_for_a_remote_box(
    fake, conf, capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["adopt", "--json", "--config", conf, "old/out"]) == 0  # local: this machine's path
    assert fake.calls()[-1][-1] == str(tmp_path / "old" / "out")
    remote = tmp_path / "remote.toml"
    remote.write_text('[remote]\ntransport = "ssh"\nhost = "gpu-1"\n')
    assert cli.main(["adopt", "--config", str(remote), "old/out"]) == 2  # refused before any connection
    assert "must be an absolute path on the GPU box, got 'old/out'" in capsys.readouterr().err


def test_headless_prints_the_record_and_exits_0_when_done_1_when_failed(fake, conf, capsys):
    fake.set_status(phase="done", done=EXTRACTING["total"], alive=False)
    box = fake.box()
    assert demo._headless(box, None) == 0
    out = capsys.readouterr().out
    assert out.count("37,312 / 37,312") == 1 and fake.verbs() == ["status"]
    fake.set_status(phase="failed", reason="disk full")
    assert demo._headless(box, None) == 1


def test_json_logs_with_a_count_out_of_range_is_a_usage_error_not_a_traceback(fake, conf, capsys):
    assert cli.main(["logs", "-n", "0", "--json", "--config", conf]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hsx: `logs` takes a number of") and "Traceback" not in err
    assert fake.verbs() == []  # nothing reached the box


def test_piped_into_a_reader_that_left_it_ends_quietly(conf):
    quiet(into_closed_pipe("bot.cli", "status", "--json", "--config", conf))
