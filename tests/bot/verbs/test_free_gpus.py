"""/extract free-gpus on the seeds' box, end to end: the bot's real HTTP endpoint, the local
transport, a real `hsx-runner preflight` over eight held GPUs (NVML stub, systemctl on PATH)."""

from __future__ import annotations

import os

from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.config import from_dict
from tests.conftest import RUNNER
from tests.runner.helpers import held_box

from ..http_bot import serve


def _cfg(tmp_path, conf):
    return from_dict(
        {"remote": {"transport": "local", "runner": RUNNER, "runner_config": conf},
         "slack": {"channels": ["C0PROGRESS"], "operators": ["U0OPERATOR"],
                   "audit_log": str(tmp_path / "audit.jsonl")}},
        base_dir=str(tmp_path), source=str(tmp_path / "hsx.toml"),
    )  # fmt: skip


def _button(ask: dict) -> str:
    return ask["blocks"][1]["elements"][0]["value"]


def test_free_gpus_on_eight_gpus_says_who_held_them_and_that_each_unit_was_stopped(
    job, tmp_path, monkeypatch
):
    calls = held_box(tmp_path, monkeypatch, {"vllm.service": 6, "old-sglang.service": 2})
    conf = job(samples=3, server__device="cuda")
    held = "old-sglang.service holds 2 GPUs (6-7), 140,000 MiB; vllm.service holds 6 GPUs (0-5), 420,000 MiB"
    with serve(_cfg(tmp_path, conf), box=GpuBox(LocalTransport(), RUNNER, conf, timeout_s=120)) as (
        bot,
        _,
        _,
    ):
        bot.command("free-gpus")
        (ask,) = bot.rec.wait_for("response", timeout=120)
        assert ask["text"].startswith(f"Stop and disable old-sglang.service, vllm.service? GPUs held: {held}\n"
                                      "This question expires at "), ask  # fmt: skip
        assert bot.click("hsx_confirm", _button(ask), channel="C0PROGRESS") == 200
        posts = bot.rec.wait_for("response", 3, timeout=120)  # the question, its removal, the result
        assert posts[1].get("delete_original") is True
        done = posts[2]
        said = "old-sglang.service, vllm.service: stopped and disabled"
        assert done["text"].startswith(f"`free-gpus`: {held}; {said}\naudit: "), done["text"]
        attempt, entry = bot.audit()
        assert attempt["result"] == "attempt" and attempt["id"] == entry["id"]
        assert (entry["result"], entry["detail"]) == ("ok", f"{held}; {said}"), entry
    assert sorted(open(calls).read().split()) == sorted(
        ["stop", "disable"] * 2 + ["--"] * 4 + ["old-sglang.service", "vllm.service"] * 2
    )


def test_a_button_clicked_after_the_gpus_changed_hands_stops_nothing(job, tmp_path, monkeypatch):
    """Asked about vllm.service; by the click, another unit holds one of its GPUs: the real
    runner refuses, nothing is stopped, and the reply says so."""
    calls = held_box(tmp_path, monkeypatch, {"vllm.service": 8})
    conf = job(samples=3, server__device="cuda")
    with serve(_cfg(tmp_path, conf), box=GpuBox(LocalTransport(), RUNNER, conf, timeout_s=120)) as (
        bot,
        _,
        _,
    ):
        bot.command("free-gpus")
        (ask,) = bot.rec.wait_for("response", timeout=120)
        assert ask["text"].startswith("Stop and disable vllm.service?"), ask
        held_box(tmp_path, monkeypatch, {"vllm.service": 7, "training.service": 1})
        assert bot.click("hsx_confirm", _button(ask), channel="C0PROGRESS") == 200
        posts = bot.rec.wait_for("response", 3, timeout=120)  # the question, its removal, the result
        done = posts[2]
        assert done["text"].startswith(
            "`free-gpus` refused: nothing stopped: the GPUs changed hands since the question (asked about "
            "vllm.service; now training.service, vllm.service); ask again"
        ), done["text"]
        attempt, entry = bot.audit()
        assert attempt["result"] == "attempt" and attempt["id"] == entry["id"]
        assert entry["result"] == "refused", entry
    assert not os.path.exists(calls)


def test_a_button_clicked_after_it_expired_stops_nothing(job, tmp_path, monkeypatch):
    from bot.verbs import confirm

    calls = held_box(tmp_path, monkeypatch, {"vllm.service": 8})
    conf = job(samples=3, server__device="cuda")
    monkeypatch.setattr(confirm, "CONFIRM_S", -1)  # as if the click came after the question's time
    with serve(_cfg(tmp_path, conf), box=GpuBox(LocalTransport(), RUNNER, conf, timeout_s=120)) as (
        bot,
        _,
        _,
    ):
        bot.command("free-gpus")
        (ask,) = bot.rec.wait_for("response", timeout=120)
        assert bot.click("hsx_confirm", _button(ask), channel="C0PROGRESS") == 200
        (refused,) = bot.rec.wait_for("response", 2, timeout=120)[1:]
        assert "refused" in refused["text"] and "expired" in refused["text"], refused
        assert bot.audit()[0]["result"] == "refused"
    assert not os.path.exists(calls)
