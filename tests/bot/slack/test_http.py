"""The bot over real HTTP: signed requests in, Web API calls out to a recording server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from bot.slack.app import build_app, run_bot
from runner.contract.config import load
from runner.contract.errors import ConfigError
from runner.ports import free_port
from tests.conftest import BIN
from tests.runner.helpers import wait_for

from ..http_bot import OPERATOR, SECRET, STRANGER, Bot, serve


@pytest.fixture
def bot(fake, cfg):
    with serve(cfg, box=fake.box(), fake=fake) as (client, _, _):
        yield client


def test_status_command_answers_with_the_summary_in_channel(bot):
    assert bot.command("status") == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "in_channel"
    assert resp["text"].startswith(
        "25,581 / 37,312 — 68.6% done\n0 errors since resume · 1.16 samples/s steady"
    )
    assert any(b["type"] == "context" and "gpu-1" in b["elements"][0]["text"] for b in resp["blocks"])
    assert bot.fake.verbs() == ["status"]


def test_bad_signature_is_401_and_runs_nothing(bot):
    assert bot.command("resume", secret="wrong-secret") == 401
    bot.settled()
    assert bot.fake.calls() == [] and bot.rec.named("response") == []


def test_settled_waits_for_what_a_request_started(patient, bot):
    """The proof behind every "nothing happened" here: settled() returns only when the listeners
    a request started have ended, so what they do is seen without a wait of its own. Patient: on
    a starved machine the fake box's 1 s answer took past the product's 4 s bound (found by the
    busy fast lane), and the bound is test_status_answer's to prove."""
    with open(os.path.join(bot.fake.folder, "status.sleep"), "w") as f:
        f.write("1")
    assert bot.command("status") == 200
    assert bot.rec.named("response") == []  # answered at once; the box is still being asked
    bot.settled()
    (resp,) = bot.rec.named("response")
    assert resp["text"].startswith("25,581 / 37,312") and bot.fake.verbs() == ["status"]


def test_old_timestamp_is_refused(bot):
    assert bot.command("resume", ts=int(time.time()) - 6 * 60) == 401
    bot.settled()
    assert bot.fake.calls() == []


def test_stranger_resume_is_refused_and_audited(bot):
    assert bot.command("resume", user=STRANGER) == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "refused" in resp["text"]
    assert bot.fake.calls() == []
    (entry,) = bot.audit()
    assert entry["user"] == STRANGER and entry["action"] == "resume" and entry["result"].startswith("refused")


def test_operator_resume_runs_the_fixed_verb_once_and_audits(bot):
    assert bot.command("resume") == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "in_channel"
    assert "resume accepted" in resp["text"] and f"audit: <@{OPERATOR}> `resume` → ok" in resp["text"]
    assert bot.fake.calls() == [["resume", "--json", "--config", bot.fake.config]]
    assert [e["result"] for e in bot.audit()] == ["attempt", "ok"]


def test_operator_adopt_passes_the_directory_as_one_argument_and_audits(bot):
    assert bot.command("adopt /data/Old Output") == 200  # two words: help, nothing runs
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "`adopt` takes one directory" in resp["text"]
    assert bot.fake.calls() == [] and bot.audit() == []
    assert bot.command("/extract adopt /data/Old_Output") == 200
    resp = bot.rec.wait_for("response", 2)[1]
    assert (
        resp["response_type"] == "in_channel"
        and f"audit: <@{OPERATOR}> `adopt /data/Old_Output` → ok" in resp["text"]
    )
    assert bot.fake.calls() == [
        ["adopt", "--json", "--config", bot.fake.config, "--background", "/data/Old_Output"]
    ]
    assert [(e["action"], e["result"]) for e in bot.audit()] == [
        ("adopt /data/Old_Output", "attempt"),
        ("adopt /data/Old_Output", "ok"),
    ]


def test_stranger_adopt_is_refused_and_audited(bot):
    assert bot.command("adopt /data/old", user=STRANGER) == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "refused: only operators" in resp["text"]
    assert bot.fake.calls() == []
    (entry,) = bot.audit()
    assert entry["user"] == STRANGER and entry["action"] == "adopt /data/old"
    assert entry["result"].startswith("refused")


