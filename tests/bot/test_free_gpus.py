"""/extract free-gpus on the seeds' box, end to end: the bot's real HTTP endpoint, the local
transport, a real `hsx-runner preflight` over eight held GPUs (NVML stub, systemctl on PATH)."""

from __future__ import annotations

from remote.client import GpuBox
from remote.transport import LocalTransport
from runner.contract.config import from_dict
from tests.conftest import RUNNER
from tests.runner.helpers import held_box

from .http_bot import serve


def test_free_gpus_on_eight_gpus_says_who_held_them_and_that_each_unit_was_stopped(
    job, tmp_path, monkeypatch
):
    calls = held_box(tmp_path, monkeypatch, {"vllm.service": 6, "old-sglang.service": 2})
    conf = job(samples=3, server__device="cuda")
    cfg = from_dict(
        {"remote": {"transport": "local", "runner": RUNNER, "runner_config": conf},
         "slack": {"channels": ["C0PROGRESS"], "operators": ["U0OPERATOR"],
                   "audit_log": str(tmp_path / "audit.jsonl")}},
        base_dir=str(tmp_path), source=str(tmp_path / "hsx.toml"),
    )  # fmt: skip
    held = "old-sglang.service holds 2 GPUs (6-7), 140,000 MiB; vllm.service holds 6 GPUs (0-5), 420,000 MiB"
    with serve(cfg, box=GpuBox(LocalTransport(), RUNNER, conf, timeout_s=120)) as (bot, _, _):
        bot.command("free-gpus")
        (ask,) = bot.rec.wait_for("response", timeout=120)
        assert ask["text"] == f"Stop and disable old-sglang.service, vllm.service? GPUs held: {held}", ask
        assert bot.click("hsx_confirm", "free-gpus", channel="C0PROGRESS") == 200  # where it was asked
        posts = bot.rec.wait_for("response", 3, timeout=120)  # the question, its removal, the result
        assert posts[1].get("delete_original") is True
        done = posts[2]
        said = "old-sglang.service, vllm.service: stopped and disabled"
        assert done["text"].startswith(f"`free-gpus`: {held}; {said}\naudit: "), done["text"]
        attempt, entry = bot.audit()
        assert attempt["result"] == "attempt" and attempt["id"] == entry["id"]
        assert (entry["result"], entry["detail"]) == ("ok", f"{held}; {said}"), entry
    assert sorted(open(calls).read().split()) == sorted(
        ["stop", "disable"] * 2 + ["old-sglang.service", "vllm.service"] * 2
    )
