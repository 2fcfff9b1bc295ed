"""The launcher's command line: what server_argv builds, and what the launcher refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patches import sglang_dump as sd
from runner.contract import dump, launch
from tests.patches import fake_sglang

BASE = dict(python="/venv/bin/python", model="/m", host="127.0.0.1", port=30001, tp_size=8, dp_size=1,
            mem_fraction=0.85, aux_layer_ids=[], extra_args=[])  # fmt: skip


def test_server_argv_has_the_required_flags():
    argv = launch.server_argv(
        **{**BASE, "aux_layer_ids": [1, 13, 24], "extra_args": ["--chunked-prefill-size", "8192"]}
    )
    assert argv[:3] == ["/venv/bin/python", "-m", "patches.sglang_dump"]
    flags = launch.parse_flags(argv[3:])
    assert (
        flags["--model-path"] == [["/m"]] and flags["--port"] == [["30001"]] and flags["--tp-size"] == [["8"]]
    )
    assert flags["--speculative-algorithm"] == [["EAGLE3"]]
    assert flags["--enable-return-aux-hidden-states"] == [[]] and flags["--disable-radix-cache"] == [[]]
    assert flags["--return-aux-hidden-state-layer-ids"] == [["1", "13", "24"]]
    assert flags["--chunked-prefill-size"] == [["8192"]]
    assert "--return-aux-hidden-state-layer-ids" not in launch.server_argv(**BASE)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pp-size", "2"], "--pp-size must be 1"),
        (["--pipeline-parallel-size=2"], "--pp-size must be 1"),
        (["--return-hidden-states-mode", "last"], "--return-hidden-states-mode must be full"),
        (["--enable-dp-attention"], "--enable-dp-attention is not supported"),
        (["--disable-radix-cache"], "extra_args must not set --disable-radix-cache"),
        (["--tensor-parallel-size", "4"], "extra_args must not set --tp-size"),
        (["--speculative-draft-model", "/d"], "--speculative-draft-model-path must not be set"),
        (["--config", "x.yaml"], "--config is not supported"),
        (["--chunked-prefill-size", "big"], "--chunked-prefill-size needs an integer"),
        (["--skip-server-warmup", "stray", "words"], "takes at most one value"),
        (
            ["--enable-two-batch-overlap"],
            "--enable-two-batch-overlap is not supported: DeepSeek-V3's two-batch",
        ),
        (["--moe-a2a-backend", "deepep"], "--moe-a2a-backend must be none, got"),
        (["--enable-attn-tp-input-scattered"], "--enable-attn-tp-input-scattered is not supported"),
        (["--attention-context-parallel-size", "2"], "--attn-cp-size must be 1"),
        (["--enable-prefill-cp"], "--enable-prefill-cp is not supported"),
        (["--dcp-size=2"], "--dcp-size must be 1"),
    ],
)
def test_contradicting_extra_args_are_refused(extra, message):
    with pytest.raises(launch.ArgsError, match=message.replace("-", r"\-")):
        launch.server_argv(**{**BASE, "extra_args": extra})


def test_check_argv_lists_every_missing_flag():
    with pytest.raises(launch.ArgsError) as e:
        launch.check_argv(["--model-path", "/m", "--speculative-algorithm", "EAGLE"])
    text = str(e.value)
    for need in ("--enable-return-aux-hidden-states is required", "--speculative-algorithm EAGLE3 is required",
                 "--disable-radix-cache is required"):  # fmt: skip
        assert need in text


def test_layer_ids_from_env_must_agree():
    good = launch.server_argv(**{**BASE, "aux_layer_ids": [2, 5, 9]})[3:]
    launch.check_argv(good, [9, 5, 2])
    with pytest.raises(launch.ArgsError, match="contradicts HSX_AUX_LAYER_IDS"):
        launch.check_argv(good, [2, 5, 8])
    with pytest.raises(launch.ArgsError, match="is set but --return-aux-hidden-state-layer-ids is not"):
        launch.check_argv(launch.server_argv(**BASE)[3:], [2, 5, 8])
    assert launch.parse_layer_ids("1, 13,24") == [1, 13, 24] and launch.parse_layer_ids("") == []
    with pytest.raises(launch.ArgsError, match="three distinct"):
        launch.parse_layer_ids("1,1,2")
    with pytest.raises(launch.ArgsError, match="three distinct"):
        launch.server_argv(**{**BASE, "aux_layer_ids": [1, 2]})


def test_resolved_values_are_checked():
    from types import SimpleNamespace

    ok = dict(aux_hidden_state_capture="eagle3", return_hidden_states_mode="full", disable_radix_cache=True,
              pp_size=1, speculative_algorithm=None, attn_dp_size=1)  # fmt: skip
    sd.check_resolved(SimpleNamespace(**ok))
    with pytest.raises(launch.ArgsError, match="return_hidden_states_mode resolved to 'last'"):
        sd.check_resolved(SimpleNamespace(**{**ok, "return_hidden_states_mode": "last"}))
    for field, bad in (
        ("enable_two_batch_overlap", True),
        ("moe_a2a_backend", "deepep"),
        ("attn_cp_size", 2),
    ):
        with pytest.raises(launch.ArgsError, match=f"{field} resolved to {bad!r}"):
            sd.check_resolved(SimpleNamespace(**{**ok, field: bad}))


def test_the_untested_layouts_at_their_harmless_values_pass():
    extra = ["--moe-a2a-backend", "none", "--attn-cp-size", "1"]
    launch.server_argv(**{**BASE, "extra_args": extra})


def _launch(args, env_extra, tmp_path, pythonpath):
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": pythonpath,
        dump.DUMP_DIR_ENV: str(tmp_path / "dumps"),
        **env_extra,
    }
    return subprocess.run([sys.executable, "-m", "patches.sglang_dump", *args], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_launcher_refuses_wrong_version_before_starting(tmp_path):
    import os

    root = fake_sglang.write_tree(str(tmp_path / "fake"), version="0.5.22")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    good = launch.server_argv(**BASE)[3:]
    p = _launch(good, {}, tmp_path, f"{root}:{repo}")
    assert p.returncode == 2
    assert "written for SGLang 0.5.23" in p.stderr and "SGLang version is '0.5.22'" in p.stderr
    p = _launch(["--model-path", "/m"], {}, tmp_path, f"{root}:{repo}")
    assert p.returncode == 2 and "--disable-radix-cache is required" in p.stderr
    p = _launch(good, {dump.DUMP_LAYERS_ENV: "1,2"}, tmp_path, f"{root}:{repo}")
    assert p.returncode == 2 and "three distinct" in p.stderr


def test_trust_remote_code_is_the_config_s_to_set():
    argv = launch.server_argv(**{**BASE, "trust_remote_code": True})
    assert argv.count("--trust-remote-code") == 1
    assert "--trust-remote-code" not in launch.server_argv(**BASE)
    with pytest.raises(launch.ArgsError, match="extra_args must not set --trust-remote-code"):
        launch.server_argv(**{**BASE, "extra_args": ["--trust-remote-code"]})
