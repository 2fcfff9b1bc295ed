"""Launcher of the patched SGLang server: ``python -m patches.sglang_dump <sglang server args>``.

Reads the dump directory and aux layer ids from the environment (names in runner/contract/dump.py),
refuses a SGLang other than the pinned version or one whose hook points moved
(patches/hooks.py), refuses server arguments the dump would be wrong under, then starts
SGLang's own HTTP server with the scheduler-side patch injected into every scheduler process.

The command line itself (flags, refusals, ``server_argv``) is runner/contract/launch.py.
"""

from __future__ import annotations

import logging
import os
import sys

from runner.contract import dump
from runner.contract.launch import UNTESTED, ArgsError, check_argv, parse_layer_ids

from .hooks import SGLANG_VERSION, IncompatibleSGLang

log = logging.getLogger("hsx.dump")


def prepare_dump_dir(path: str) -> str:
    if not path:
        raise ArgsError(f"{dump.DUMP_DIR_ENV} must name the dump directory (on the output filesystem)")
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".hsx-probe-{os.getpid()}")
    try:
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise ArgsError(f"dump directory {path} is not writable: {e}") from None
    return path


def check_resolved(cfg) -> None:
    """After SGLang resolved its arguments: the values the dump depends on."""
    want = {
        "aux_hidden_state_capture": "eagle3",
        "return_hidden_states_mode": "full",
        "disable_radix_cache": True,
        "pp_size": 1,
        "speculative_algorithm": None,
    }
    bad = [
        f"{k} resolved to {getattr(cfg, k)!r}, need {v!r}" for k, v in want.items() if getattr(cfg, k) != v
    ]
    if getattr(cfg, "attn_dp_size", 1) not in (None, 1):
        bad.append(f"attn_dp_size resolved to {cfg.attn_dp_size!r}, need 1")
    for flag, (field, fine, why) in UNTESTED.items():
        got = getattr(cfg, field, fine)
        if got not in (fine, None) and not (fine == "none" and got in ("", None)):
            bad.append(f"{field} resolved to {got!r} ({flag}): {why}")
    if bad:
        raise ArgsError(
            "SGLang resolved the arguments into a setup the dump cannot use:\n  - " + "\n  - ".join(bad)
        )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s hsx] %(message)s")
    try:
        aux_ids = parse_layer_ids(os.environ.get(dump.DUMP_LAYERS_ENV, ""))
        check_argv(argv, aux_ids)
        os.environ[dump.DUMP_DIR_ENV] = prepare_dump_dir(os.environ.get(dump.DUMP_DIR_ENV, ""))
        from .hooks_installed import require_installed

        require_installed()
    except (ArgsError, IncompatibleSGLang) as e:
        print(f"hsx dump patch: {e}", file=sys.stderr)
        return 2

    from sglang.srt.arg_groups.model_override_base import resolving_view
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.common import kill_process_tree

    from .scheduler_patch import run_scheduler_process

    load_plugins()
    server_args = prepare_server_args(argv)
    server_args.resolve_once()
    try:
        check_resolved(resolving_view(server_args))
    except ArgsError as e:
        print(f"hsx dump patch: {e}", file=sys.stderr)
        return 2
    log.info("hsx dump patch for SGLang %s: dumps go to %s", SGLANG_VERSION, os.environ[dump.DUMP_DIR_ENV])
    try:
        launch_server(server_args, run_scheduler_process_func=run_scheduler_process)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
