"""`hsx demo` as a new user runs it: headless, with the console, interrupted and rerun."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from runner.contract.status import parse_iso
from runner.output.lock import is_held_at
from tests.conftest import BIN, runner, specforge_train_python
from tests.runner.helpers import (
    assert_same_tensors,
    discovered,
    done_count,
    status,
    tensors,
    train_status,
    verify,
    wait_for,
)

pytestmark = pytest.mark.slow  # `hsx demo` runs real runner processes (torch)

HSX = os.path.join(BIN, "hsx")
INTERRUPTED = 80
PACED_MAX = 6.0  # samples/s: the console's pace (4 in flight, 1 s each) allows 4, bursts a little more


def demo(workdir, *args, inp: str | None = None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HSX, "demo", "--stages", "extract", "--workdir", str(workdir), "--samples", "40", *args],
        input=inp, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_rate(conf: str) -> float:
    """Samples per second from the last run's extracting to its done (the record's own rate
    is gone once the job is over); the events' clock is to the second."""
    events = json.loads(runner("events", "--json", "--config", conf, check=True).stdout)["events"]
    phases = {e["phase"]: e for e in events if e["event"] == "phase"}  # the last run's win
    a, b = phases["extracting"], phases["done"]
    span = (parse_iso(b["t"]) - parse_iso(a["t"])).total_seconds()
    return (b["done"] - a["done"]) / max(span, 1.0)


def test_headless_demo_runs_the_whole_loop_reruns_resume_and_a_seed_gives_the_same_run(tmp_path):
    p = demo(tmp_path / "a", "--headless", "--seed", "7")
    assert p.returncode == 0, p.stderr
    assert "Done: 40 / 40 written" in p.stdout and "paced" not in p.stdout
    conf = str(tmp_path / "a" / "hsx.toml")
    assert run_rate(conf) > PACED_MAX  # full speed: no pace unless asked
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 40
    p = demo(tmp_path / "a", "--headless", "--seed", "7")
    assert p.returncode == 0
    assert status(conf)["done_this_run"] == 0
    # the same seed elsewhere: the same data, model and tensors
    assert demo(tmp_path / "b", "--headless", "--seed", "7").returncode == 0
    assert filecmp.cmp(tmp_path / "a" / "data.jsonl", tmp_path / "b" / "data.jsonl", shallow=False)
    assert filecmp.cmp(
        tmp_path / "a/model/model.safetensors", tmp_path / "b/model/model.safetensors", shallow=False
    )
    assert_same_tensors(tensors(conf), tensors(str(tmp_path / "b/hsx.toml")))


def _samples(out) -> list[str]:
    return sorted(n for _, _, names in os.walk(out) for n in names if ".ckpt" in n)


def test_a_rerun_keeps_the_hsx_toml_the_user_edited(tmp_path):
    work, small = tmp_path / "d", ("--headless", "--samples", "6")
    assert demo(work, *small).returncode == 0
    conf = work / "hsx.toml"
    edited = conf.read_text().replace(
        "\nmax_length = 512\n", '\nmax_length = 512\nstorage = "ckpt.gz"  # trying it\n'
    )
    assert edited != conf.read_text()
    conf.write_text(edited)
    shutil.rmtree(work / "out")
    p = demo(work, *small)
    assert p.returncode == 0, p.stderr
    assert conf.read_text() == edited and len(_samples(work / "out")) == 6
    assert all(n.endswith(".ckpt.gz") for n in _samples(work / "out"))
    # everything hsx built is gone too (a workdir from an older hsx has no demo.json either)
    for name in ("out", "model"):
        shutil.rmtree(work / name)
    for name in ("data.jsonl", "demo.json"):
        os.remove(work / name)
    p = demo(work, *small)
    assert p.returncode == 0, p.stderr
    assert conf.read_text() == edited and f"keeping {conf}" in p.stdout and "your edits stay" in p.stdout
    assert len(_samples(work / "out")) == 6 and all(n.endswith(".ckpt.gz") for n in _samples(work / "out"))
    assert verify(str(conf))[0] == 0


