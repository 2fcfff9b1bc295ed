"""Server lifecycle against real child processes that misbehave, preflight, and the SGLang CPU
lane's server settings."""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest

from tests.conftest import ROOT, runner
from tests.runner.helpers import done_count, out_dir, status


def fake(tmp_path, mode: str) -> str:
    """A 'python' for [server] that runs the fake server in the given mode."""
    path = tmp_path / f"fake-{mode}"
    path.write_text(
        f'#!/bin/sh\nexec {sys.executable} {os.path.join(ROOT, "tests", "runner", "fake_server.py")} {mode} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


@pytest.mark.slow
def test_server_never_ready_times_out_with_what_it_was_doing(job, tmp_path):
    conf = job(samples=5, server__python=fake(tmp_path, "never_ready"), server__start_timeout_s=3.0)
    assert runner("run", "--config", conf).returncode == 1
    st = status(conf)
    assert (
        st["phase"] == "failed"
        and "not ready after 3s" in st["reason"]
        and "Load weight begin" in st["reason"]
    )
    assert done_count(conf) == 0


@pytest.mark.slow
def test_server_dying_while_starting_is_restarted(job, tmp_path):
    conf = job(samples=6, server__python=fake(tmp_path, "dies_first_start"))
    assert runner("run", "--config", conf).returncode == 0
    st = status(conf)
    assert st["phase"] == "done" and st["server"]["restarts"] == 1 and done_count(conf) == 6


@pytest.mark.slow
def test_wrong_self_test_output_stops_before_any_sample(job, tmp_path):
    conf = job(samples=5, server__python=fake(tmp_path, "bad_dump"))
    assert runner("run", "--config", conf).returncode == 1
    st = status(conf)
    assert st["phase"] == "failed" and st["reason"].startswith("self-test failed")
    assert "want (1," in st["reason"]
    assert done_count(conf) == 0 and not any(d.startswith("rows_") for d in os.listdir(out_dir(conf)))


@pytest.mark.slow
def test_server_dying_in_self_test_fails_the_job(job, tmp_path):
    conf = job(samples=5, server__python=fake(tmp_path, "die_on_request"))
    assert runner("run", "--config", conf).returncode == 1
    st = status(conf)
    assert st["phase"] == "failed" and "self-test failed" in st["reason"]
    assert done_count(conf) == 0


@pytest.mark.slow
def test_restarts_stop_at_the_cap(job, tmp_path):
    conf = job(samples=30, server__python=fake(tmp_path, "good_once"), server__max_restarts=2)
    assert runner("run", "--config", conf).returncode == 1
    st = status(conf)
    assert st["phase"] == "failed" and "restart cap (2) is spent" in st["reason"], st["reason"]
    assert st["server"]["restarts"] == 2
    assert done_count(conf) == 2  # one sample per restarted server, nothing burnt into failed.jsonl
    assert not os.path.exists(os.path.join(out_dir(conf), "failed.jsonl"))


def test_preflight_reports_each_check(job):
    conf = job(samples=5)
    p = runner("preflight", "--json", "--config", conf)
    rep = json.loads(p.stdout)
    names = {c["name"]: c for c in rep["checks"]}
    assert p.returncode == 0 and rep["ok"]
    assert names["dataset"]["detail"].endswith("5 rows") and "H=64" in names["model"]["detail"]
    assert names["gpus"]["ok"]  # CPU reference backend: no GPU needed
    assert names["autostart"]["ok"] and names["autostart"]["detail"].startswith("autostart off")


def test_preflight_flags_autostart_it_cannot_honour(job):
    conf = job(samples=5)
    with open(conf, "a") as f:
        f.write("[deploy]\nautostart = true\n")
    rep = json.loads(runner("preflight", "--json", "--config", conf).stdout)
    names = {c["name"]: c for c in rep["checks"]}
    if os.path.isdir("/run/systemd/system"):  # a box with systemd: the unit is not installed here
        assert not names["autostart"]["ok"] and "hsx deploy" in names["autostart"]["fix"]
    else:
        assert not names["autostart"]["ok"] and "needs systemd" in names["autostart"]["fix"]


def test_preflight_refuses_sglang_without_it(job):
    conf = job(samples=5, server__backend="sglang")
    p = runner("preflight", "--json", "--config", conf)
    rep = json.loads(p.stdout)
    names = {c["name"]: c for c in rep["checks"]}
    assert p.returncode == 1 and not rep["ok"]
    assert not names["sglang patch"]["ok"] and "0.5.23" in names["sglang patch"]["fix"]


def test_unit_of_finds_the_service_owning_a_process():
    from runner.serve.gpus import unit_of

    assert unit_of("0::/system.slice/vllm.service\n") == "vllm.service"
    v1 = "12:pids:/system.slice/vllm-kimi.service/worker\n1:name=systemd:/system.slice/vllm-kimi.service/worker\n"
    assert unit_of(v1) == "vllm-kimi.service"  # systemd's own tree (name=systemd), not a controller's
    assert unit_of("0::/user.slice/user-0.slice/session-3.scope\n") is None
    assert unit_of("0::/user.slice/user-0.slice/user@0.service/app.slice\n") is None


def test_a_model_with_its_own_code_is_refused_until_trusted(job, demo_assets, tmp_path):
    import shutil

    from runner.contract.config import load
    from runner.serve.server import build_argv

    model = tmp_path / "remote-model"
    shutil.copytree(demo_assets / "model", model)
    with open(model / "tokenizer_config.json") as f:
        tc = json.load(f)
    tc["auto_map"] = {"AutoTokenizer": ["tokenization_x.XTokenizer", None]}  # as Kimi-K2.5 ships
    with open(model / "tokenizer_config.json", "w") as f:
        json.dump(tc, f)
    conf = job(samples=4, job__model=str(model))
    p = runner("run", "--config", conf)
    assert p.returncode == 2 and "[job] trust_remote_code = true" in p.stderr
    assert "tokenizer_config.json load code of their own" in p.stderr
    p = runner("start", "--json", "--config", conf)
    rep = json.loads(p.stdout)
    assert p.returncode == 3 and not rep["started"] and "[job] trust_remote_code" in rep["reason"]
    checks = {
        c["name"]: c for c in json.loads(runner("preflight", "--json", "--config", conf).stdout)["checks"]
    }
    assert not checks["remote code"]["ok"] and "trust_remote_code" in checks["remote code"]["fix"]
    assert done_count(conf) == 0 and not os.path.exists(os.path.join(out_dir(conf), "dataset.json"))

    trusted = load(job(samples=4, job__model=str(model), job__trust_remote_code=True))
    assert "--trust-remote-code" in build_argv(trusted, [1, 3, 4])  # reference backend
    trusted.server.backend = "sglang"
    assert "--trust-remote-code" in build_argv(trusted, [1, 3, 4])
    checks = {
        c["name"]: c
        for c in json.loads(runner("preflight", "--json", "--config", trusted.path).stdout)["checks"]
    }
    assert checks["remote code"]["ok"] and "(trusted)" in checks["remote code"]["detail"]


def test_the_sglang_cpu_lane_is_found_only_once_built_and_keyed_on_its_pins(tmp_path):
    from runner import sglang_cpu

    assert sglang_cpu.checkout_root() == ROOT  # the tests run from the checkout
    d = sglang_cpu.venv_dir(str(tmp_path))
    assert os.path.dirname(d) == str(tmp_path) and os.path.basename(d).startswith("sglang-cpu-")
    assert sglang_cpu.python_of(str(tmp_path)) is None
    os.makedirs(os.path.join(d, "bin"))
    open(os.path.join(d, "bin", "python"), "w").close()
    assert sglang_cpu.python_of(str(tmp_path)) is None  # half-built: no marker yet
    open(os.path.join(d, sglang_cpu.MARKER), "w").close()
    assert sglang_cpu.python_of(str(tmp_path)) == os.path.join(d, "bin", "python")
    s = sglang_cpu.server_section("deepseek_v3", "/venv/bin/python", "/kernels")
    assert s["backend"] == "sglang" and s["python"] == "/venv/bin/python"
    assert s["extra_args"][: len(sglang_cpu.ARGS)] == sglang_cpu.ARGS
    assert s["extra_args"][-4:] == [
        "--prefill-attention-backend", "intel_amx", "--decode-attention-backend", "torch_native",
    ]  # fmt: skip
    assert s["env"] == {**sglang_cpu.ENV, "PYTHONPATH": "/kernels"} and s["tp_size"] == 1


def test_tp_on_the_cpu_engine_binds_each_rank_and_keeps_nccl_out():
    from runner import sglang_cpu

    assert sglang_cpu.tp_env(1) == {}
    env = sglang_cpu.tp_env(2, cpus=2)
    assert env["SGLANG_CPU_OMP_THREADS_BIND"] == "0|1" and env["OMP_NUM_THREADS"] == "1"
    assert not os.path.exists(env["SGLANG_NCCL_SO_PATH"])  # the load fails: gloo instead
    assert sglang_cpu.tp_env(2, cpus=16)["SGLANG_CPU_OMP_THREADS_BIND"] == "0-7|8-15"
    assert sglang_cpu.tp_env(4, cpus=2)["SGLANG_CPU_OMP_THREADS_BIND"] == "0|1|0|1"
    s = sglang_cpu.server_section("kimi_k25", "/py", "/kernels", tp=2)
    assert s["tp_size"] == 2 and "--disable-custom-all-reduce" in s["extra_args"]
    assert s["env"]["SGLANG_CPU_OMP_THREADS_BIND"] == sglang_cpu.tp_env(2)["SGLANG_CPU_OMP_THREADS_BIND"]


def test_a_multimodal_wrapper_is_served_text_only(tmp_path):
    """Kimi-K2.5's wrapper (text_config + vision_config) gets SGLang's language_model_only
    override; an operator's own override is kept beside it; plain models are left alone."""
    from runner.contract.launch import ArgsError
    from runner.serve.server import OVERRIDE_FLAG, text_only

    (tmp_path / "config.json").write_text(json.dumps({"text_config": {}, "vision_config": {}}))
    got = text_only(str(tmp_path), ["--device", "cpu"])
    assert got[:2] == ["--device", "cpu"] and got[2] == OVERRIDE_FLAG
    assert json.loads(got[3]) == {"language_model_only": True}
    mine = text_only(str(tmp_path), [OVERRIDE_FLAG, '{"rope_theta": 1.0}', "--device", "cpu"])
    assert mine[:2] == ["--device", "cpu"] and json.loads(mine[3]) == {
        "rope_theta": 1.0,
        "language_model_only": True,
    }
    off = text_only(str(tmp_path), [f'{OVERRIDE_FLAG}={{"language_model_only": false}}'])
    assert json.loads(off[1]) == {"language_model_only": False}  # the operator's word wins
    with pytest.raises(ArgsError, match="not JSON"):
        text_only(str(tmp_path), [OVERRIDE_FLAG, "{oops"])
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert text_only(str(tmp_path), ["--device", "cpu"]) == ["--device", "cpu"]


@pytest.mark.slow
def test_a_port_taken_after_the_check_ends_the_start_at_once_not_at_its_timeout(job, tmp_path):
    """The port was free when hsx looked, and taken (a busy box's outgoing connection) by the time
    the server bound it: SGLang's uvicorn says so and hangs instead of exiting. The start ends at
    that line, the server is ended, and each try is a restart, counted, the port named."""
    conf = job(samples=5, server__python=fake(tmp_path, "bind_taken"), server__start_timeout_s=600.0,
               server__max_restarts=1)  # fmt: skip
    assert runner("run", "--config", conf, timeout=120).returncode == 1
    st = status(conf)
    port = st["server"]["url"].rsplit(":", 1)[1]
    assert st["phase"] == "failed" and st["server"]["restarts"] == 1, st
    assert "restart cap 1 spent" in st["reason"] and "not ready after" not in st["reason"], st["reason"]
    assert (
        f"could not listen on 127.0.0.1:{port}: address already in use ([server] port {port}" in st["reason"]
    )
    assert done_count(conf) == 0


@pytest.mark.slow
def test_a_port_another_process_listens_on_fails_the_start_at_once_saying_so(job):
    """Not a server started into a bind error and restarted to the cap: a copied demo, a second
    job or a stray server on [server] port is named before anything is launched."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        conf = job(samples=5, server__port=port)
        assert runner("run", "--config", conf).returncode == 1
    st = status(conf)
    assert st["phase"] == "failed" and st["server"]["restarts"] == 0, st
    assert f"[server] port {port} on 127.0.0.1 is in use by another process" in st["reason"], st["reason"]
    assert done_count(conf) == 0
