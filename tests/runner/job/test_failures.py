"""Every failure carries its reason, at every phase, and preflight gates the start: what an
operator sees from chat without opening a shell on the box (real runner processes)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time

import pytest

from bot.watch import watcher
from runner.contract.status import StatusRecord
from runner.text import extraction
from tests.conftest import runner
from tests.runner.helpers import done_count, held_box, out_dir, status


def _start(conf: str, *extra) -> tuple[int, dict]:
    p = runner("start", "--json", "--config", conf, *extra)
    return p.returncode, json.loads(p.stdout)


def _alert(rec: dict) -> str:
    """The crash alert the watcher posts for this record (its pure decision, real record)."""
    now = dt.datetime.now(dt.timezone.utc)
    actions, _ = watcher.decide(watcher.WatchState(), watcher.Observation(now, record=StatusRecord.from_dict(rec)),
                                watcher.Limits())  # fmt: skip
    (alert,) = [a for a in actions if a.kind == "alert"]
    return alert.text


@pytest.mark.slow
def test_a_tokenizer_that_fails_to_load_is_reported_before_any_server(job, tmp_path):
    broken = tmp_path / "tok"
    broken.mkdir()
    (broken / "tokenizer_config.json").write_text('{"tokenizer_class": "NoSuchTokenizer"}')
    conf = job(samples=5, job__tokenizer=str(broken))
    code, rep = _start(conf)
    assert code == 3 and not rep["started"], rep
    assert "failed at once in tokenizer" in rep["reason"] and "trust_remote_code" in rep["reason"], rep
    st = status(conf)
    assert st["phase"] == "failed" and st["failed_in"] == "tokenizer" and "tokenizer" in st["reason"]
    assert any('File "' in line for line in st["log_tail"]), st["log_tail"]  # the traceback's end
    assert not os.path.exists(os.path.join(out_dir(conf), "logs", "server.log"))  # no server was started
    text = _alert(st)
    assert "FAILED in tokenizer" in text and "what to do: check [job] tokenizer" in text and "```" in text, (
        text
    )
    logs = json.loads(runner("logs", "--json", "--which", "all", "-n", "200", "--config", conf).stdout)[
        "lines"
    ]
    assert "--- runner: runner.log ---" in logs and any("Traceback" in line for line in logs), logs


@pytest.mark.slow
def test_a_dataset_json_mismatch_fails_with_the_keys_and_keeps_the_counts(job):
    conf = job(samples=4)
    runner("run", "--config", conf, check=True)
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text.replace("max_length = 256", "max_length = 128"))
    code, rep = _start(conf)
    assert code == 3 and "failed at once in dataset.json" in rep["reason"], rep
    assert "max_length: 256 -> 128" in rep["reason"] and "use a new [job] out" in rep["reason"]
    st = status(conf)
    assert st["failed_in"] == "dataset.json" and st["done"] == 4 and st["total"] == 4, st  # counts kept
    assert "max_length: 256 -> 128" in _alert(st)
    assert done_count(conf) == 4


@pytest.mark.slow
def test_preflight_gates_the_start_and_force_skips_it_saying_so(job):
    conf = job(samples=3, job__min_free_bytes=10**18)  # more than any disk has
    code, rep = _start(conf)
    assert code == 3 and not rep["started"] and "preflight refused the start: disk:" in rep["reason"], rep
    assert not os.path.exists(os.path.join(out_dir(conf), "status.json"))  # nothing ran
    code, rep = _start(conf, "--force")
    try:
        assert code == 0 and rep["started"] and rep["forced"] == ["disk"], rep
    finally:  # the forced runner waits for disk space that never comes: stop it and its server
        runner("stop", "--config", conf, check=True)


def test_a_missing_model_is_refused_by_preflight_with_the_fix(job, tmp_path):
    conf = job(samples=3, job__model=str(tmp_path / "no-model"))
    code, rep = _start(conf)
    assert code == 3 and "model:" in rep["reason"] and "fix:" in rep["reason"], rep


def test_a_failed_record_renders_step_reason_and_what_to_do():
    rec = StatusRecord.from_dict({
        "phase": "failed", "total": 10, "done": 4, "failed_in": "self_test", "reason": "dump missing",
        "hint": "the dump path is broken", "log_tail": ["a", "b```c"],
    })  # fmt: skip
    text = extraction.render_text(rec)
    assert text.splitlines()[0].startswith("FAILED in self_test") and "dump missing" in text
    assert "what to do: the dump path is broken; then `/extract resume`" in text
    assert extraction.log_block(rec) == "```\na\nb'''c\n```"


def _nvml_stub(tmp_path, gpus: list[dict]) -> str:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps({"gpus": gpus}))
    return str(path)


def test_held_gpus_refuse_the_start_even_when_nvml_shows_no_process(job, tmp_path, monkeypatch):
    """Inside a container NVML may list no PIDs: memory in use is enough to call a GPU held."""
    from runner.serve import gpus

    monkeypatch.setenv(gpus.STUB_ENV, _nvml_stub(tmp_path, [
        {"used_mib": 3, "total_mib": 81559},
        {"used_mib": 70000, "total_mib": 81559},  # held by someone NVML cannot show
        {"used_mib": 9000, "procs": [{"pid": os.getpid(), "used_mib": 9000}]},  # a visible process
    ]))  # fmt: skip
    conf = job(samples=3, server__device="cuda")
    code, rep = _start(conf)
    assert code == 3 and "preflight refused the start: gpus:" in rep["reason"], rep
    assert "GPU 1: 70,000 of 81,559 MiB in use by processes NVML does not show" in rep["reason"]
    assert f"pid {os.getpid()} " in rep["reason"] and "holds 1 GPU (2), 9,000 MiB" in rep["reason"]
    assert "GPU 0" not in rep["reason"] and "(0)" not in rep["reason"]
    monkeypatch.setenv(gpus.STUB_ENV, _nvml_stub(tmp_path, [{"used_mib": 3}, {"used_mib": 500}]))
    checks = {
        c["name"]: c for c in json.loads(runner("preflight", "--json", "--config", conf).stdout)["checks"]
    }
    assert checks["gpus"]["ok"] and checks["gpus"]["detail"] == "2 GPUs, none held", checks["gpus"]


def test_free_gpus_on_eight_gpus_says_per_unit_who_held_them_and_what_stopping_did(
    job, tmp_path, monkeypatch
):
    """The seeds' box: eight GPUs held by two units. preflight summarises per unit, and after
    --free-gpus names each unit's outcome, a refusal with systemctl's own words."""
    calls = held_box(tmp_path, monkeypatch, {"vllm.service": 6, "old-sglang.service": 2},
                     refuse={"old-sglang.service": "Failed to stop old-sglang.service: Access denied"})  # fmt: skip
    conf = job(samples=3, server__device="cuda")
    (asked,) = [c for c in json.loads(runner("preflight", "--json", "--config", conf).stdout)["checks"]
                if c["name"] == "gpus"]  # fmt: skip
    assert asked["detail"] == ("old-sglang.service holds 2 GPUs (6-7), 140,000 MiB; "
                               "vllm.service holds 6 GPUs (0-5), 420,000 MiB"), asked  # fmt: skip
    assert asked["units"] == ["old-sglang.service", "vllm.service"] and not os.path.exists(calls)
    p = runner("preflight", "--free-gpus", "--json", "--config", conf)
    (done,) = [c for c in json.loads(p.stdout)["checks"] if c["name"] == "gpus"]
    assert [(r["unit"], r["ok"]) for r in done["results"]] == [
        ("old-sglang.service", False),
        ("vllm.service", True),
    ]
    assert not done["ok"] and done["detail"].endswith(
        "; old-sglang.service: not stopped: Failed to stop old-sglang.service: Access denied"
        "; vllm.service: stopped and disabled"), done["detail"]  # fmt: skip
    assert open(calls).read().split("\n")[:3] == ["stop -- old-sglang.service", "disable -- old-sglang.service",
                                                   "stop -- vllm.service"]  # fmt: skip


def _gpus(p) -> dict:
    (gpus,) = [c for c in json.loads(p.stdout)["checks"] if c["name"] == "gpus"]
    return gpus


def test_free_gpus_bound_to_the_units_asked_about_stops_nothing_once_they_changed_or_it_expired(
    job, tmp_path, monkeypatch
):
    """What chat's confirm button runs: --units names the units the question showed, --until
    when the button expires. Expired, or the GPUs since in other hands: refused, nothing stopped."""
    calls = held_box(tmp_path, monkeypatch, {"vllm.service": 6, "old-sglang.service": 2})
    conf = job(samples=3, server__device="cuda")
    bound = ["--units=old-sglang.service,vllm.service", f"--until={int(time.time()) + 600}"]
    expired = _gpus(runner("preflight", "--free-gpus", bound[0], f"--until={int(time.time()) - 5}", "--json",
                           "--config", conf))  # fmt: skip
    assert expired["refused"].startswith("the confirmation expired at "), expired
    assert not expired["ok"] and expired["results"] == [] and not os.path.exists(calls)
    held_box(tmp_path, monkeypatch, {"vllm.service": 6, "old-sglang.service": 1, "llama-serve.service": 1})
    changed = _gpus(runner("preflight", "--free-gpus", *bound, "--json", "--config", conf))
    assert changed["refused"] == (
        "the GPUs changed hands since the question (asked about old-sglang.service, vllm.service; now "
        "llama-serve.service, old-sglang.service, vllm.service)"
    ), changed
    assert changed["results"] == [] and not os.path.exists(calls)
    held_box(tmp_path, monkeypatch, {"vllm.service": 6, "old-sglang.service": 2})
    done = _gpus(runner("preflight", "--free-gpus", *bound, "--json", "--config", conf))
    assert done["ok"] and not done.get("refused") and [r["unit"] for r in done["results"]] == [
        "old-sglang.service", "vllm.service"
    ]  # fmt: skip
    assert open(calls).read().split() == ["stop", "--", "old-sglang.service", "disable", "--", "old-sglang.service",
                                          "stop", "--", "vllm.service", "disable", "--", "vllm.service"]  # fmt: skip


def test_free_gpus_never_offers_a_user_unit_hsxs_own_unit_or_the_runners_process_group(
    job, tmp_path, monkeypatch
):
    """A user's own unit named sshd.service, hsx's hsx-runner.service, and a unit holding a
    process of the runner's own process group (this test process, the runner's parent) hold
    GPUs beside vllm.service: only vllm.service is offered and stopped; the others are shown."""
    from runner.serve import gpus

    def gpu(pid, cgroup):
        return {
            "used_mib": 70_000,
            "procs": [{"pid": pid, "used_mib": 70_000, "comm": "python3", "cgroup": cgroup}],
        }

    calls = held_box(tmp_path, monkeypatch, {})
    monkeypatch.setenv(gpus.STUB_ENV, _nvml_stub(tmp_path, [
        gpu(9000, "0::/user.slice/user-1000.slice/user@1000.service/app.slice/sshd.service\n"),
        gpu(9001, "0::/system.slice/hsx-runner.service\n"),
        gpu(os.getpid(), "0::/system.slice/ops-terminal.service\n"),
        gpu(9003, "0::/system.slice/vllm.service\n"),
    ]))  # fmt: skip
    conf = job(samples=3, server__device="cuda")
    asked = _gpus(runner("preflight", "--json", "--config", conf))
    assert asked["units"] == ["vllm.service"], asked
    assert (
        "pid 9000 python3 holds 1 GPU (0)" in asked["detail"]
        and "hsx-runner.service holds 1 GPU (1)" in asked["detail"]
    )
    assert "ops-terminal.service holds 1 GPU (2)" in asked["detail"], asked["detail"]
    done = _gpus(runner("preflight", "--free-gpus", "--json", "--config", conf))
    assert [r["unit"] for r in done["results"]] == ["vllm.service"] and not done["ok"]
    assert open(calls).read().split() == ["stop", "--", "vllm.service", "disable", "--", "vllm.service"]


def test_many_holders_are_summarised_within_slack_limits():
    """64 processes outside any unit: the text counts the rest instead of listing them."""
    holders = [
        {"unit": None, "pid": 100 + i, "name": "python3", "gpus": [i % 8], "mib": 1000} for i in range(64)
    ]
    results = [{"unit": f"u{i}.service", "ok": True, "detail": "stopped and disabled"} for i in range(8)]
    text = extraction.gpus_text(holders, results)
    assert len(text) < 1000 and "56 more holders on 8 GPUs (0-7), 56,000 MiB" in text, text
    assert text.endswith("u0.service, u1.service, u2.service, u3.service, u4.service, u5.service, u6.service, "
                         "u7.service: stopped and disabled")  # fmt: skip


def test_real_nvml_on_a_machine_without_a_gpu_fails_cleanly(monkeypatch):
    from runner.serve import gpus

    monkeypatch.delenv(gpus.STUB_ENV, raising=False)
    devices, err = gpus.survey()
    if devices:  # a machine with a GPU and a driver: a true survey
        assert all({"gpu", "used_mib", "total_mib", "procs"} <= set(d) for d in devices)
    else:
        assert err and err.startswith("NVML unavailable"), err


def test_a_set_up_step_that_fails_names_itself_in_the_record(job, tmp_path, capsys):
    """The job in this process (runner.job.run less its logging set-up): a model that is not
    there fails the 'model' step with the path and what to do, before any server."""
    import asyncio

    from runner.contract.config import load
    from runner.job.phases import Job
    from runner.job.record import claim_record
    from runner.output.lock import JobLock
    from runner.output.ranks import RunPaths

    cfg = load(job(samples=3, job__model=str(tmp_path / "no-model")))
    lock = JobLock(RunPaths(cfg.job.out).lock)
    lock.acquire()
    try:
        claim_record(RunPaths(cfg.job.out).status, cfg.job.name)
        assert asyncio.run(Job(cfg).main()) == 1
    finally:
        lock.release()
    with open(os.path.join(cfg.job.out, "status.json")) as f:
        st = StatusRecord.from_dict(json.load(f))
    assert st.phase.value == "failed" and st.failed_in == "model" and not st.alive
    assert str(tmp_path / "no-model") in st.reason
    assert st.hint == f"check [job] model: {tmp_path / 'no-model'}/config.json must be readable"
    assert "hsx-runner: failed in model:" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(cfg.job.out, "logs", "server.log"))


def test_dataset_json_pins_the_job_that_wrote_the_output(tmp_path):
    from runner.contract.errors import ConfigError
    from runner.output.store import Store

    pin = Store(str(tmp_path)).pin
    desc = {"model": "/m", "dataset": "/d.jsonl", "total": 4, "max_length": 256, "hidden_size": 64,
            "dtype": "bfloat16", "aux_layer_ids": [1, 3, 4]}  # fmt: skip
    pin(desc)
    pin({**desc, "name": "renamed"})  # not pinned: accepted
    with pytest.raises(ConfigError) as e:
        pin({**desc, "max_length": 128, "dtype": "float32"})
    assert "max_length: 256 -> 128; dtype: 'bfloat16' -> 'float32'" in str(e.value)
    assert str(e.value).endswith("use a new [job] out")


def test_preflight_gates_on_its_failed_checks_and_force_clears_the_gate(job):
    """preflight in this process: every check named, the disk one failing, and only it gating."""
    from runner.contract.config import load
    from runner.job.preflight import gate, preflight

    report = preflight(load(job(samples=3, job__min_free_bytes=10**18)))  # more than any disk has
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == ["dataset", "model", "remote code", "disk", "lock", "gpus", "autostart"]
    assert not report["ok"] and [c["name"] for c in report["checks"] if not c["ok"]] == ["disk"]
    assert checks["dataset"]["detail"].endswith("3 rows") and "H=64" in checks["model"]["detail"]
    assert checks["disk"]["fix"] == "free space or point [job] out at a bigger disk"
    assert gate(report, force=False) == [checks["disk"]] and gate(report, force=True) == []
