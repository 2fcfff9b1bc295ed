"""The one table of SGLang hook points the dump patch relies on.

Two ways to check it: ``hooks_installed.check_installed()`` imports the installed sglang (launcher
start-up); ``hooks_source.check_sources()`` reads the sources with ``ast`` only (the wheel
compatibility test, no import of sglang). Both return a list of problems, empty when the table
holds. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.contract.errors import HsxError

SGLANG_VERSION = "0.5.23"

_FLAG_FIELDS_DIR = "sglang/srt/arg_groups/fields/"


@dataclass(frozen=True)
class Hook:
    """One thing the patch needs from SGLang.

    kind: ``callable`` (``params`` is the exact parameter list, ``*`` marks keyword-only),
    ``field`` (declared on the class: dataclass/struct field, enum member, class attribute),
    ``attribute`` (assigned on ``self`` in a method, e.g. ``Req.__init__``),
    ``flag`` (``target`` is a ServerArgs field, ``params`` holds its command-line spelling),
    ``imported`` (``module`` imports ``target`` by name from ``params[0]``: patch it where it is used).
    """

    kind: str
    module: str
    target: str
    params: tuple[str, ...] = ()
    why: str = ""


_BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"
_SB = "sglang.srt.managers.schedule_batch"
_SA = "sglang.srt.server_args"


def _flag(field: str, why: str) -> Hook:
    return Hook("flag", _SA, field, ("--" + field.replace("_", "-"),), why)


HOOKS: tuple[Hook, ...] = (
    # launcher side
    Hook("callable", "sglang.srt.plugins", "load_plugins", (), "the stock launcher loads plugins first"),
    Hook("callable", _SA, "prepare_server_args", ("argv",), "parse the server command line"),
    Hook("callable", _SA, "ServerArgs.resolve_once", ("self",), "resolve before checking the result"),
    Hook(
        "callable",
        "sglang.srt.arg_groups.model_override_base",
        "resolving_view",
        ("server_args",),
        "read resolved values (aux capture, hidden-state mode)",
    ),
    Hook(
        "callable",
        "sglang.srt.entrypoints.http_server",
        "launch_server",
        (
            "server_args",
            "init_tokenizer_manager_func",
            "run_scheduler_process_func",
            "run_detokenizer_process_func",
            "execute_warmup_func",
            "launch_callback",
        ),
        "injects our scheduler entry; children are spawned, so patches must be applied there",
    ),
    Hook(
        "callable",
        "sglang.srt.utils.common",
        "kill_process_tree",
        ("parent_pid", "include_parent", "skip_pid", "wait_timeout"),
        "clean up children like the stock launcher",
    ),
    # scheduler side
    Hook(
        "callable",
        "sglang.srt.managers.scheduler",
        "run_scheduler_process",
        (
            "server_args",
            "port_args",
            "gpu_id",
            "tp_rank",
            "pp_rank",
            "dp_rank",
            "pipe_writer",
            "display_tp_rank",
            "display_dp_rank",
            "display_moe_ep_rank",
        ),
        "wrapped: apply the patch, then run the real scheduler",
    ),
    Hook(
        "callable",
        _BRP,
        "SchedulerBatchResultProcessor._append_prefill_hidden_states",
        (
            "self",
            "*",
            "req",
            "logits_output",
            "hidden_state_offset",
            "capture_hidden_mode",
            "extend_input_len",
            "store",
        ),
        "replaced: per request slice of the batch's hidden rows; must return the advanced offset",
    ),
    Hook(
        "callable",
        "sglang.srt.managers.scheduler",
        "Scheduler._copy_result_to_cpu",
        ("self", "batch_result", "batch"),
        "wrapped: the next forward waits for the copy of the hidden rows (it uses self.forward_stream)",
    ),
    Hook(
        "callable",
        "sglang.srt.managers.utils",
        "GenerationBatchResult.copy_to_cpu",
        ("self", "return_logprob", "return_hidden_states"),
        "wrapped: with the overlap schedule, also copy last_hidden_states off the GPU in time",
    ),
    Hook(
        "callable",
        "sglang.srt.model_executor.model_runner_components.attention_backend_setup",
        "configure_aux_hidden_state_capture",
        (
            "*",
            "model",
            "eagle_use_aux_hidden_state",
            "eagle_aux_hidden_state_layer_ids",
            "dflash_use_aux_hidden_state",
            "dflash_target_layer_ids",
            "is_dspark",
        ),
        "wrapped where model_runner imports it: capture exactly the named layers (patches/layer_ids.py)",
    ),
    Hook(
        "imported",
        "sglang.srt.model_executor.model_runner",
        "configure_aux_hidden_state_capture",
        ("sglang.srt.model_executor.model_runner_components.attention_backend_setup",),
        "the name model_runner calls, so the wrapper is installed there",
    ),
    Hook("field", "sglang.srt.managers.utils", "GenerationBatchResult.logits_output", (), "holds the rows"),
    Hook("callable", "sglang.srt.utils.common", "async_d2h", ("tensor",), "pinned async device-to-host copy"),
    Hook(
        "field",
        "sglang.srt.layers.logits_processor",
        "LogitsProcessorOutput.hidden_states",
        (),
        "aux concat [tokens, 3H] under full capture",
    ),
    Hook(
        "field",
        "sglang.srt.layers.logits_processor",
        "LogitsProcessorOutput.last_hidden_states",
        (),
        "final-norm rows [tokens, H] under aux capture",
    ),
    Hook(
        "field",
        "sglang.srt.model_executor.forward_batch_info",
        "CaptureHiddenMode.FULL",
        (),
        "one row per prompt token",
    ),
    Hook(
        "field",
        "sglang.srt.sampling.sampling_params",
        "SamplingParams.custom_params",
        (),
        "carries the hsx_dump marker and loss mask",
    ),
    Hook("callable", _SB, "Req.finished", ("self",), "aborted requests write nothing"),
    *(
        Hook("attribute", _SB, f"Req.{name}", (), why)
        for name, why in (
            ("rid", "names the dump file"),
            ("origin_input_ids", "the prompt: rows must add up to its length"),
            ("sampling_params", "reach custom_params"),
            ("return_hidden_states", "stock path"),
            ("hidden_states", "stock path"),
            ("inflight_middle_chunks", "> 0 in the hook means a middle prefill chunk"),
            ("is_retracted", "a retracted request starts over"),
            ("retraction_count", "keys chunk buffers so a retried prefill starts clean"),
        )
    ),
    _flag("enable_return_aux_hidden_states", "capture the aux layers without a draft model"),
    _flag("speculative_algorithm", "EAGLE3 names the capture convention"),
    _flag("return_aux_hidden_state_layer_ids", "configurable aux layers"),
    _flag("watchdog_timeout", "the writer never blocks the scheduler near it"),
    *(
        _flag(f, "a layout the launcher refuses (runner/contract/launch.py UNTESTED)")
        for f in (
            "enable_two_batch_overlap",
            "moe_a2a_backend",
            "enable_attn_tp_input_scattered",
            "attn_cp_size",
            "enable_prefill_cp",
            "dcp_size",
        )
    ),
    _flag("return_hidden_states_mode", "must resolve to full"),
    _flag("disable_radix_cache", "a prefix hit would drop rows"),
    _flag("chunked_prefill_size", "-1 turns chunking off; otherwise chunks are reassembled"),
    _flag("disable_overlap_schedule", "optional; both schedules are handled"),
    _flag("pp_size", "aux capture needs pp_size 1"),
    _flag("tp_size", "tensor parallel width"),
    _flag("dp_size", "data parallel replicas"),
    _flag("attn_dp_size", "DP attention is refused (writer rank unconfirmed)"),
    _flag("mem_fraction_static", "runner config"),
    _flag("model_path", "runner config"),
    _flag("host", "runner config"),
    _flag("port", "runner config"),
)


class IncompatibleSGLang(HsxError, RuntimeError):
    """The installed or inspected SGLang is not the one this patch was written for."""