def test_the_console_demo_is_paced_to_be_watched(tmp_path, patient):
    """Followed verbatim, the demo runs long enough to ask "progress?" and see a rate and an
    ETA: its pace is the server's, so the status record measures it like any slowness."""
    work = tmp_path / "p"
    proc = subprocess.Popen(
        [HSX, "demo", "--stages", "extract", "--workdir", str(work), "--samples", "120"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    conf = str(work / "hsx.toml")
    try:
        wait_for(lambda: os.path.exists(conf) and done_count(conf) >= 16, timeout=180, what="16 samples")
        st = status(conf)
        assert st["phase"] == "extracting" and 1.0 <= st["rate"] <= PACED_MAX, st["rate"]
        out, err = proc.communicate("progress?\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "paced to ~4 samples/s" in out and "--pace 0 is full speed" in out
    assert "samples/s" in out and "ETA ~" in out  # asked while it ran
    assert "stopping the job; run the same command again to resume" in out
    assert status(conf)["phase"] == "stopped"


def test_console_answers_progress_and_verbs(tmp_path, patient):
    """What the console answers, not when (``patient``: the demo's status reads wait past the 4 s
    bound; on a busy machine its first answer came after it, with no record seen yet)."""
    work = tmp_path / "c"
    proc = subprocess.Popen(
        [HSX, "demo", "--stages", "extract", "--workdir", str(work), "--samples", "40", "--pace", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    conf = str(work / "hsx.toml")
    wait_for(lambda: os.path.exists(conf) and done_count(conf) == 40, timeout=120, what="the job")
    wait_for(lambda: status(conf)["phase"] == "done", timeout=30, what="done")
    out, err = proc.communicate("progress?\n/extract logs 3\n/extract bogus\n/extract stop\n", timeout=60)
    assert proc.returncode == 0, err
    assert "40 / 40" in out  # the terse summary
    assert "unknown command `bogus`" in out and "/extract verify" in out  # help, not a shell
    assert "phase phase=done" in out  # the runner's log through `logs 3`


def test_interrupted_demo_resumes(tmp_path):
    work = tmp_path / "i"
    # paced (~16 samples/s) so that the job cannot finish between Ctrl-C and the stop
    proc = subprocess.Popen(
        [HSX, "demo", "--stages", "extract", "--workdir", str(work), "--samples", str(INTERRUPTED), "--headless", "--pace", "0.25"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    conf = str(work / "hsx.toml")
    wait_for(lambda: os.path.exists(conf) and done_count(conf) >= 5, timeout=120, what="some samples")
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    st = status(conf)
    assert st["phase"] == "stopped" and not st["alive"]
    first = st["done"]
    assert 5 <= first < INTERRUPTED
    p = subprocess.run([HSX, "demo", "--stages", "extract", "--workdir", str(work), "--samples", str(INTERRUPTED), "--headless"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == INTERRUPTED
    assert st["done_this_run"] == INTERRUPTED - first
    with open(os.path.join(work, "out", "dataset.json")) as f:
        assert json.load(f)["total"] == INTERRUPTED


def test_demo_on_the_kimi_target_runs_from_conversations_to_a_verified_output(tmp_path):
    """`hsx demo --target kimi-k2.5`: the wrapper's DeepSeek-V3 text model, its remote-code
    tiktoken tokenizer (trusted, and said so) and reasoning turns, end to end."""
    p = demo(tmp_path / "k", "--headless", "--target", "kimi-k2.5", timeout=600)
    assert p.returncode == 0, p.stderr
    assert "kimi-k2.5-shaped" in p.stdout and "trust_remote_code = true" in p.stdout
    assert "Done: 40 / 40 written" in p.stdout
    conf = str(tmp_path / "k" / "hsx.toml")
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == 40 and rep["complete"]
    rows = [json.loads(line) for line in open(tmp_path / "k" / "data.jsonl")]
    assert any("reasoning_content" in t for r in rows for t in r["conversations"])
    with open(tmp_path / "k" / "model" / "config.json") as f:
        assert json.load(f)["text_config"]["architectures"] == ["DeepseekV3ForCausalLM"]
    _trains_to_the_end_and_exports(conf, steps=10)
    # another target in the same workdir is refused, not mixed in
    p = demo(tmp_path / "k", "--headless", "--target", "qwen3")
    assert p.returncode != 0 and "'target': 'kimi-k2.5'" in p.stderr


def _trains_to_the_end_and_exports(conf: str, steps: int) -> None:
    """The demo's [train], cut to ``steps``: SpecForge's trainer on the output, then its export.
    Kimi's wrapper trains through a text-only view of its dir (SpecForge's target head, pointed
    at the wrapper's own, fails at once: its config has no top-level hidden_size)."""
    specforge_train_python()
    with open(conf) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(re.sub(r"(?m)^max_steps = \d+$", f"max_steps = {steps}", text))

    def train(action: str) -> dict:
        return json.loads(runner("train", action, "--json", "--config", conf, check=True).stdout)

    assert train("start")["started"]
    st = wait_for(lambda: (st := train_status(conf))["phase"] not in ("preflight", "loading", "training") and st,
                  timeout=300, every=0.5, what="the training's end")  # fmt: skip
    assert st["phase"] == "done" and st["step"] == st["checkpoint_step"] == steps, st
    with open(os.path.join(st["run_dir"], "target", "config.json")) as f:
        assert json.load(f)["model_type"] == "deepseek_v3"
    rep = train("export")
    assert rep["ok"] and os.path.getsize(os.path.join(rep["export_dir"], "model.safetensors")) > 0


@pytest.mark.parametrize(
    "options,says",
    [
        (
            ["--backend", "sglang", "--target", "qwen3"],
            "runs --target demo or kimi-k2.5; qwen3 runs on the reference",
        ),
        (["--tp", "2"], "--tp N runs SGLang's tensor parallelism: add --backend sglang"),
    ],
)
def test_demo_options_sglang_cannot_run_are_refused_before_anything_is_built(tmp_path, options, says):
    p = subprocess.run(
        [os.path.join(BIN, "hsx"), "demo", "--stages", "extract", *options, "--headless", "--workdir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode != 0 and says in p.stderr and not (tmp_path / "d").exists()


def test_the_demos_pipeline_resumes_its_killed_extraction_and_ends_done(tmp_path):
    """`hsx demo --headless` with a pipeline (the target's answers, then the extraction): its
    extraction runner killed -9 mid-way (an OOM kill, a bad node), the pipeline resumes the stage
    by itself and the one command ends done, every sample once, the resume counted (issue 48).
    Its cost: about 40 s (one demo, its extraction run twice)."""
    work, n = tmp_path / "p", 60
    argv = [HSX, "demo", "--stages", "regenerate,extract", "--workdir", str(work), "--samples", str(n),
            "--headless", "--pace", "0.5"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    conf = str(work / "hsx.toml")
    begun = os.path.join(work, "out", "status.json")  # the extraction's record: the config whole by then
    wait_for(lambda: os.path.exists(begun) and (s := status(conf))["phase"] == "extracting" and s["done"] >= 5,
             timeout=240, what="the extraction stage under way")  # fmt: skip
    held, pid = is_held_at(os.path.join(work, "out", ".lock"))
    assert held and pid
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "pipeline done" in out, out[-3000:] + err[-2000:]
    st = status(conf)
    assert st["phase"] == "done" and st["done"] == n, st
    pipe = json.loads(runner("pipeline", "status", "--json", "--config", conf, check=True).stdout)
    assert pipe["phase"] == "done" and pipe["resumes"] == {"extract": 1} and len(pipe["healed"]) == 1, pipe
    found = discovered(str(work / "out"))
    assert sorted(found) == list(range(n)) and all(len(v) == 1 for v in found.values())
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == n, rep
