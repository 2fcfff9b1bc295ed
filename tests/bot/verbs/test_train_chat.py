"""`/train VERB`, `hsx train VERB` and "progress?" during training, through the bot's signed
HTTP endpoint and a fake runner that answers `hsx-runner train ACTION --json` with canned records."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import os
import sys
import time

import pytest

from bot import cli
from runner.contract.config import from_dict
from runner.contract.errors import StatusError
from runner.contract.train import TrainRecord
from runner.text.training import render_train

from ..http_bot import OPERATOR, STRANGER, serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NOW = dt.datetime(2026, 12, 1, 12, 10, tzinfo=dt.timezone.utc)
TRAINING = {
    "phase": "training", "step": 60, "total_steps": 120, "epoch": 1, "epochs": 2, "loss": 2.5,
    "acc": 0.412, "acceptance_rate": None, "checkpoint_step": 50, "pid": 4242, "supervisor_pid": 4241,
    "run_dir": "/data/out-train", "export_dir": "/data/out-train/export", "python": "/opt/sf/bin/python",
    "heartbeat": "2026-12-01T12:09:59.000Z", "reason": "", "exit_code": None, "launch": "start",
    "launches": 1, "started_at": "2026-12-01T12:00:00.000Z", "launched_at": "2026-12-01T12:00:00.000Z",
    "ended_at": None, "last_step_at": "2026-12-01T12:01:00.000Z", "nan_loss": False,
    "output_dir": "/data/out-train/output", "run_id": "hsx", "world": 1, "steps_per_epoch": 60,
}  # fmt: skip


@pytest.fixture
def train_cfg(cfg):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))


def test_the_record_is_checked_by_name_and_rendered():
    with pytest.raises(StatusError, match="'step'"):
        TrainRecord.from_dict({**TRAINING, "step": "sixty"})
    with pytest.raises(StatusError, match="unknown phase"):
        TrainRecord.from_dict({**TRAINING, "phase": "exploding"})
    text = render_train(TrainRecord.from_dict(TRAINING), now=NOW)
    assert text.splitlines()[:5] == [
        "training — step 60 / 120 (50.0%)",
        "epoch 1/2 · 1 steps/s · ETA 1m00s",
        "loss 2.5 · acc 41.2%",
        "(acc: the draft's top-1 match, a running mean of the logged batches (val acc: on held-out answers, "
        "the first draft token) · acceptance rate: Σmin(p_target, p_draft) · simulated: SpecForge's estimate, "
        "in SGLang's units)",
        "last durable checkpoint: step 50",
    ]
    nan = render_train(TrainRecord.from_dict({**TRAINING, "loss": "nan", "nan_loss": True}), now=NOW)
    assert "loss NaN" in nan


def test_train_status_answers_the_record(fake, train_cfg):
    fake.reply("train-status", TRAINING)
    with serve(train_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.command("status", command="/train") == 200
        (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "in_channel"
    assert resp["text"].startswith("training — step 60 / 120 (50.0%)")
    assert fake.calls() == [fake.argv("train", "status")]


def test_train_chart_uploads_the_historys_png(fake, train_cfg):
    """`/train chart` from a member: the box's history and record, drawn, uploaded to the channel;
    a second ask within the verb's allowance is refused and asks the box nothing."""
    from ..render.test_train_chart import DONE, a_history

    fake.reply("train-history", a_history())
    fake.reply("train-status", DONE)
    with serve(train_cfg, box=fake.box(), fake=fake) as (bot, _, rt):
        # the allowance's clock stands still: a render slower than the 30 s window on a busy
        # machine must not let the second ask through
        rt.handlers.allowance.clock = lambda: 1000.0
        assert bot.command("chart", user=STRANGER, command="/train") == 200
        (upload,) = bot.rec.wait_for("upload")
        (done,) = bot.rec.wait_for("files.completeUploadExternal")
        bot.command("chart", user=STRANGER, command="/train")
        (again,) = bot.rec.wait_for("response")
    assert upload["_head"].startswith(b"\x89PNG") and upload["_bytes"] > 10000
    assert done["channel_id"] == "C0PROGRESS" and "hsx-train-chart" in json.dumps(done["files"])
    assert done["initial_comment"].startswith("hsx: step 120 / 120 (100.0%) — done · loss 3.44 → 2.06")
    assert (
        "simulated accept length ~2.97 (best ~2.99 at step 100) · 1 crash, 1 resume"
        in done["initial_comment"]
    )
    assert "`chart` is limited to once every 30s per person" in again["text"]
    assert [c[-1] for c in fake.calls()] == ["history", "status"]


