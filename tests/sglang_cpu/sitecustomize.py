"""The CPU lane's SGLang children forked, not spawned (HSX_SGLANG_CPU_FORK=1, set by
runner/sglang_cpu.py ENV for the servers of that lane only).

SGLang forces ``spawn`` (``_set_envs_and_config``), which CUDA needs: every scheduler and
detokenizer re-imports SGLang, ~7 s of CPU each on this box, while the launching process has
already imported all of it. On the CPU engine no CUDA context exists to be inherited, and the
launcher has run no torch op before its children start, so a fork is safe and a server is ready
in about half the time (measured: 23 s → 12 s, 31 s → 16 s of CPU). Imported by Python's
``site`` at start-up because this folder is on the lane's PYTHONPATH.
"""

import multiprocessing
import os

if os.environ.get("HSX_SGLANG_CPU_FORK") == "1":
    _set_start_method = multiprocessing.set_start_method

    def _forking(method, force=False):
        return _set_start_method("fork" if method == "spawn" else method, force=force)

    multiprocessing.set_start_method = _forking
