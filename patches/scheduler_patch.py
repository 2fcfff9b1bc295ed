"""The scheduler-side half of the dump patch: runs inside each SGLang scheduler process.

SGLang spawns its schedulers, so the launcher passes ``run_scheduler_process`` below to
``launch_server``; it patches a few class attributes in this process, then runs the real
scheduler. Every hook catches its own exceptions: one that escaped would kill the server.
Only the writing rank touches the rows; on its scheduler thread the hook takes views and
queues them (patches/writer.py); copies and disk writes happen elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys

from runner.contract import dump
from runner.contract.launch import parse_layer_ids

from . import capture, layer_ids
from .staging import HostStage
from .writer import DumpWriter, wait_limit

log = logging.getLogger("hsx.dump")
_MARK = "__hsx_dump_original__"


class DumpState:
    """What the hooks of one scheduler process share."""

    def __init__(
        self,
        dump_dir: str,
        writer_rank: bool,
        writer: DumpWriter | None = None,
        watchdog_s: float | None = None,
        name: str = "",
    ):
        self.dump_dir = dump_dir
        self.writer_rank = writer_rank
        if writer is None and writer_rank:
            writer = DumpWriter(dump_dir, wait_limit_s=wait_limit(watchdog_s), name=name)
        self.writer = writer
        self.chunks = capture.Reassembler()
        self.stage = HostStage()
        self.skipped = 0  # marked requests that wrote nothing (logged each time)

    def on_rows(self, req, logits_output, offset: int, n: int, store: bool) -> None:
        if not self.writer_rank:
            return
        rid = req.rid
        middle = req.inflight_middle_chunks > 0 and not req.finished() and not req.is_retracted
        if not middle and not store:
            if self.chunks.drop(rid):
                log.info("hsx dump: %s ended without committing its prefill; pieces dropped", rid)
            return
        aux, final, ready = self.stage.rows(logits_output.hidden_states, logits_output.last_hidden_states)
        aux, final = capture.slice_rows(aux, final, offset, n)
        sample = capture.on_rows(
            self.chunks,
            rid=rid,
            retraction_count=int(getattr(req, "retraction_count", 0) or 0),
            input_ids=req.origin_input_ids,
            custom_params=req.sampling_params.custom_params,
            middle_chunk=middle,
            commit=store,
            aux=aux,
            final=final,
            ready=ready,  # one side stream: the last piece's event covers the earlier chunks'
        )
        if sample is not None:
            self.writer.submit(sample)


_STATE: DumpState | None = None


def _rid_of(req) -> str:
    return str(getattr(req, "rid", "?"))


def make_append_hook(original, state_of):
    """The replacement of SchedulerBatchResultProcessor._append_prefill_hidden_states."""

    def _append_prefill_hidden_states(
        self, *, req, logits_output, hidden_state_offset, capture_hidden_mode, extend_input_len, store=True
    ):
        kwargs = dict(
            req=req,
            logits_output=logits_output,
            hidden_state_offset=hidden_state_offset,
            capture_hidden_mode=capture_hidden_mode,
            extend_input_len=extend_input_len,
            store=store,
        )
        try:
            marked = capture.is_marked(req.sampling_params.custom_params)
            full = capture_hidden_mode.is_full()
        except Exception:
            marked = full = False
        if not marked:
            return original(self, **kwargs)
        if not full:
            log.error("hsx dump: %s: capture mode %s is not FULL; no dump", _rid_of(req), capture_hidden_mode)
            return original(self, **kwargs)
        try:
            state_of().on_rows(req, logits_output, hidden_state_offset, extend_input_len, store)
        except Exception as e:
            state = state_of()
            log.exception("hsx dump: %s: no dump written", _rid_of(req))
            if state is not None:
                state.skipped += 1
                state.chunks.drop(_rid_of(req))
                if state.writer is not None and dump.RID_RE.match(_rid_of(req)):
                    state.writer.fail(_rid_of(req), f"{type(e).__name__}: {e}")
        return hidden_state_offset + extend_input_len

    setattr(_append_prefill_hidden_states, _MARK, original)
    return _append_prefill_hidden_states


def make_copy_hook(original, async_d2h, state_of):
    """Wraps GenerationBatchResult.copy_to_cpu (overlap schedule): on the writing rank, queue
    the final-norm rows' copy with the others, before copy_done is recorded."""

    def copy_to_cpu(self, return_logprob, return_hidden_states=True):
        try:
            state = state_of()
            lo = self.logits_output
            last = getattr(lo, "last_hidden_states", None) if lo is not None else None
            writes = state is not None and state.writer_rank
            if writes and return_hidden_states and last is not None and last.device.type != "cpu":
                lo.last_hidden_states = async_d2h(last)
        except Exception:
            log.exception("hsx dump: copying last_hidden_states to the host failed")
        return original(self, return_logprob, return_hidden_states)

    setattr(copy_to_cpu, _MARK, original)
    return copy_to_cpu


