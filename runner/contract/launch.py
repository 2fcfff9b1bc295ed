"""The patched server's command line: ``python -m patches.sglang_dump <SGLang server args>``.

Which SGLang flags the dump needs, which layouts it refuses and why, and the argv the runner
spawns. Stdlib only: the runner builds and checks the command line without importing the patch
or SGLang; the launcher (patches/sglang_dump.py) checks it again inside the server's interpreter.
"""

from __future__ import annotations

from . import dump
from .errors import HsxError

LAUNCHER = "patches.sglang_dump"  # run as a module in the server's interpreter

# Flags the dump needs, in the order server_argv writes them.
REQUIRED_FLAGS = (
    "--enable-return-aux-hidden-states",
    "--speculative-algorithm",
    "EAGLE3",
    "--disable-radix-cache",
)
ALIASES = {
    "--tensor-parallel-size": "--tp-size",
    "--data-parallel-size": "--dp-size",
    "--pipeline-parallel-size": "--pp-size",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--model": "--model-path",
    "--attention-context-parallel-size": "--attn-cp-size",
    "--decode-context-parallel-size": "--dcp-size",
}
# Layouts the dump is neither proven under nor safe in, each refused with the reason:
# {flag: (resolved field, the value that is fine, why)}.
UNTESTED = {
    "--enable-two-batch-overlap": (
        "enable_two_batch_overlap", False,
        "DeepSeek-V3's two-batch overlap runs the layers after the dense ones without capturing them",
    ),
    "--moe-a2a-backend": (
        "moe_a2a_backend", "none", "expert-parallel all-to-all (DeepEP and the like) is untested with the dump",
    ),
    "--enable-attn-tp-input-scattered": (
        "enable_attn_tp_input_scattered", False,
        "scattered attention input leaves each rank only part of the rows",
    ),
    "--attn-cp-size": ("attn_cp_size", 1, "context-parallel attention splits each prompt's rows across ranks"),
    "--enable-prefill-cp": ("enable_prefill_cp", False, "context-parallel prefill splits each prompt's rows"),
    "--dcp-size": ("dcp_size", 1, "decode context parallelism is untested with the dump"),
}  # fmt: skip
# Flags whose argument lists are open-ended (nargs="+").
_LIST_FLAGS = {"--return-aux-hidden-state-layer-ids"}
_OWN_FLAGS = (
    "--model-path",
    "--host",
    "--port",
    "--tp-size",
    "--dp-size",
    "--mem-fraction-static",
    "--return-aux-hidden-state-layer-ids",
    "--trust-remote-code",
)


class ArgsError(HsxError, ValueError):
    """Server arguments the dump patch cannot run under."""


