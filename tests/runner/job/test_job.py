"""The runner as a real process on a real tiny model: run, resume, lock, stop, faults."""

from __future__ import annotations

import json
import os
import signal

import pytest

from runner.contract.replies import BROKEN
from runner.data.demo_assets import PACE_ENV
from tests.conftest import runner
from tests.runner.helpers import (
    assert_same_tensors,
    done_count,
    kill_group,
    out_dir,
    server_pid,
    start_run,
    status,
    tensors,
    unrecorded_ckpts,
    verify,
    wait_for,
)


@pytest.mark.slow
def test_run_extracts_every_sample_and_verifies(job):
    conf = job(samples=30)
    p = runner("run", "--config", conf, check=True)
    assert p.returncode == 0
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == 30 and st["total"] == 30 and not st["alive"]
    assert st["done_this_run"] == 30 and st["errors_this_run"] == 0
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 30 and rep["complete"]
    out = out_dir(conf)
    with open(os.path.join(out, "dataset.json")) as f:
        desc = json.load(f)
    assert desc["aux_layer_ids"] == [1, 3, 4] and desc["hidden_size"] == 64 and desc["checksum"] == "xxh3_64"
    t = tensors(conf)[0]
    seq = t["input_ids"].shape[0]
    assert t["hidden_state"].shape == (1, seq, 64) and t["aux_hidden_state"].shape == (1, seq, 192)
    assert os.listdir(os.path.join(out, ".tmp")) == []  # no temp files left
    for name in ("status.json", "dataset.json"):  # hsx's own records: owner-only, no temp beside them
        assert os.stat(os.path.join(out, name)).st_mode & 0o777 == 0o600
    assert not [n for n in os.listdir(out) if n.endswith(".tmp") and n != ".tmp"]
    with open(os.path.join(out, "manifest.jsonl")) as f:  # the server process that wrote each
        assert {json.loads(line)["writer"].split(" pid ")[0] for line in f} == {"reference"}
    # rerun: nothing to do, still done, nothing rewritten
    runner("run", "--config", conf, check=True)
    assert done_count(conf) == 30 and status(conf)["done_this_run"] == 0


@pytest.mark.slow
def test_tensors_match_a_plain_transformers_forward(job):
    """The dump equals what transformers gives for the same tokens (aux = hidden_states[id+1])."""
    import torch
    from transformers import AutoModelForCausalLM

    conf = job(samples=3)
    runner("run", "--config", conf, check=True)
    with open(os.path.join(out_dir(conf), "dataset.json")) as f:
        desc = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(desc["model"], dtype=torch.bfloat16)
    torch.set_num_threads(1)
    for i, t in tensors(conf).items():
        with torch.inference_mode():
            out = model(t["input_ids"][None], output_hidden_states=True)
        hs = out.hidden_states
        want_aux = torch.cat([hs[k + 1] for k in desc["aux_layer_ids"]], dim=-1)
        assert torch.allclose(t["aux_hidden_state"].float(), want_aux.float(), atol=1e-2), i
        assert torch.allclose(t["hidden_state"].float(), hs[-1].float(), atol=1e-2), i


@pytest.mark.slow
def test_second_runner_refuses_and_names_the_pid(job):
    conf = job(samples=60, server__start_timeout_s=60.0)
    p = start_run(conf)
    try:
        wait_for(lambda: os.path.exists(os.path.join(out_dir(conf), "status.json")), what="status.json")
        second = runner("run", "--config", conf)
        assert second.returncode == 3
        assert f"pid {p.pid}" in second.stderr
        again = runner("start", "--json", "--config", conf)
        assert again.returncode == 3 and json.loads(again.stdout)["pid"] == p.pid
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_resume_finishes(job):
    conf = job(samples=80)
    p = start_run(conf)
    wait_for(lambda: done_count(conf) >= 10, what="10 samples")
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    st = status(conf)
    assert st["phase"] == "stopped" and not st["alive"]
    assert server_pid(conf) is None  # the server went with it
    assert os.listdir(os.path.join(out_dir(conf), ".tmp")) == []  # in-flight samples were drained
    code, rep = verify(conf)
    assert code == 1 and rep["corrupt"] == [] and len(rep["missing"]) == 80 - rep["ok"]
    runner("run", "--config", conf, check=True)
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 80