@pytest.mark.parametrize(
    "text",
    [
        "resume; rm -rf /",
        "$(id)",
        "status `id`",
        "resume\nrm -rf /",
        "x" * 10_000,
        "frobnicate",
        "logs 99999",
    ],
)
def test_hostile_or_unknown_input_gets_help_and_runs_nothing(bot, text):
    assert bot.command(text) == 200
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral"
    assert "/extract status" in resp["text"]  # the help text
    assert bot.fake.calls() == [] and bot.audit() == []


def test_stop_asks_for_confirmation_then_stops_once(bot):
    bot.command("stop")
    (ask,) = bot.rec.wait_for("response")
    assert bot.fake.calls() == []
    button = ask["blocks"][1]["elements"][0]
    assert button["action_id"] == "hsx_confirm"
    assert bot.click("hsx_confirm", button["value"]) == 200
    posts = bot.rec.wait_for("response", 3)
    assert posts[1].get("delete_original") is True
    assert posts[2]["response_type"] == "in_channel" and "`stop`" in posts[2]["text"]
    assert bot.fake.verbs() == ["stop"]
    assert [(e["action"], e["result"]) for e in bot.audit()] == [("stop", "attempt"), ("stop", "ok")]


def test_progress_message_answered_once_even_when_slack_retries(bot):
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "Progress?", "ts": "1.5"}
    assert bot.event(event, "Ev0001") == 200
    assert bot.event(event, "Ev0001", retry=1) == 200
    (post,) = bot.rec.wait_for("chat.postMessage")
    bot.settled()
    assert len(bot.rec.named("chat.postMessage")) == 1
    assert post["channel"] == "C0PROGRESS" and post["text"].startswith("25,581 / 37,312")
    assert bot.fake.verbs() == ["status"]


def test_progress_in_an_unwatched_channel_is_ignored(bot):
    event = {"type": "message", "channel": "C0ELSEWHERE", "user": STRANGER, "text": "progress?", "ts": "1.6"}
    assert bot.event(event, "Ev0002") == 200
    bot.settled()
    assert bot.rec.named("chat.postMessage") == [] and bot.fake.calls() == []


def test_corrupt_status_record_is_an_ephemeral_error(bot):
    bot.fake.reply("status", '{"phase": "exploding", "total": 3')
    bot.command("status")
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral" and "unreadable" in resp["text"]


def test_unreachable_box_is_reported_with_the_hop(bot, tmp_path):
    os.remove(bot.fake.runner)  # LocalTransport cannot start it: the "local" hop is down
    bot.command("status")
    (resp,) = bot.rec.wait_for("response")
    assert resp["response_type"] == "ephemeral"
    assert "GPU box unreachable — hop: local" in resp["text"]


def test_chart_uploads_a_png(bot):
    from bot.watch import history
    from runner.contract.status import StatusRecord

    for t, done in (("2030-01-01T10:00:00Z", 100), ("2030-01-01T11:00:00Z", 4300)):
        history.append(bot.cfg, StatusRecord(heartbeat_at=t, done=done, rate=1.16))
    bot.command("chart")
    (upload,) = bot.rec.wait_for("upload")
    (done,) = bot.rec.wait_for("files.completeUploadExternal")
    assert upload["_head"].startswith(b"\x89PNG") and upload["_bytes"] > 1000
    assert done["channel_id"] == "C0PROGRESS"
    # the history's points, then the record now: its job, its count, its percent
    cap = done["initial_comment"]
    assert cap.startswith("eagle3: 25,581 / 37,312 done (68.6%) — extracting")
    assert "samples done 100 → 25,581, Jan 01 10:00:00 to 11:42:50 UTC" in cap


def test_missing_secrets_are_a_clear_startup_error(cfg, fake):
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        build_app(cfg, box=fake.box(), env={}, http=True)
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        build_app(cfg, box=fake.box(), env={"SLACK_BOT_TOKEN": "xoxb-x"}, http=True)
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN"):
        run_bot(cfg, None, env={"SLACK_BOT_TOKEN": "xoxb-x"})


