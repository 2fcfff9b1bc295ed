"""The shared parser and handlers, and the terminal console over them."""

from __future__ import annotations

import io

import pytest

from bot.terminal.console import run_console
from bot.verbs.commands import Command, parse
from bot.wiring import make_handlers


@pytest.mark.parametrize(
    "text,verb",
    [
        ("progress?", "status"),
        ("  STATUS?? ", "status"),
        ("<@U0BOT> progress?", "status"),
        ("/extract resume", "resume"),
        ("Resume", "resume"),
        ("/extract", "help"),
        ("", "help"),
    ],
)
def test_parse_known_forms(text, verb):
    assert parse(text).verb == verb and not parse(text).problem


def test_parse_arguments():
    assert parse("logs 50") == Command("logs", n=50)
    assert parse("/extract logs -n 5") == Command("logs", n=5)
    assert parse("verify --repair --quick") == Command("verify", repair=True, quick=True)
    assert parse("verify --repair").mutating and not parse("verify").mutating
    assert parse("stop").confirmed is False and parse("stop --yes").confirmed is True
    assert (
        parse("resume --force") == Command("resume", force=True)
        and parse("resume --force").action == "resume --force"
    )
    assert (
        parse("free-gpus").mutating and parse("free-gpus --yes").confirmed and not parse("preflight").mutating
    )


@pytest.mark.parametrize(
    "text",
    [
        "resume; rm -rf /",
        "$(id)",
        "`id`",
        "status\nrm -rf /",
        "a" * 10_000,
        "resume --now",
        "start --force --yes",
        "free-gpus vllm.service",
        "logs 0",
        "/extractresume",
        "status && reboot",
        "stop now",
        None,
    ],
)
def test_parse_rejects_with_a_reason(text):
    cmd = parse(text)
    assert cmd.verb == "help" and cmd.problem


def test_console_answers_and_stops_only_after_yes(fake, cfg):
    inp = io.StringIO("progress?\n/extract stop\nn\n/extract stop\nyes\nresume; rm -rf /\n")
    out = io.StringIO()
    run_console(fake.box(), cfg, inp, out)
    text = out.getvalue()
    assert "25,581 / 37,312 — 68.6% done" in text
    assert "not stopped" in text and "input refused" in text
    assert "audit: console `stop` → ok" in text
    assert fake.verbs() == ["status", "stop"]
    assert text.endswith("hsx> \n")


def test_operator_group_lookup_failure_grants_nothing(fake, cfg):
    cfg.slack.operator_group = "S0OPS"

    def broken(user):
        raise RuntimeError("usergroups.users.list failed")

    h = make_handlers(cfg, fake.box(), in_group=broken)
    reply = h.ask("resume", "U0SOMEONE")
    assert reply.error and "refused" in reply.text and fake.calls() == []
    assert make_handlers(cfg, fake.box(), in_group=lambda u: u == "U0INGROUP").is_operator("U0INGROUP")


def test_verify_and_refused_start_are_rendered(fake, cfg):
    h = make_handlers(cfg, fake.box())
    fake.reply("verify", {"total": 5, "ok": [0, 1, 3], "missing": [2], "corrupt": [], "failed": [4]}, code=1)
    assert h.ask("verify", "anyone").text.startswith(
        "verify: 3 / 5 sound — 1 missing, 0 corrupt, 1 failed\nmissing: 2"
    )
    fake.reply(
        "verify", {"total": 5, "ok": 4, "missing": [], "corrupt": [], "failed": [], "unrecorded": [3]}, code=1
    )
    text = h.ask("verify", "another").text  # one verify a person per 10 minutes
    assert "not yet in the manifest (the next run records them): 3" in text and "every sample" not in text
    fake.reply("start", {"ok": False, "message": "job is already running (pid 77)"}, code=3)
    reply = h.ask("start", "U0OPERATOR")
    assert reply.text == "`start` refused: job is already running (pid 77)" and "→ refused" in reply.audit


def test_parse_adopt_keeps_the_path_and_refuses_anything_else():
    assert parse("/extract adopt /Data/Old_Output-2") == Command("adopt", path="/Data/Old_Output-2")
    assert parse("<@U0BOT> ADOPT /data/x").path == "/data/x" and parse("adopt /data/x").mutating
    assert parse("adopt /data/x").action == "adopt /data/x"
    for text in ("adopt", "adopt data/x", "adopt /a /b", "adopt /a;id", "adopt /$(id)", "adopt /a/../etc",
                 "adopt /a`id`", "adopt /a\n/b", "adopt -/x"):  # fmt: skip
        cmd = parse(text)
        assert cmd.verb == "help" and "adopt" in cmd.problem or "refused" in cmd.problem, text