@pytest.mark.slow
def test_a_stop_whose_server_dies_mid_drain_still_ends_stopped_and_resume_finishes(job):
    """SIGTERM, then the server killed while its answers are drained (the OOM killer, a stop that
    reached it too): no server is started again once asked to stop, so the drain ends with what
    answered instead of waiting on a server that will not come (the runner never ended before)."""
    conf = job(samples=40)
    p = start_run(conf, **{PACE_ENV: "1.5"})  # each answer 1.5 s: four always in flight
    wait_for(lambda: done_count(conf) >= 4 and server_pid(conf), what="4 samples")
    spid = server_pid(conf)
    p.send_signal(signal.SIGTERM)
    os.kill(spid, signal.SIGKILL)
    assert p.wait(60) == 0, p.stderr.read()[-2000:]
    st = status(conf)
    assert st["phase"] == "stopped" and not st["alive"] and st["failed"] == 0, st
    code, rep = verify(conf)
    assert rep["corrupt"] == [] and len(rep["missing"]) == 40 - rep["ok"]
    runner("run", "--config", conf, check=True)
    assert verify(conf)[1]["ok"] == 40


@pytest.mark.slow
def test_status_reports_crash_when_runner_is_killed(job):
    conf = job(samples=200)
    p = start_run(conf)
    wait_for(lambda: done_count(conf) >= 5, what="5 samples")
    spid = server_pid(conf)
    kill_group(p.pid)
    p.wait(10)
    st = status(conf)
    assert st["phase"] == "crashed" and not st["alive"] and str(p.pid) in st["reason"]
    # the server died with its runner (parent-death signal), not left holding the port
    wait_for(lambda: not os.path.exists(f"/proc/{spid}") or open(f"/proc/{spid}/stat").read().split()[2] == "Z",
             timeout=10, what="server exit")  # fmt: skip


@pytest.mark.slow
def test_server_killed_mid_run_is_restarted_and_nothing_is_lost(job):
    conf = job(samples=120)
    p = start_run(conf)
    wait_for(lambda: done_count(conf) >= 10, what="10 samples")
    first = server_pid(conf)
    kill_group(first)
    assert p.wait(180) == 0, p.stderr.read()
    st = status(conf)
    assert st["phase"] == "done" and st["server"]["restarts"] == 1
    assert server_pid(conf) is None
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 120


@pytest.mark.slow
def test_malformed_rows_fail_with_reasons_and_never_stop_the_job(job, demo_assets):
    with open(os.path.join(demo_assets, "data.jsonl")) as f:
        good = f.readlines()[:6]
    bad = [
        "{not json\n",
        "\n",
        '{"conversations": []}\n',
        '{"input_ids": [1, 2, "x"]}\n',
        '{"input_ids": [1, 99999999]}\n',
        '{"conversations": [{"role": "wizard", "content": "hi"}]}\n',
        '{"input_ids": [5, 6, 7], "loss_mask": [0, 1]}\n',
        "[1, 2, 3]\n",
    ]
    rows = good[:3] + bad + good[3:] + ['{"input_ids": [5, 6, 7, 8], "loss_mask": [0, 1, 1, 0]}\n']
    conf = job(samples=None, rows=rows)
    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == 7 and st["failed"] == len(bad)
    with open(os.path.join(out_dir(conf), "failed.jsonl")) as f:
        failed = [json.loads(x) for x in f]
    assert sorted(r["idx"] for r in failed) == list(range(3, 3 + len(bad)))
    assert all(r["reason"].startswith("bad row:") for r in failed)
    code, rep = verify(conf)
    assert code == 1 and rep["failed"] == list(range(3, 3 + len(bad))) and rep["ok"] == 7
    assert "bad JSON" in rep["failed_reasons"]["3"]


@pytest.mark.slow
def test_truncation_is_counted(job):
    conf = job(samples=20, job__max_length=40)
    runner("run", "--config", conf, check=True)
    st = status(conf)
    assert st["truncated"] > 0
    assert all(t["input_ids"].shape[0] <= 40 for t in tensors(conf).values())