def parse_flags(argv: list[str]) -> dict[str, list[list[str]]]:
    """``--flag v ...`` / ``--flag=v`` occurrences, aliases folded: {flag: [values per occurrence]}."""
    out: dict[str, list[list[str]]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            raise ArgsError(f"unexpected argument {tok!r} (every SGLang server argument is a --flag)")
        name, eq, val = tok.partition("=")
        name = ALIASES.get(name, name)
        values = [val] if eq else []
        i += 1
        if not eq:
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        out.setdefault(name, []).append(values)
    return out


def parse_layer_ids(text: str) -> list[int]:
    """``HSX_AUX_LAYER_IDS``: comma- or space-separated; empty means the model's default."""
    parts = [p for p in text.replace(",", " ").split() if p]
    try:
        ids = [int(p) for p in parts]
    except ValueError:
        raise ArgsError(f"{dump.DUMP_LAYERS_ENV}={text!r}: layer ids must be integers") from None
    if ids:
        _check_layer_ids(ids, dump.DUMP_LAYERS_ENV)
    return ids


def _check_layer_ids(ids: list[int], where: str) -> None:
    if len(ids) != 3 or len(set(ids)) != 3 or min(ids) < 0:
        raise ArgsError(f"{where}: need three distinct non-negative aux layer ids (EAGLE-3), got {ids}")


def check_argv(argv: list[str], aux_layer_ids: list[int] | None = None) -> None:
    """Raise ArgsError listing every server argument that is missing or would spoil the dump."""
    flags = parse_flags(argv)
    problems = []

    def one(flag: str) -> list[str] | None:
        occ = flags.get(flag)
        if occ is None:
            return None
        if len(occ) > 1:
            problems.append(f"{flag} is given {len(occ)} times")
        return occ[-1]

    for flag, values in flags.items():
        if flag not in _LIST_FLAGS and len(values[-1]) > 1:
            problems.append(f"{flag} takes at most one value, got {values[-1]}")
    if one("--config") is not None:
        problems.append(
            "--config is not supported: pass the arguments on the command line so they can be checked"
        )
    if one("--model-path") in (None, []):
        problems.append("--model-path is required")
    if one("--enable-return-aux-hidden-states") is None:
        problems.append("--enable-return-aux-hidden-states is required (aux capture without a draft)")
    algo = one("--speculative-algorithm")
    if not algo or algo[0].upper() != "EAGLE3":
        problems.append("--speculative-algorithm EAGLE3 is required (it names the capture convention)")
    if one("--speculative-draft-model-path") is not None:
        problems.append("--speculative-draft-model-path must not be set (capture runs without a draft)")
    if one("--disable-radix-cache") is None:
        problems.append(
            "--disable-radix-cache is required: a prefix-cache hit skips rows (sglang #8066, #4997)"
        )
    mode = one("--return-hidden-states-mode")
    if mode is not None and mode != ["full"]:
        problems.append(f"--return-hidden-states-mode must be full (one row per prompt token), got {mode}")
    for flag in ("--pp-size", "--attn-dp-size"):
        v = one(flag)
        if v is not None and v != ["1"]:
            why = (
                "aux capture needs one pipeline stage"
                if flag == "--pp-size"
                else "DP attention is not supported: each DP group would need its own writer; not yet proven"
            )
            problems.append(f"{flag} must be 1 ({why}), got {v}")
    for flag, (_field, fine, why) in UNTESTED.items():
        v = one(flag)
        if v is None:
            continue
        if isinstance(fine, bool):
            if v in ([], ["true"], ["True"], ["1"]):
                problems.append(f"{flag} is not supported: {why}")
        elif v != [str(fine)]:
            problems.append(f"{flag} must be {fine}, got {v}: {why}")
    if one("--enable-dp-attention") is not None:
        problems.append(
            "--enable-dp-attention is not supported: each DP group holds only its own requests' rows, so "
            "each group's attention-TP rank 0 would have to write them; not yet proven"
        )
    chunk = one("--chunked-prefill-size")
    if chunk is not None and (len(chunk) != 1 or not chunk[0].lstrip("-").isdigit()):
        problems.append(f"--chunked-prefill-size needs an integer, got {chunk}")
    ids = one("--return-aux-hidden-state-layer-ids")
    if ids is not None:
        try:
            got = [int(x) for x in ids]
            _check_layer_ids(got, "--return-aux-hidden-state-layer-ids")
            if aux_layer_ids and sorted(got) != sorted(aux_layer_ids):
                problems.append(
                    f"--return-aux-hidden-state-layer-ids {got} contradicts {dump.DUMP_LAYERS_ENV}={aux_layer_ids}"
                )
        except (ValueError, ArgsError) as e:
            problems.append(
                str(e) if isinstance(e, ArgsError) else f"--return-aux-hidden-state-layer-ids: {ids}"
            )
    elif aux_layer_ids:
        problems.append(
            f"{dump.DUMP_LAYERS_ENV}={aux_layer_ids} is set but --return-aux-hidden-state-layer-ids is not"
        )
    if problems:
        raise ArgsError(
            "the SGLang arguments do not suit the hsx dump patch:\n  - " + "\n  - ".join(problems)
        )


def server_argv(
    *,
    python: str,
    model: str,
    host: str,
    port: int,
    tp_size: int,
    dp_size: int,
    mem_fraction: float,
    aux_layer_ids: list[int],
    extra_args: list[str],
    trust_remote_code: bool = False,
) -> list[str]:
    """The full command line that starts the patched server; ``extra_args`` may add SGLang flags
    but not repeat or contradict the ones this function sets (ArgsError)."""
    extra = list(extra_args)
    clash = sorted(
        set(parse_flags(extra)) & {*_OWN_FLAGS, *(f for f in REQUIRED_FLAGS if f.startswith("--"))}
    )
    if clash:
        raise ArgsError(f"[server] extra_args must not set {', '.join(clash)}: hsx sets them from the config")
    if aux_layer_ids:
        _check_layer_ids(list(aux_layer_ids), "[job] aux_layer_ids")
    server = [
        "--model-path",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--tp-size",
        str(tp_size),
        "--dp-size",
        str(dp_size),
        "--mem-fraction-static",
        str(mem_fraction),
        *REQUIRED_FLAGS,
    ]
    if aux_layer_ids:
        server += ["--return-aux-hidden-state-layer-ids", *(str(i) for i in aux_layer_ids)]
    if trust_remote_code:  # [job] trust_remote_code owns it
        server.append("--trust-remote-code")
    server += extra
    check_argv(server, list(aux_layer_ids))
    return [python, "-m", LAUNCHER, *server]
