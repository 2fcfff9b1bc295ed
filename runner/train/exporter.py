"""``hsx-runner train export``: the last complete checkpoint exported for SGLang, its layer ids
checked, and the SGLang command that serves it. The supervisor exports at the end itself
(``export_run``); ``train export`` exports again, under the run's launch lock, so two exports
never write one folder at once."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

from .. import specforge_cpu
from ..contract.config import Config
from ..contract.errors import ConfigError
from ..contract.replies import NOT_OK, Reply
from ..contract.train import ACTIVE
from ..serve import plain
from . import guard, progress, runspec
from .control import locked, refused, running
from .record import read


def export(cfg: Config) -> Reply:
    """``train export``: the supervisor exports at the end itself; this exports again (or once
    more after a failed one)."""
    paths = runspec.RunPaths(runspec.run_dir(cfg))

    def go() -> Reply:
        if (pid := running(paths)) is not None:
            return refused(f"a training run is going (supervisor pid {pid}): export when it is done")
        d = read(paths.root)
        if d.get("phase") in ACTIVE or d.get("run_id") is None:
            return refused(f"nothing to export in {paths.root}")
        return export_run(cfg, paths, d)

    if not os.path.isdir(paths.root):
        return refused(f"nothing to export in {paths.root}")
    return locked(paths.root, go)


def export_run(cfg: Config, paths: runspec.RunPaths, d: dict) -> Reply:
    """The last complete checkpoint exported for SGLang into export_dir, its layer ids checked."""
    ckpt = progress.durable(d["output_dir"], d["run_id"], d.get("world") or 1, set())
    if ckpt is None:
        return refused(f"no complete checkpoint in {d['output_dir']}")
    out = runspec.export_dir(cfg)
    try:
        guard.export_dir(cfg, out, paths.root)
    except ConfigError as e:
        return refused(str(e))
    guard.mark_export(out)
    argv = [cfg.train.python, "-m", "specforge.cli", "export", "--to", "sglang",
            "--checkpoint", progress.step_dir(d["output_dir"], d["run_id"], ckpt),
            "--draft-config", paths.draft, "--output-dir", out]  # fmt: skip
    env = {**os.environ, **specforge_cpu.env(cfg.train.python)}
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=paths.root)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return Reply({"ok": False, "reason": why, "argv": argv}, f"export failed: {why}", NOT_OK)
    want = runspec.description(cfg)["aux_layer_ids"]
    try:
        with open(os.path.join(out, "config.json")) as f:
            got = (json.load(f).get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    except (OSError, ValueError, AttributeError) as e:
        why = f"the export left no readable config.json in {out} ({e}): do not serve it"
        return Reply({"ok": False, "reason": why, "export_dir": out}, f"export REFUSED: {why}", NOT_OK)
    if got != want:  # SGLang would feed the draft other layers than it was trained on
        why = (f"the exported draft's layer ids {got} differ from the extraction's {want}: SGLang would "
               f"feed it the wrong layers; do not serve it (the files are kept in {out})")  # fmt: skip
        return Reply({"ok": False, "reason": why, "export_dir": out, "aux_layer_ids": got}, f"export REFUSED: {why}",
                     NOT_OK)  # fmt: skip
    flags = serve_flags(cfg, out)
    text = f"exported step {ckpt} to {out}; serve it with: {serve_command(cfg, out)} (`/measure start` measures it)"
    rep = {"ok": True, "export_dir": out, "checkpoint_step": ckpt, "aux_layer_ids": got, "flags": flags}
    return Reply({**rep, "message": text}, text)  # the message: what chat posts


# What SGLang 0.5.23 picks itself when no step count is given (_auto_choose_speculative_params in
# sglang/srt/arg_groups/speculative_hook.py): (num_steps, eagle_topk, num_draft_tokens) by the
# target's architecture. Said explicitly, so the command shows what it serves with.
SGLANG_EAGLE = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8), "Grok1VForCausalLM": (5, 4, 8)}
SGLANG_EAGLE_DEFAULT = (3, 1, 4)


def default_setting(cfg: Config) -> tuple[int, int, int]:
    """(steps, topk, draft tokens): SGLang's own choice for the target's architecture."""
    try:
        with open(os.path.join(cfg.job.model, "config.json")) as f:
            arch = (json.load(f).get("architectures") or [""])[0]
    except (OSError, ValueError, AttributeError, IndexError):
        arch = ""
    return SGLANG_EAGLE.get(arch, SGLANG_EAGLE_DEFAULT)


def serve_flags(cfg: Config, export_dir: str) -> list[str]:
    """SGLang's flags that serve the target with the exported draft as its EAGLE-3 speculator."""
    steps, topk, tokens = default_setting(cfg)
    flags = ["--model-path", os.path.abspath(cfg.job.model), "--speculative-algorithm", "EAGLE3",
             "--speculative-draft-model-path", export_dir, "--speculative-num-steps", str(steps),
             "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(tokens)]  # fmt: skip
    return flags + ["--trust-remote-code"] * cfg.job.trust_remote_code


def serve_command(cfg: Config, export_dir: str) -> str:
    """The command that serves the draft at SGLang's own setting: with ``[server] backend =
    "sglang"`` the box's SGLang as the measurement runs it (its python, flags and a CPU lane's
    attention), else SGLang's flags alone."""
    if cfg.server.backend == "sglang":
        return plain.command(cfg, export_dir, "/".join(map(str, default_setting(cfg))))
    return f"python -m sglang.launch_server {shlex.join(serve_flags(cfg, export_dir))}"