def test_adopt_runs_in_the_background_its_report_is_rendered_and_a_refusal_is_audited(fake, cfg):
    from runner.contract.status import StatusRecord
    from runner.text.extraction import background_result

    h = make_handlers(cfg, fake.box())
    fake.reply("adopt", {"ok": True, "started": True, "background": True, "pid": 77, "verb": "adopt"})
    reply = h.ask("/extract adopt /data/old", "U0OPERATOR")
    assert reply.text.startswith("adopt running in the background on the GPU box (pid 77)"), reply.text
    assert "→ ok" in reply.audit and fake.calls()[-1] == [
        "adopt",
        "--json",
        "--config",
        fake.config,
        "--background",
        "/data/old",
    ]
    report = {"ok": True, "source": "/data/old", "total": 12, "adopted": 6, "bad": {"2": "does not load: truncated"},
              "stray": [15], "missing": [1, 5, 9], "missing_count": 3, "already": [], "loss_mask_differs": []}  # fmt: skip
    done = StatusRecord(background={"verb": "adopt", "state": "done", "started_at": "t", "result": report})
    assert background_result(done).startswith(
        "adopt finished: adopt /data/old: 6 adopted · 1 bad · 1 stray (nothing deleted) · 3 missing\n"
        "bad 2: does not load: truncated"
    )
    fake.reply("adopt", {"ok": False, "refused": True, "reason": "job is already running (pid 7)"}, code=3)
    reply = h.ask("adopt /data/old", "U0OPERATOR")
    assert reply.error and reply.text == "`adopt` refused: job is already running (pid 7)"
    assert "`adopt /data/old` → refused" in reply.audit


def test_compact_is_for_operators_runs_in_the_background_and_says_what_it_freed(fake, cfg):
    from runner.contract.status import StatusRecord
    from runner.text.extraction import background_line, background_result

    h = make_handlers(cfg, fake.box())
    reply = h.ask("/extract compact", "U0STRANGER")
    assert reply.error and "only operators may `compact`" in reply.text and fake.calls() == []
    assert parse("compact now").verb == "help"  # it takes no arguments: what it does is the job's config
    fake.reply("compact", {"ok": True, "started": True, "background": True, "pid": 78, "verb": "compact"})
    reply = h.ask("/extract compact", "U0OPERATOR")
    assert reply.text.startswith("compact running in the background on the GPU box (pid 78)"), reply.text
    assert "`compact` → ok" in reply.audit
    assert fake.calls()[-1] == ["compact", "--json", "--config", fake.config, "--background"]
    running = StatusRecord(background={"verb": "compact", "state": "running", "done": 1200, "total": 37312,
                                       "rate_bytes_s": 3.1e8, "eta_s": 5400, "freed": 28_500_000_000})  # fmt: skip
    assert background_line(running) == "compact: 1,200 / 37,312 files, 310.0 MB/s, 28.5 GB freed, ETA 1h30m"
    report = {"ok": True, "storage": "ckpt.gz", "mantissa_bits": 7, "recoded": 1200, "already": 300,
              "skipped": {"17": "checksum differs from the manifest (hsx-runner verify --repair re-extracts it)"},
              "bytes_before": 150_000_000_000, "bytes_after": 121_500_000_000, "freed": 28_500_000_000}  # fmt: skip
    done = StatusRecord(background={"verb": "compact", "state": "done", "started_at": "t", "result": report})
    assert background_result(done) == (
        "compact finished: compact to ckpt.gz: 1,200 samples re-encoded, 28.5 GB freed "
        "(150.0 GB -> 121.5 GB) · 300 already ckpt.gz\n"
        "left as it was, 17: checksum differs from the manifest (hsx-runner verify --repair re-extracts it)"
    )
    fake.reply("compact", {"ok": False, "refused": True, "reason": "another compact runs (pid 9)"}, code=3)
    reply = h.ask("compact", "U0OPERATOR")
    assert reply.error and reply.text == "`compact` refused: another compact runs (pid 9)"
    assert "`compact` → refused" in reply.audit


def test_summary_counts_adopted_samples_apart():
    from runner.contract.status import Phase, StatusRecord
    from runner.text.extraction import render_text

    rec = StatusRecord(phase=Phase.STOPPED, total=12, done=6, adopted=6, reason="adopted 6 samples from /d")
    text = render_text(rec)
    assert "Stopped — adopted 6 samples from /d" in text and "6 / 12 — 50.0% done · 6 adopted" in text
    assert "adopted" not in render_text(StatusRecord(phase=Phase.DONE, total=12, done=12))


def test_status_detail_adds_throughput_latency_and_what_is_in_flight(fake, cfg):
    from bot.wiring import make_handlers

    assert (
        parse("status --detail") == Command("status", detail=True) and parse("status --full").verb == "help"
    )
    fake.set_status(
        latency_p50_s=1.234, latency_p95_s=4.5, in_flight=8, oldest_in_flight_s=75.0, oldest_in_flight_idx=25590,
        last_commit_at="2030-01-01T11:42:49Z", rate_median=1.2,
    )  # fmt: skip
    text = make_handlers(cfg, fake.box()).ask("status --detail", "anyone").text
    assert text.startswith("25,581 / 37,312 — 68.6% done")
    assert "4,100 tokens/s · latency p50 1.23s · p95 4.50s" in text
    assert "8 in flight (oldest: sample 25590, 1m15s)" in text and "run median 1.20 samples/s" in text
    assert "latency" not in make_handlers(cfg, fake.box()).ask("status", "anyone").text
