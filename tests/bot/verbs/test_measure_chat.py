"""`/measure VERB` and `hsx measure VERB`, through the bot's signed HTTP endpoint and a fake runner
that answers `hsx-runner measure ACTION --json` with canned records; and the record's plain text
(runner/text/measure.py) in each phase."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import sys

import pytest

from bot import cli
from runner.contract.measure import PHASES, MeasureRecord
from runner.text.measure import render_measure
from runner.text.training import WITHHELD

from ..http_bot import OPERATOR, STRANGER, serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NOW = dt.datetime(2026, 12, 1, 12, 10, tzinfo=dt.timezone.utc)
ALONE = {"setting": "none", "requests": 10, "tokens_per_s": 300.0}
BEST = {
    "setting": "3/1/4", "requests": 6, "accept_length": 1.68, "accept_rate": 0.23,
    "histogram": [4, 1, 1, 0], "tokens_per_s": 510.0, "speedup": 1.7, "same": 5, "differ": [[7, 12, 0.002]],
}  # fmt: skip
MEASURING_REC = {
    "phase": "measuring", "pid": 4343, "done": 16, "total": 20, "setting": "3/1/4",
    "server_activity": "ready", "server_since": "2026-12-01T12:07:30Z", "restarts": 0,
    "started_at": "2026-12-01T12:00:00Z", "run_dir": "/data/out-measure",
    "results": "/data/out-measure/results.jsonl", "export_dir": "/data/out-train/export",
    "accept_length": 1.68, "best": "3/1/4", "simulated": 1.59,
    "serve_command": "python -m sglang.launch_server --model /models/t --speculative-draft /data/out-train/export",
    "settings": [ALONE, BEST],
}  # fmt: skip
LOADING = {
    **MEASURING_REC, "phase": "starting_server", "done": 10, "server_activity": "loading weights",
    "server_since": "2026-12-01T12:08:00Z", "accept_length": None, "best": None, "serve_command": None,
    "settings": [ALONE],
}  # fmt: skip


def test_each_phase_renders_for_operators_and_members():
    loading = render_measure(MeasureRecord.from_dict(LOADING), now=NOW)
    assert loading.splitlines()[:3] == [
        "measurement starting server — 10 / 20 requests (50.0%)",
        "starting the server for the draft at 3/1/4 (loading weights) for 2m00s",
        "simulated accept length 1.59 (SGLang's units: tokens per verify step, the bonus token counted)",
    ]
    measuring = render_measure(MeasureRecord.from_dict(MEASURING_REC), now=NOW)
    assert measuring.splitlines()[:4] == [
        "measuring — 16 / 20 requests (80.0%)",
        "measuring the draft at 3/1/4 (its server up for 2m30s)",
        "measured accept length 1.68 (3/1/4) · simulated 1.59 "
        "(SGLang's units: tokens per verify step, the bonus token counted)",
        "510 tokens/s with the draft · 300 without · 1.70×",
    ]
    assert "the target alone: 10 requests · 300 tokens/s" in measuring
    assert "3/1/4: 6 requests · accept length 1.68 · accept rate 0.23 · 510 tokens/s · 1.70× · " \
           "1 output differs from the target alone's at a near-tie: prompt 7 at token 12 (top two 0.002 apart)" \
           in measuring  # fmt: skip
    assert (
        "serve it: python -m sglang.launch_server" in measuring
        and "draft /data/out-train/export" in measuring
    )
    member = render_measure(MeasureRecord.from_dict(MEASURING_REC), now=NOW, full=False)
    assert "/data" not in member and f"the serve command: {WITHHELD}" in member
    done = {
        **MEASURING_REC,
        "phase": "done",
        "done": 20,
        "settings": [ALONE, {**BEST, "same": 6, "differ": []}],
    }
    text = render_measure(MeasureRecord.from_dict(done), now=NOW)
    assert text.startswith("measurement done — 20 / 20 requests (100.0%)\nmeasured accept length 1.68")
    assert "outputs equal (6)" in text and "server up" not in text
    for phase in ("failed", "crashed", "stopped"):
        rec = MeasureRecord.from_dict({**LOADING, "phase": phase, "reason": "the server /data/x died"})
        said, told = render_measure(rec, now=NOW), render_measure(rec, now=NOW, full=False)
        assert (
            said.startswith(f"measurement {phase} — 10 / 20") and f"{phase}: the server /data/x died" in said
        )
        assert "/data" not in told and f"the measurement {phase}; {WITHHELD}" in told
        assert ("`/measure resume` continues" in said) == (phase != "failed")
    preflight = render_measure(
        MeasureRecord.from_dict({**LOADING, "phase": "preflight", "total": 0}), now=NOW
    )
    assert preflight.splitlines()[0] == "measurement preflight"
    never = render_measure(MeasureRecord.from_dict({"phase": "stopped", "simulated": 1.59}), now=NOW)
    assert never.splitlines()[0] == "measurement: not started (`/measure start`)" and "1.59" in never
    assert set(PHASES) == {
        "preflight",
        "starting_server",
        "measuring",
        "done",
        "failed",
        "stopped",
        "crashed",
    }


def test_a_cpu_lanes_few_tokens_per_second_keep_their_digits():
    figs = [{"setting": "none", "requests": 3, "tokens_per_s": 6.822},
            {"setting": "3/1/4", "requests": 3, "accept_length": 1.566, "tokens_per_s": 1.4555, "speedup": 0.2134}]  # fmt: skip
    rec = MeasureRecord(phase="done", done=6, total=6, started_at="2026-12-04T10:00:00Z", best="3/1/4",
                        accept_length=1.566, settings=figs)  # fmt: skip
    text = render_measure(rec)
    assert "1.46 tokens/s with the draft · 6.82 without · 0.21×" in text, text
    assert "3/1/4: 3 requests · accept length 1.57 · 1.46 tokens/s · 0.21×" in text, text


def test_measure_status_answers_measured_beside_simulated_and_the_loading_servers_time(fake, cfg):
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=125)
    fake.reply("measure-status", {**LOADING, "server_since": since.strftime("%Y-%m-%dT%H:%M:%SZ")})
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.command("status", command="/measure") == 200
        (resp,) = bot.rec.wait_for("response")
        fake.reply("measure-status", MEASURING_REC)
        assert bot.command("status", user=STRANGER, command="/measure") == 200
        _, member = bot.rec.wait_for("response", 2)
    assert resp["response_type"] == "in_channel"
    lines = resp["text"].splitlines()
    assert lines[0] == "measurement starting server — 10 / 20 requests (50.0%)"
    assert re.fullmatch(
        r"starting the server for the draft at 3/1/4 \(loading weights\) for 2m\d\ds", lines[1]
    )
    assert lines[2].startswith("simulated accept length 1.59 (SGLang's units")
    assert "measured accept length 1.68 (3/1/4) · simulated 1.59" in member["text"]
    assert "/data" not in member["text"] and f"<@{OPERATOR}>" in member["text"]  # whom to ask
    assert fake.calls() == [fake.argv("measure", "status")] * 2


def test_hsx_measure_status_json_prints_the_runners_record(fake, conf, capsys):
    fake.reply("measure-status", MEASURING_REC)
    assert cli.main(["measure", "status", "--json", "--config", conf]) == 0
    assert json.loads(capsys.readouterr().out)["accept_length"] == 1.68
    assert fake.calls() == [fake.argv("measure", "status")]


def test_the_real_runner_answers_measure_status_and_refuses_a_start(tmp_path):
    """The real `hsx-runner measure status|start --json` through the client: an empty run dir reads
    as not started; a start is refused (REFUSED, an answer, not a failed command) and reads as not ok."""
    from remote.client import GpuBox
    from remote.transport import LocalTransport
    from runner.contract.replies import Answer
    from tests.conftest import RUNNER, write_config

    job = tmp_path / "job.toml"
    write_config(
        job,
        job={"model": f"{tmp_path}/model", "dataset": f"{tmp_path}/data.jsonl", "out": f"{tmp_path}/out"},
        measure={"run_dir": str(tmp_path / "out-measure")},
    )
    box = GpuBox(LocalTransport(), RUNNER, str(job), timeout_s=60)
    rec = box.record("measure")
    assert not rec.started_at and not rec.active
    assert render_measure(rec).startswith("measurement: not started (`/measure start`)")
    answer = Answer.from_dict(box.call("measure", "start"))
    assert not answer.ok and "sglang" in answer.message
    with pytest.raises(ValueError, match="the action must be one of"):
        box.call("measure", "export")


def test_progress_says_the_measurement_after_the_extraction_and_the_training_once_it_started(fake, cfg):
    from .test_train_chat import TRAINING

    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, python=sys.executable))
    fake.reply("train-status", TRAINING)
    fake.reply("measure-status", {"phase": "stopped", "reason": "not started", "simulated": 1.59})
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress?", "ts": "1.1"}
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.event(event, "Ev0001") == 200
        (before,) = bot.rec.wait_for("chat.postMessage")
        fake.reply("measure-status", MEASURING_REC)
        assert bot.event({**event, "ts": "1.2"}, "Ev0002") == 200
        after = bot.rec.wait_for("chat.postMessage", 2)[1]
    assert "measur" not in before["text"] and "training" in before["text"]  # not started: not said
    text = after["text"]
    extraction, training, measuring = (
        text.index("25,581 / 37,312"),
        text.index("training"),
        text.index("measuring —"),
    )
    assert extraction < training < measuring, text
    assert "measured accept length 1.68 (3/1/4) · simulated 1.59" in text
    assert "/data/out" not in text and "launch_server" not in text and f"<@{OPERATOR}>" in text  # whom to ask
    blocks = json.dumps(after["blocks"])
    assert "measured accept length 1.68" in blocks and "launch_server" not in blocks


DONE_REC = {**MEASURING_REC, "phase": "done", "done": 20,
            "settings": [ALONE, {**BEST, "requests": 10}, {**BEST, "setting": "5/4/8", "requests": 10,
                                                           "accept_length": 2.1, "histogram": [3, 2, 2, 1, 1, 1],
                                                           "tokens_per_s": 450.0, "speedup": 1.5}]}  # fmt: skip


def test_the_chart_draws_each_settings_accept_length_beside_the_simulated_histograms_and_speed():
    from bot.render import measure_chart

    rec = MeasureRecord.from_dict(DONE_REC)
    fig = measure_chart.figure(rec)
    ax_len, ax_hist, ax_rate = fig.axes
    lengths = [p.get_height() for p in ax_len.patches]
    assert lengths == [1.68, 2.1] and [t.get_text() for t in ax_len.get_xticklabels()] == ["3/1/4", "5/4/8"]
    (sim,) = [ln for ln in ax_len.get_lines() if ln.get_gid() == "simulated"]
    assert sim.get_ydata()[0] == 1.59
    shares = [p.get_height() for p in ax_hist.patches]
    assert shares[:4] == pytest.approx([4 / 6, 1 / 6, 1 / 6, 0.0]) and len(shares) == 4 + 6
    assert [p.get_height() for p in ax_rate.patches] == [300.0, 510.0, 450.0]
    assert [t.get_text() for t in ax_rate.texts] == ["", "1.70×", "1.50×"]
    assert (
        measure_chart.caption(rec)
        .splitlines()[1]
        .startswith("measured accept length 1.68 (3/1/4) · simulated 1.59")
    )
    assert not measure_chart.enough(MeasureRecord.from_dict(LOADING))  # the target alone only


def test_measure_chart_uploads_the_png_and_says_too_early_plainly(fake, cfg):
    fake.reply("measure-status", LOADING)
    with serve(cfg, box=fake.box(), fake=fake) as (bot, _, _):
        assert bot.command("chart", command="/measure") == 200
        (early,) = bot.rec.wait_for("response")
        fake.reply("measure-status", DONE_REC)
        assert bot.command("chart", user=STRANGER, command="/measure") == 200
        (upload,) = bot.rec.wait_for("upload")
        (done,) = bot.rec.wait_for("files.completeUploadExternal")
    assert early["response_type"] == "ephemeral" and "not enough measured yet" in early["text"]
    assert upload["_head"].startswith(b"\x89PNG") and upload["_bytes"] > 10000
    assert "hsx-measure-chart" in json.dumps(done["files"])
    assert "measured accept length 1.68 (3/1/4) · simulated 1.59" in done["initial_comment"]
    assert "launch_server" not in done["initial_comment"]