HSX = os.path.join(BIN, "hsx")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM)])
def test_ctrl_c_or_stop_ends_the_bot_promptly_with_a_reply_in_flight(tmp_path, fake, sig, code):
    """An operator's Ctrl-C or a service stop must not wait on an SSH call still running."""
    port = free_port()
    conf = tmp_path / "bot.toml"
    conf.write_text(
        f'[remote]\ntransport = "local"\nrunner = "{fake.runner}"\nrunner_config = "{fake.config}"\n'
        f'[slack]\nchannels = ["C0PROGRESS"]\noperators = ["{OPERATOR}"]\n'
        f'audit_log = "{tmp_path / "audit.jsonl"}"\n[watcher]\ninterval_s = 3600\n'
        f'state_file = "{tmp_path / "watch.json"}"\n'
    )
    with serve(load(str(conf))) as (client, _, _):  # only for its recording Web API server
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": "xoxb-test",
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": client.api,
        }
        proc = subprocess.Popen(
            [HSX, "bot", "--http", str(port), "--config", str(conf)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as a background job gets it
        )  # fmt: skip
        try:
            bot = Bot(f"http://127.0.0.1:{port}/slack/events", client.rec, client.api, fake, None)
            wait_for(lambda: _answers(bot), timeout=30, what="the bot's HTTP endpoint")
            with open(os.path.join(fake.folder, "status.sleep"), "w") as f:
                f.write("60")
            fake.reply("status", fake.status_dict())
            assert bot.command("status") == 200
            wait_for(lambda: fake.verbs().count("status") >= 1, timeout=10, what="the slow status call")
            proc.send_signal(sig)
            assert proc.wait(10) == code, proc.stdout.read()
        finally:
            proc.kill()
            proc.wait()
            _kill_slow_runners(fake.runner)  # the bot left its call running, as it should


def _kill_slow_runners(path: str) -> None:
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _answers(bot: Bot) -> bool:
    try:
        return bot.post(b"{}", "application/json", secret="wrong") == 401
    except OSError:
        return False


def test_progress_without_a_question_mark_is_answered(bot):
    event = {"type": "message", "channel": "C0PROGRESS", "user": STRANGER, "text": "progress", "ts": "1.7"}
    assert bot.event(event, "Ev0007") == 200
    (post,) = bot.rec.wait_for("chat.postMessage")
    assert post["channel"] == "C0PROGRESS" and post["text"].startswith("25,581 / 37,312")
    event = {**event, "text": "progress report is late", "ts": "1.8"}  # not a question to the bot
    assert bot.event(event, "Ev0008") == 200
    bot.settled()
    assert len(bot.rec.named("chat.postMessage")) == 1


def test_direct_messages_are_answered_for_members_of_a_watched_channel_only(bot):
    bot.rec.members["C0PROGRESS"] = [STRANGER]
    dm = {"type": "message", "channel": "D0DM", "channel_type": "im", "user": STRANGER, "text": "status?"}
    assert bot.event({**dm, "ts": "2.1"}, "Ev0009") == 200
    (post,) = bot.rec.wait_for("chat.postMessage")
    assert post["channel"] == "D0DM" and post["text"].startswith("25,581 / 37,312")
    assert bot.rec.named("conversations.members")[0]["channel"] == "C0PROGRESS"
    assert bot.event({**dm, "user": "U0OUTSIDER", "ts": "2.2"}, "Ev0010") == 200
    bot.settled()
    assert len(bot.rec.named("chat.postMessage")) == 1 and bot.fake.verbs() == ["status"]


def test_hsx_verify_quick_without_json_passes_quick(fake, cfg, tmp_path):
    conf = tmp_path / "ops.toml"
    conf.write_text(
        f'[remote]\ntransport = "local"\nrunner = "{fake.runner}"\nrunner_config = "{fake.config}"\n'
        f'[slack]\naudit_log = "{tmp_path}/audit.jsonl"\n'
    )
    fake.reply("verify", {"total": 2, "ok": 2, "missing": [], "corrupt": [], "failed": [], "complete": True})
    p = subprocess.run([os.path.join(BIN, "hsx"), "verify", "--quick", "--config", str(conf)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (call,) = fake.calls()
    assert call[0] == "verify" and "--quick" in call, call


HELD = {"ok": False, "checks": [
    {"name": "disk", "ok": True, "detail": "8 TB free", "fix": ""},
    {"name": "gpus", "ok": False, "detail": "GPU 0: pid 4711 python3 (71234 MiB) in vllm-autostart.service",
     "fix": "hsx-runner preflight --free-gpus stops and disables vllm-autostart.service",
     "units": ["vllm-autostart.service"]},
]}  # fmt: skip
FREED = {"ok": True, "checks": [
    {"name": "gpus", "ok": True, "detail": "vllm-autostart.service: stopped and disabled", "fix": ""},
]}  # fmt: skip


def test_preflight_answers_with_every_check_and_its_fix(bot):
    bot.fake.reply("preflight", HELD, code=1)
    bot.command("preflight")
    (resp,) = bot.rec.wait_for("response")
    assert resp["text"].startswith("preflight: a start would be refused")
    assert (
        "✗ gpus: GPU 0: pid 4711" in resp["text"] and "fix: hsx-runner preflight --free-gpus" in resp["text"]
    )
    assert bot.fake.verbs() == ["preflight"] and bot.audit() == []


def test_free_gpus_names_the_unit_asks_then_stops_it_once_and_audits(bot):
    bot.fake.reply("preflight", HELD, code=1)
    with open(os.path.join(bot.fake.folder, "free-gpus.json"), "w") as f:
        json.dump(FREED, f)
    bot.command("free-gpus", user=STRANGER)  # not an operator: refused before anything is asked
    (refused,) = bot.rec.wait_for("response")
    assert "refused" in refused["text"] and bot.fake.calls() == []
    bot.command("free-gpus")
    ask = bot.rec.wait_for("response", 2)[1]
    assert ask["text"].startswith("Stop and disable vllm-autostart.service?")
    button = ask["blocks"][1]["elements"][0]
    value = json.loads(button["value"])  # bound to the units shown, until it expires
    assert button["action_id"] == "hsx_confirm" and value["verb"] == "free-gpus", button
    assert value["units"] == ["vllm-autostart.service"] and 0 < value["until"] - time.time() <= 300
    assert [c[-1] for c in bot.fake.calls()] == [bot.fake.config]  # asked: a plain preflight, nothing stopped
    assert bot.click("hsx_confirm", button["value"]) == 200
    done = bot.rec.wait_for("response", 4)[-1]
    assert "free-gpus" in done["text"] and "stopped and disabled" in done["text"], done
    assert bot.fake.calls()[-1][-3:] == ["--free-gpus", "--units=vllm-autostart.service",
                                         f"--until={value['until']}"]  # fmt: skip
    assert [(e["action"], e["result"]) for e in bot.audit()] == [("free-gpus", "refused: not an operator"),
                                                                ("free-gpus", "attempt"),
                                                                ("free-gpus", "ok")]  # fmt: skip


@pytest.mark.parametrize(
    "value",
    [
        "free-gpus",
        json.dumps({"verb": "free-gpus", "units": ["vllm-autostart.service"], "until": int(time.time()) - 1}),
    ],
    ids=["an-older-unbound-button", "expired"],
)
def test_a_free_gpus_button_that_expired_stops_nothing(bot, value):
    """A click long after the question (or on a button from before buttons were bound) is
    refused and audited; the box is not asked to stop anything."""
    bot.fake.reply("preflight", HELD, code=1)
    assert bot.click("hsx_confirm", value) == 200
    (refused,) = bot.rec.wait_for("response")
    assert "refused" in refused["text"] and "expired" in refused["text"] and "ask again" in refused["text"], (
        refused
    )
    assert not [c for c in bot.fake.calls() if "--free-gpus" in c]
    (entry,) = bot.audit()
    assert entry["action"] == "free-gpus" and entry["result"] == "refused", entry


def test_start_force_passes_the_flag_and_the_audit_says_so(bot):
    bot.command("start --force")
    (resp,) = bot.rec.wait_for("response")
    assert bot.fake.calls()[0][0] == "start" and "--force" in bot.fake.calls()[0]
    assert [(e["action"], e["result"]) for e in bot.audit()] == [
        ("start --force", "attempt"),
        ("start --force", "ok"),
    ]
    assert "start --force" in resp["text"]