@pytest.mark.slow
def test_corrupt_ckpt_is_found_and_repaired(job):
    conf = job(samples=12)
    runner("run", "--config", conf, check=True)
    before = tensors(conf)
    from runner.output.store import sample_path

    victim = sample_path(out_dir(conf), 5)
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) // 2)
        f.write(b"\x00garbage\x00" * 10)
    code, rep = verify(conf)
    assert code == 1 and rep["corrupt"] == [5] and "checksum" in rep["reasons"]["5"]
    code, rep = verify(conf, "--repair")
    assert rep["repaired"] == [5]
    assert os.listdir(os.path.join(out_dir(conf), ".quarantine"))  # moved aside, not deleted
    runner("run", "--config", conf, check=True)
    code, rep = verify(conf)
    assert code == 0
    assert_same_tensors(before, tensors(conf))


@pytest.mark.slow
def test_corrupt_status_record_gets_a_clear_error(job):
    conf = job(samples=5)
    runner("run", "--config", conf, check=True)
    with open(os.path.join(out_dir(conf), "status.json"), "w") as f:
        f.write('{"phase": "extrac')
    p = runner("status", "--json", "--config", conf)
    assert p.returncode == BROKEN and "not valid JSON" in p.stderr and "next start or resume" in p.stderr
    # the run itself rewrites it; nothing else was lost
    runner("run", "--config", conf, check=True)
    assert status(conf)["phase"] == "done" and done_count(conf) == 5


def test_status_before_any_run(job):
    conf = job(samples=5)
    st = status(conf)
    assert st["phase"] == "stopped" and st["reason"] == "not started yet"


@pytest.mark.slow
def test_server_that_never_starts_fails_the_job_with_the_reason(job):
    conf = job(samples=5, server__python="/bin/false")
    p = runner("run", "--config", conf)
    assert p.returncode == 1
    st = status(conf)
    assert st["phase"] == "failed" and "exited with code 1 during start-up" in st["reason"]
    assert "restart cap 3 spent" in st["reason"] and st["server"]["restarts"] == 3
    assert done_count(conf) == 0


@pytest.mark.parametrize("text, needle", [
    ("[job]\nconcurrency = 'many'\n", "should be int"),
    ("[job]\nconcurency = 4\n", "unknown key 'concurency'"),
    ("[jobs]\n", "unknown section [jobs]"),
    ("[job\n", "not valid TOML"),
    ("[server]\nbackend = 'vllm'\n", "backend must be"),
    ("[server]\nenv = { SGLANG_USE_CPU_ENGINE = 1 }\n", "[server] env should be a table of strings"),
])  # fmt: skip
def test_malformed_config_is_refused_clearly(tmp_path, text, needle):
    conf = tmp_path / "hsx.toml"
    conf.write_text(text)
    p = runner("status", "--config", str(conf))
    assert p.returncode == 2 and needle in p.stderr


@pytest.mark.slow
def test_start_twice_at_once_starts_exactly_one_runner(job):
    import concurrent.futures

    conf = job(samples=60)
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda _: runner("start", "--json", "--config", conf), range(2)))
    replies = [json.loads(r.stdout) for r in results]
    assert sorted(r["started"] for r in replies) == [False, True], replies
    wait_for(lambda: status(conf)["phase"] in ("done", "failed"), timeout=120, every=0.3, what="job end")
    assert status(conf)["phase"] == "done"
    wait_for(lambda: not status(conf)["alive"], timeout=30, what="the runner to exit")


@pytest.mark.slow
def test_deleted_sample_in_a_complete_shard_is_repaired(job):
    conf = job(samples=8)
    runner("run", "--config", conf, check=True)
    from runner.output.store import sample_path

    os.unlink(sample_path(out_dir(conf), 3))
    code, rep = verify(conf)
    assert code == 1 and rep["missing"] == [3]
    runner("run", "--config", conf, check=True)  # the shard is marked complete: not planned yet
    assert verify(conf)[1]["missing"] == [3]
    code, rep = verify(conf, "--repair")
    assert rep["repaired"] == [3]
    runner("run", "--config", conf, check=True)
    assert verify(conf)[0] == 0


