"""Scheduler-thread time the dump patch adds per sample, inside the real SGLang classes.

    PYTHONPATH=.:tests/sglang_cpu SGLANG_USE_CPU_ENGINE=1 .cache/sglang-cpu-*/bin/python \\
        -m bench.hook_time [--tokens 8192] [--hidden 7168] [--samples 8]

Installs the patch (patches.scheduler_patch.install) in this process, then calls the real,
now patched ``SchedulerBatchResultProcessor._append_prefill_hidden_states`` for one-request
batches of ``tokens`` rows (aux ``[tokens, 3H]`` and final-norm ``[tokens, H]``, bf16, ~470 MB
for 8,192 x 7,168), timing each call on this thread while the writer threads write the
earlier samples ("busy": they share the process and its GIL, as in the server), then again
with the writers idle before each call ("alone": the hook's own cost), then as a non-writing
TP rank would (``writer_rank=False``: it must write nothing). Baseline, same run:
what a hook that copies on the scheduler thread pays, a ``clone()`` of the same rows (the
previous design's cost without the overlap schedule). Goal: <= 5 ms per sample. The dumps go
to a temp dir on --dir's filesystem and are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from array import array
from types import SimpleNamespace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    from patches import scheduler_patch
    from runner.contract import dump

    out = tempfile.mkdtemp(prefix="hsx-hook-bench-", dir=args.dir)
    try:
        state = scheduler_patch.install(out, writer_rank=True)
        n, h = args.tokens, args.hidden
        g = torch.Generator().manual_seed(0)
        aux = torch.randn(n, 3 * h, generator=g).to(torch.bfloat16)
        final = torch.randn(n, h, generator=g).to(torch.bfloat16)
        ids = array("q", torch.randint(0, 150_000, (n,), generator=g).tolist())
        mask = dump.encode_mask([0] * (n // 4) + [1] * (n - n // 4))
        hook = SchedulerBatchResultProcessor._append_prefill_hidden_states
        hooked, alone, copied = [], [], []

        def call(i: int) -> float:
            lo = LogitsProcessorOutput(next_token_logits=None, hidden_states=aux, last_hidden_states=final)
            req = SimpleNamespace(
                rid=f"bench-{i}", origin_input_ids=ids, inflight_middle_chunks=0, is_retracted=False,
                retraction_count=0, return_hidden_states=True, hidden_states=[], finished=lambda: False,
                sampling_params=SimpleNamespace(custom_params={dump.CUSTOM_KEY: True, dump.MASK_KEY: mask}),
            )  # fmt: skip
            t = time.perf_counter()
            end = hook(
                None, req=req, logits_output=lo, hidden_state_offset=0,
                capture_hidden_mode=CaptureHiddenMode.FULL, extend_input_len=n,
            )  # fmt: skip
            took = time.perf_counter() - t
            assert end == n
            return took

        t_all = time.perf_counter()
        for i in range(args.samples):  # back to back: the writers are busy with the earlier ones
            hooked.append(call(i))
        assert state.writer.drain(timeout=600)
        wall = time.perf_counter() - t_all
        for i in range(args.samples, 2 * args.samples):  # the writers idle before each call
            assert state.writer.drain(timeout=600)
            alone.append(call(i))
            t = time.perf_counter()
            aux.clone(), final.clone()
            copied.append(time.perf_counter() - t)
        assert state.writer.drain(timeout=600)
        written = sum(1 for name in os.listdir(out) if name.endswith(".json"))
        assert written == 2 * args.samples and state.writer.failed == 0, (written, state.writer.failed)
        # A non-writing TP rank (tp_rank > 0): the same hook, the same rows, nothing to do.
        scheduler_patch.install(out, writer_rank=False, tp_rank=1)
        other = [call(i) for i in range(2 * args.samples, 3 * args.samples)]
        assert sum(1 for name in os.listdir(out) if name.endswith(".json")) == written, "a non-writer wrote"
        res = {
            "tokens": n,
            "hidden": h,
            "sample_mb": round((aux.numel() + final.numel()) * 2 / 1e6),
            "hook_ms_median": round(statistics.median(hooked) * 1e3, 3),
            "hook_ms_max": round(max(hooked) * 1e3, 3),
            "hook_alone_ms_median": round(statistics.median(alone) * 1e3, 3),
            "non_writer_ms_median": round(statistics.median(other) * 1e3, 4),
            "copy_on_scheduler_ms_median": round(statistics.median(copied) * 1e3, 1),
            "ratio": round(statistics.median(hooked) / statistics.median(copied), 4),
            "samples_written": written,
            "writer_s_per_sample": round(wall / args.samples, 2),
        }
        print(
            f"scheduler thread per sample: hook {res['hook_ms_median']} ms with writers busy (max "
            f"{res['hook_ms_max']}), {res['hook_alone_ms_median']} ms alone "
            f"vs copying on it {res['copy_on_scheduler_ms_median']} ms -> {res['ratio']}; "
            f"on a non-writing rank {res['non_writer_ms_median']} ms; "
            f"{written} samples of {res['sample_mb']} MB written, {res['writer_s_per_sample']} s each end to end"
        )
        print(json.dumps(res))
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