def make_order_hook(original):
    """Wraps Scheduler._copy_result_to_cpu (overlap schedule). Stock SGLang queues the copy of
    the hidden rows on its copy stream, which the next forward never waits for, and consecutive
    prefills overlap by default, so the next forward could rewrite a CUDA-graph buffer before
    the copy has read it. For batches with hidden states the forward stream waits for the copy."""

    def _copy_result_to_cpu(self, batch_result, batch):
        original(self, batch_result, batch)
        try:
            done = getattr(batch_result, "copy_done", None)
            if getattr(batch, "return_hidden_states", False) and hasattr(done, "query"):
                self.forward_stream.wait_event(done)
        except Exception:
            log.exception("hsx dump: ordering the next forward after the copy failed")

    setattr(_copy_result_to_cpu, _MARK, original)
    return _copy_result_to_cpu


def make_capture_hook(original, ids: list[int]):
    """Wraps configure_aux_hidden_state_capture: the model captures the outputs of exactly the
    layers hsx names (patches/layer_ids.py), or the scheduler refuses to start."""

    def configure_aux_hidden_state_capture(*, model, eagle_use_aux_hidden_state, **kwargs):
        if eagle_use_aux_hidden_state and ids and hasattr(model, "set_eagle3_layers_to_capture"):
            arg = layer_ids.configure(model, ids)
            log.info(
                "hsx dump: %s captures the outputs of layers %s (argument %s)", type(model).__name__, ids, arg
            )
            eagle_use_aux_hidden_state = False  # done; the stock call still sets up the rest
        return original(model=model, eagle_use_aux_hidden_state=eagle_use_aux_hidden_state, **kwargs)

    setattr(configure_aux_hidden_state_capture, _MARK, original)
    return configure_aux_hidden_state_capture


def _replace(cls, name: str, make) -> None:
    current = getattr(cls, name)
    if getattr(current, _MARK, None) is not None:  # already patched in this process
        return
    setattr(cls, name, make(current))


def install(dump_dir: str, writer_rank: bool, watchdog_s: float | None = None, tp_rank: int = 0) -> DumpState:
    """Patch this process's SGLang classes (idempotent) and set the shared state."""
    global _STATE
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor import model_runner
    from sglang.srt.utils.common import async_d2h

    name = f"TP{tp_rank} pid {os.getpid()}"
    _STATE = DumpState(dump_dir, writer_rank, watchdog_s=watchdog_s, name=name)
    state_of = lambda: _STATE  # noqa: E731
    _replace(
        SchedulerBatchResultProcessor,
        "_append_prefill_hidden_states",
        lambda o: make_append_hook(o, state_of),
    )
    _replace(GenerationBatchResult, "copy_to_cpu", lambda o: make_copy_hook(o, async_d2h, state_of))
    _replace(Scheduler, "_copy_result_to_cpu", make_order_hook)
    ids = parse_layer_ids(os.environ.get(dump.DUMP_LAYERS_ENV, ""))  # the launcher checked them
    _replace(model_runner, "configure_aux_hidden_state_capture", lambda o: make_capture_hook(o, ids))
    # The runner reads this line to name the rank of a scheduler that died (runner/serve/server.py).
    # Printed: SGLang sets up logging in a spawned scheduler only later, so a log line is lost.
    print(
        f"hsx dump patch installed in {name} (writer={writer_rank}, dump dir {dump_dir})",
        file=sys.stderr,
        flush=True,
    )
    return _STATE


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, *rest, **more):
    """SGLang's, passed to launch_server as run_scheduler_process_func: the patch installed, then
    the real one with every argument as given (its signature is checked by patches.hooks)."""
    from sglang.srt.managers import scheduler

    dump_dir = os.environ.get(dump.DUMP_DIR_ENV, "")
    if not dump_dir:
        raise RuntimeError(f"{dump.DUMP_DIR_ENV} is not set in the scheduler process")
    install(
        dump_dir,
        writer_rank=(tp_rank == 0),
        watchdog_s=getattr(server_args, "watchdog_timeout", None),
        tp_rank=tp_rank,
    )
    return scheduler.run_scheduler_process(server_args, port_args, gpu_id, tp_rank, *rest, **more)