def test_a_history_of_the_wrong_kind_is_said_and_draws_nothing(fake, train_cfg):
    fake.reply("train-history", {"points": [{"step": "five"}]})
    with serve(train_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("chart", command="/train")
        (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral"
    assert "training history point 0 field 'step' is not an integer" in resp["text"]
    assert bot.rec.named("upload") == []


def test_operator_train_resume_runs_the_fixed_verb_and_audits(fake, train_cfg):
    fake.reply("train-resume", {"started": True, "pid": 77, "message": "training resumed (trainer pid 77)"})
    with serve(train_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("resume", command="/train")
        (resp,) = bot.rec.wait_for("response")
        assert resp["response_type"] == "in_channel"
        assert "training resumed" in resp["text"] and f"<@{OPERATOR}> `train resume` → ok" in resp["text"]
        assert fake.calls() == [fake.argv("train", "resume")]
        assert [e["result"] for e in bot.audit()] == ["attempt", "ok"]


def test_progress_during_training_answers_the_training_too(fake, train_cfg):
    fake.reply("train-status", {**TRAINING, "reason": "<!channel> boom"})
    with serve(train_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        event = {
            "type": "message",
            "channel": "C0PROGRESS",
            "user": STRANGER,
            "text": "progress?",
            "ts": "1.5",
        }
        assert bot.event(event, "Ev0101") == 200
        (post,) = bot.rec.wait_for("chat.postMessage")
    assert post["text"].startswith("25,581 / 37,312")  # the extraction first
    assert "training — step 60 / 120 (50.0%)" in post["text"]
    blocks = json.dumps(post["blocks"])
    assert "step 60 / 120" in blocks and "<!channel>" not in json.dumps(post)
    # the measurement's record too (a trained draft may be measured); not started, so not said
    assert sorted(c[0] for c in fake.calls()) == ["measure", "status", "train"]
    assert "measur" not in post["text"]


def test_progress_without_train_asks_nothing_of_training(fake, cfg):
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        event = {
            "type": "message",
            "channel": "C0PROGRESS",
            "user": STRANGER,
            "text": "progress?",
            "ts": "1.6",
        }
        bot.event(event, "Ev0102")
        (post,) = bot.rec.wait_for("chat.postMessage")
    assert "training" not in post["text"] and fake.verbs() == ["status"]


def test_hsx_train_status_json_prints_the_runners_record(fake, cfg, tmp_path, capsys):
    fake.reply("train-status", TRAINING)
    conf = tmp_path / "ops.toml"
    conf.write_text(
        f'[remote]\ntransport = "local"\nrunner = "{fake.runner}"\nrunner_config = "{fake.config}"\n'
    )
    assert cli.main(["train", "status", "--json", "--config", str(conf)]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 60
    assert cli.main(["train", "stop", "--config", str(conf)]) == 0
    assert fake.calls()[-1] == fake.argv("train", "stop")


def test_config_without_train_is_off():
    assert from_dict({}).train.python == ""


@pytest.mark.slow
def test_train_status_reaches_the_real_runner_on_a_real_run_dir(tmp_path, cfg, patient):
    """The real `hsx-runner train status --json` reads a run dir's status.json (runner/train/record.py):
    a record that says training without its supervisor holding the lock reads as crashed. What it
    says, not when (``patient``: on the busy machine the runner's first answer came past 4 s)."""
    from remote.client import GpuBox
    from remote.transport import LocalTransport
    from tests.conftest import RUNNER, write_config

    run = tmp_path / "out-train"
    job = tmp_path / "job.toml"
    write_config(
        job,
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
        train={"python": sys.executable, "run_dir": run},
    )
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    box = GpuBox(LocalTransport(), RUNNER, str(job), timeout_s=60)
    with serve(cfg, box=box) as (bot, _, _):
        bot.command("status", command="/train")
        (resp,) = bot.rec.wait_for("response", timeout=30)
        assert resp["text"] == "training: not started (`/train start`)"
        run.mkdir()
        (run / "status.json").write_text(json.dumps({**TRAINING, "phase": "training", "step": 30}))
        bot.command("status", command="/train")
        resp = bot.rec.wait_for("response", 2, timeout=30)[1]
    assert resp["text"].startswith("training crashed — step 30 / 120 (25.0%)")
    assert (
        "supervisor (pid 4241) is gone; it was training at its last heartbeat, Dec 1 12:09:59 UTC"
        in resp["text"]
        and "last durable checkpoint: step 50" in resp["text"]
    )


def test_the_console_answers_train_verbs_and_progress_with_the_training(fake, train_cfg):
    import io

    from bot.terminal.console import run_console

    fake.reply("train-status", TRAINING)
    out = io.StringIO()
    run_console(fake.box(), train_cfg, io.StringIO("/train stop\ny\nprogress?\n"), out)
    said = out.getvalue()
    assert "`train stop`: train-stop accepted" in said and "training — step 60 / 120 (50.0%)" in said
    assert [c[-1] for c in fake.calls() if c[0] == "train"] == ["stop", "status"]


def test_the_box_runs_only_the_fixed_train_actions(fake):
    with pytest.raises(ValueError, match="must be one of"):
        fake.box().call("train", "status; rm -rf /")
    assert fake.calls() == []


def test_a_checkpoint_time_from_the_box_gives_its_age():
    rec = TrainRecord.from_dict({**TRAINING, "checkpoint_at": "2026-12-01T12:05:00.000Z"})
    assert "last durable checkpoint: step 50 (5m00s ago)" in render_train(rec, now=NOW)


def test_train_in_an_unwatched_channel_is_refused_and_runs_nothing(fake, train_cfg):
    with serve(train_cfg, box=fake.box(), fake=fake) as (bot, _, _):
        bot.command("start", command="/train", channel="C0ELSEWHERE")
        (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and fake.calls() == []


class _UntilSaid(io.StringIO):
    """The console's input: nothing typed until the output says ``what`` (or 60 s), then Ctrl-D."""

    def __init__(self, out: io.StringIO, what: str):
        super().__init__()
        self.out, self.what = out, what

    def readline(self, *_):
        deadline = time.monotonic() + 60
        while self.what not in self.out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        return ""


def test_the_demo_console_says_a_training_crash_with_the_resume_to_type(fake, train_cfg):
    """`hsx demo`'s console runs the watcher: the crash alert a channel would get, between the
    prompts, with its Resume button as the command to type; its state is the console's own."""
    from bot.terminal.console import run_console

    fake.reply(
        "train-status",
        {**TRAINING, "phase": "crashed", "reason": "the trainer was killed by signal 9 (SIGKILL)"},
    )
    out = io.StringIO()
    run_console(fake.box(), train_cfg, _UntilSaid(out, "(Resume: type /train resume)"), out, watch=True)
    said = out.getvalue()
    assert "Training CRASHED: the trainer was killed by signal 9 (SIGKILL)" in said, said
    assert said.count("(Resume: type /train resume)") == 1
    assert os.path.exists(os.path.join(os.path.dirname(train_cfg.path), "console-watch.json"))
    assert not os.path.exists(train_cfg.watcher.state_file)  # a bot's state is not the console's


def test_progress_says_the_run_dirs_disk_use_and_a_queued_jobs_reason():
    rec = TrainRecord.from_dict({**TRAINING, "run_bytes": 1_900_000_000, "disk_free": 3_300_000_000_000,
                                 "disk_path": "/data"})  # fmt: skip
    assert "run dir /data/out-train: 1.9 GB · /data: 3.3 TB free" in render_train(rec, now=NOW).splitlines()
    assert "run dir" not in render_train(TrainRecord.from_dict(TRAINING), now=NOW)  # an older box: not said
    queued = {**TRAINING, "phase": "preflight", "step": 0, "reason": "Slurm job 7 is pending (Resources)"}
    text = render_train(TrainRecord.from_dict(queued), now=NOW)
    assert "waiting: Slurm job 7 is pending (Resources)" in text.splitlines()
    with pytest.raises(StatusError, match="'run_bytes'"):
        TrainRecord.from_dict({**TRAINING, "run_bytes": "lots"})


def test_a_training_slurm_requeued_says_how_often_and_why():
    rec = TrainRecord.from_dict(
        {**TRAINING, "requeues": 2, "requeued_for": "requeued by Slurm (a node failure or a preemption)"}
    )
    text = render_train(rec, now=NOW)
    assert ("requeued by Slurm twice, each time resumed from its last checkpoint "
            "(the last: requeued by Slurm (a node failure or a preemption))") in text, text  # fmt: skip
    assert "requeued" not in render_train(TrainRecord.from_dict(TRAINING), now=NOW)
