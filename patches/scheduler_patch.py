"""The scheduler-side half of the dump patch: runs inside each SGLang scheduler process.

SGLang spawns its schedulers, so the launcher passes ``run_scheduler_process`` below to
``launch_server``; it patches three class attributes in this process, then runs the real
scheduler. Every hook catches its own exceptions: one that escaped would kill the server.
"""

from __future__ import annotations

import logging
import os

from runner import dump

from . import capture, layer_ids
from .writer import DumpWriter

log = logging.getLogger("hsx.dump")
_MARK = "__hsx_dump_original__"


class DumpState:
    """What the hooks of one scheduler process share."""

    def __init__(self, dump_dir: str, writer_rank: bool, writer: DumpWriter | None = None):
        self.dump_dir = dump_dir
        self.writer_rank = writer_rank
        self.writer = writer if writer is not None else (DumpWriter(dump_dir) if writer_rank else None)
        self.chunks = capture.Reassembler()
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
        aux, final = capture.slice_rows(
            logits_output.hidden_states, logits_output.last_hidden_states, offset, n
        )
        if aux.device.type != "cpu":  # overlap schedule off: the rows are still on the GPU
            aux, final = aux.to("cpu"), final.to("cpu")
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
        )
        if sample is not None:
            self.writer.submit(sample)


_STATE: DumpState | None = None


def _env_ids() -> list[int]:
    text = os.environ.get(dump.DUMP_LAYERS_ENV, "")
    return [int(p) for p in text.replace(",", " ").split()]


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
        except Exception:
            state = state_of()
            if state is not None:
                state.skipped += 1
                state.chunks.drop(_rid_of(req))
            log.exception("hsx dump: %s: no dump written", _rid_of(req))
        return hidden_state_offset + extend_input_len

    setattr(_append_prefill_hidden_states, _MARK, original)
    return _append_prefill_hidden_states


def make_stream_hook(original, state_of):
    """Wraps SchedulerOutputStreamer.stream_output: responses leave after their dumps are on disk."""

    def stream_output(self, reqs, return_logprob, skip_req=None):
        try:
            state = state_of()
            if state is not None and state.writer is not None and state.writer.has_pending():
                state.writer.wait([r.rid for r in reqs if r is not skip_req])
        except Exception:
            log.exception("hsx dump: waiting for dump writes failed")
        return original(self, reqs, return_logprob, skip_req)

    setattr(stream_output, _MARK, original)
    return stream_output


def make_copy_hook(original, async_d2h):
    """Wraps GenerationBatchResult.copy_to_cpu (overlap schedule): queue the final-norm rows'
    copy with the others, before copy_done is recorded and before the next forward reuses
    the CUDA-graph buffer they may live in."""

    def copy_to_cpu(self, return_logprob, return_hidden_states=True):
        try:
            lo = self.logits_output
            last = getattr(lo, "last_hidden_states", None) if lo is not None else None
            if return_hidden_states and last is not None and last.device.type != "cpu":
                lo.last_hidden_states = async_d2h(last)
        except Exception:
            log.exception("hsx dump: copying last_hidden_states to the host failed")
        return original(self, return_logprob, return_hidden_states)

    setattr(copy_to_cpu, _MARK, original)
    return copy_to_cpu


def make_capture_hook(original, ids_of):
    """Wraps configure_aux_hidden_state_capture: the model captures the outputs of exactly the
    layers hsx names (patches/layer_ids.py), or the scheduler refuses to start."""

    def configure_aux_hidden_state_capture(*, model, eagle_use_aux_hidden_state, **kwargs):
        ids = ids_of()
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


def install(dump_dir: str, writer_rank: bool) -> DumpState:
    """Patch this process's SGLang classes (idempotent) and set the shared state."""
    global _STATE
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor import model_runner
    from sglang.srt.utils.common import async_d2h

    _STATE = DumpState(dump_dir, writer_rank)
    state_of = lambda: _STATE  # noqa: E731
    _replace(
        SchedulerBatchResultProcessor,
        "_append_prefill_hidden_states",
        lambda o: make_append_hook(o, state_of),
    )
    _replace(SchedulerOutputStreamer, "stream_output", lambda o: make_stream_hook(o, state_of))
    _replace(GenerationBatchResult, "copy_to_cpu", lambda o: make_copy_hook(o, async_d2h))
    ids = _env_ids()
    _replace(model_runner, "configure_aux_hidden_state_capture", lambda o: make_capture_hook(o, lambda: ids))
    log.info("hsx dump patch installed (writer=%s, dump dir %s)", writer_rank, dump_dir)
    return _STATE


def run_scheduler_process(
    server_args,
    port_args,
    gpu_id,
    tp_rank,
    pp_rank,
    dp_rank,
    pipe_writer,
    display_tp_rank=None,
    display_dp_rank=None,
    display_moe_ep_rank=None,
):
    """Same signature as SGLang's; passed to launch_server as run_scheduler_process_func."""
    from sglang.srt.managers import scheduler

    dump_dir = os.environ.get(dump.DUMP_DIR_ENV, "")
    if not dump_dir:
        raise RuntimeError(f"{dump.DUMP_DIR_ENV} is not set in the scheduler process")
    install(dump_dir, writer_rank=(tp_rank == 0))
    return scheduler.run_scheduler_process(
        server_args,
        port_args,
        gpu_id,
        tp_rank,
        pp_rank,
        dp_rank,
        pipe_writer,
        display_tp_rank,
        display_dp_rank,
        display_moe_ep_rank,
    )