@pytest.mark.slow
def test_file_committed_without_its_manifest_line_is_not_corrupt(job):
    """A sound file with no manifest line (hsx before commits recorded the line first could be
    killed between the rename and the line: crash torture, seed 9789): verify says so, and a
    run or --repair adopts it."""
    conf = job(samples=12)
    runner("run", "--config", conf, check=True)
    before = tensors(conf)
    out = out_dir(conf)
    from runner.output.store import COMPLETE_DIR, sample_path

    manifest = os.path.join(out, "manifest.jsonl")
    with open(manifest) as f:
        lines = [x for x in f if json.loads(x)["idx"] not in (5, 7)]
    with open(manifest, "w") as f:
        f.writelines(lines)
    for name in os.listdir(os.path.join(out, COMPLETE_DIR)):  # the crash came before the marker
        os.unlink(os.path.join(out, COMPLETE_DIR, name))
    torn = sample_path(out, 7)
    os.truncate(torn, os.path.getsize(torn) // 2)  # an orphan that is unsound
    code, rep = verify(conf, "--quick")
    assert code == 1 and rep["unrecorded"] == [5] and rep["corrupt"] == [7], rep
    assert rep["ok"] == 10 and not rep["complete"]
    code, rep = verify(conf, "--repair")
    assert sorted(rep["repaired"]) == [5, 7]
    assert unrecorded_ckpts(out) == []  # 5 recorded, 7 quarantined under a name SpecForge skips
    code, rep = verify(conf)
    assert rep["ok"] == 11 and rep["missing"] == [7] and rep["unrecorded"] == []
    runner("run", "--config", conf, check=True)
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 12
    assert_same_tensors(before, tensors(conf))


@pytest.mark.slow
def test_after_repair_and_rerun_specforge_sees_only_committed_samples(job):
    """SpecForge trains on every *.ckpt under the output, hidden folders included."""
    conf = job(samples=10)
    runner("run", "--config", conf, check=True)
    out = out_dir(conf)
    from runner.output.store import sample_path

    path = sample_path(out, 3)
    with open(path, "r+b") as f:  # flip bytes inside the tensor data
        f.seek(os.path.getsize(path) // 2)
        b = f.read(8)
        f.seek(-8, os.SEEK_CUR)
        f.write(bytes(x ^ 0xFF for x in b))
    code, rep = verify(conf, "--repair")
    assert code == 1 and rep["corrupt"] == [3] and rep["repaired"] == [3]
    assert unrecorded_ckpts(out) == []
    quarantined = os.listdir(os.path.join(out, ".quarantine"))
    assert quarantined == ["rows_0-2000_data_3.ckpt.bad"], quarantined
    runner("run", "--config", conf, check=True)
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 10 and unrecorded_ckpts(out) == []


@pytest.mark.slow
def test_pretokenized_rows_need_no_tokenizer(job, tmp_path):
    """The vocabulary check uses the model's vocab_size; the tokenizer is never loaded."""
    rows = [
        json.dumps({"input_ids": [5 + i, 6, 7, 8 + i], "loss_mask": [0, 1, 1, 1]}) + "\n" for i in range(6)
    ]
    rows.append(json.dumps({"input_ids": [1, 10**6], "loss_mask": [0, 1]}) + "\n")  # outside the vocabulary
    conf = job(rows=rows, job__tokenizer=str(tmp_path / "no-tokenizer-here"))
    runner("run", "--config", conf, check=True)
    assert done_count(conf) == 6
    code, rep = verify(conf)
    assert rep["ok"] == 6 and rep["failed"] == [6] and rep["corrupt"] == rep["missing"] == [], rep
    assert "outside the vocabulary" in json.dumps(rep["failed_reasons"]), rep["failed_reasons"]


def _env_names(pid: int) -> list[str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return [e.split(b"=", 1)[0].decode() for e in f.read().split(b"\0") if e]


@pytest.mark.slow
def test_no_process_the_runner_starts_is_given_a_slack_secret(job, monkeypatch):
    """hsx-runner started with the bot's tokens in its environment (the local transport of an
    older hsx, a shell that has them): the detached runner and its server have none."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-secret")
    conf = job(samples=300)
    rep = json.loads(runner("start", "--json", "--config", conf, check=True).stdout)
    try:
        spid = wait_for(lambda: server_pid(conf), timeout=120, what="the server")
        for pid in (rep["pid"], spid):
            names = _env_names(pid)
            assert "PATH" in names and [n for n in names if n.startswith("SLACK_")] == [], (pid, names)
    finally:
        runner("stop", "--json", "--config", conf)
        wait_for(lambda: not status(conf)["alive"], timeout=60, what="the runner to exit")
