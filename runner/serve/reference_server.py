"""The reference backend: a transformers model behind the same HTTP endpoints and dump
behaviour as the patched SGLang server (see runner/contract/dump.py).

One forward at a time on one thread (deterministic for a seed on CPU: no batching, no
padding); dumps are written on a second thread so the next forward overlaps the write.
Run: ``python -m runner.serve.reference_server --model DIR --port P --dump-dir D``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import inspect
import json
import logging
import os
import sys
import time

from aiohttp import web

from ..contract import dump
from ..data import layers
from ..data.demo_assets import PACE_ENV

log = logging.getLogger("hsx.reference")
READY_LINE = "The server is fired up and ready to roll!"  # same line SGLang prints


# A wrapper's text_config may name a model_type transformers knows by another name.
TEXT_MODEL_TYPES = {"kimi_k2": "deepseek_v3"}


def load_text_model(model_dir: str, dtype, trust_remote_code: bool):
    """The causal LM in ``model_dir``. A multimodal wrapper (Kimi-K2.5: a ``text_config`` and
    weights under ``language_model.``) gives its text model, built by transformers itself, so
    the wrapper's own remote code (and its vision tower) is never run."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    text = cfg.get("text_config")
    if not text:
        return AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=dtype, local_files_only=True, trust_remote_code=trust_remote_code
        )
    text = {k: v for k, v in text.items() if k not in ("auto_map", "quantization_config")}
    kind = text.pop("model_type")
    config = AutoConfig.for_model(TEXT_MODEL_TYPES.get(kind, kind), **text)
    # from_pretrained, not load_state_dict: it also converts checkpoint layouts (per-expert MoE
    # weights); the vision tower's weights are left unread.
    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, config=config, dtype=dtype, local_files_only=True, key_mapping={r"^language_model\.": ""},
        output_loading_info=True,
    )  # fmt: skip
    if info["missing_keys"]:  # transformers would leave them random
        raise ValueError(f"{model_dir}: the text model lacks weights {sorted(info['missing_keys'])[:5]}")
    return model


class Model:
    def __init__(
        self,
        model_dir: str,
        device: str,
        dtype: str,
        threads: int,
        aux_ids: list[int],
        trust_remote_code=False,
    ):
        import torch

        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(True, warn_only=True)
        info = layers.model_info(model_dir)
        self.aux_ids = layers.resolve_aux_ids(aux_ids, info["num_layers"])
        log.info("Load weight begin. model=%s device=%s dtype=%s", model_dir, device, dtype)
        self.torch = torch
        self.model = load_text_model(model_dir, getattr(torch, dtype), trust_remote_code).to(device)
        self.model.eval()
        self.device = device
        self.hidden_size = info["hidden_size"]
        self.vocab_size = self.model.config.vocab_size
        self.dtype = dtype
        self._captured: dict[str, object] = {}
        base = self.model.model
        for i in self.aux_ids:  # input of layer i+1 == output of layer i
            base.layers[i + 1].register_forward_pre_hook(self._pre_hook(i), with_kwargs=True)
        base.norm.register_forward_hook(self._norm_hook)
        log.info(
            "Load weight end. type=%s layers=%d aux=%s",
            info["architecture"],
            info["num_layers"],
            self.aux_ids,
        )

    def _pre_hook(self, i: int):
        def hook(_mod, args, kwargs):
            hs = args[0] if args else kwargs["hidden_states"]
            self._captured[f"aux{i}"] = hs.detach()

        return hook

    def _norm_hook(self, _mod, _args, out):
        self._captured["final"] = out.detach()

    def forward(self, input_ids: list[int]):
        torch = self.torch
        self._captured.clear()
        with torch.inference_mode():
            ids = torch.tensor([input_ids], dtype=torch.long, device=self.device)
            out = self.model.model(input_ids=ids, use_cache=False)
            last = out.last_hidden_state[:, -1]
            next_id = int(self.model.lm_head(last).argmax(-1).item())
        aux = torch.cat([self._captured[f"aux{i}"] for i in self.aux_ids], dim=-1)
        return self._captured["final"].cpu(), aux.cpu(), next_id

    def stop_ids(self) -> set[int]:
        """The end-of-sequence ids of the model's config and generation config (SGLang's stops)."""
        out: set[int] = set()
        for c in (self.model.config, getattr(self.model, "generation_config", None)):
            eos = getattr(c, "eos_token_id", None)
            out |= set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        return out

    def generate(self, input_ids: list[int], p: Sampling) -> tuple[list[int], dict]:
        """An answer token by token with the KV cache: greedy at temperature 0, else sampled
        from the top_k / top_p filtered distribution with a generator seeded per request, so one
        request's answer is the same on every run. Ends at an end-of-sequence id or the length."""
        torch = self.torch
        gen = torch.Generator(device="cpu").manual_seed(p.seed) if p.temperature > 0 else None
        stops, out, past = self.stop_ids(), [], None
        key = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        x = torch.tensor([input_ids], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            for _ in range(p.max_new_tokens):
                o = self.model(input_ids=x, use_cache=True, **{key: past})  # transformers renamed it
                past, logits = getattr(o, key), o.logits[0, -1].float().cpu()
                tok = p.pick(torch, logits, gen)
                out.append(tok)
                if tok in stops:
                    return out, {"type": "stop", "matched": tok}
                x = torch.tensor([[tok]], dtype=torch.long, device=self.device)
        return out, {"type": "length", "length": len(out)}


class Sampling:
    """A request's sampling_params as SGLang reads them (top_k -1: off; 1 or temperature 0: greedy)."""

    def __init__(self, d: dict):
        self.max_new_tokens = int(d.get("max_new_tokens", 128))
        self.temperature = float(d.get("temperature", 1.0))
        self.top_p = float(d.get("top_p", 1.0))
        self.top_k = int(d.get("top_k", -1))
        self.seed = int(d.get("sampling_seed") or 0)
        if self.max_new_tokens < 0 or self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("max_new_tokens and temperature must be at least 0, top_p in (0, 1]")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}.")

    def pick(self, torch, logits, gen) -> int:
        if self.temperature == 0 or self.top_k == 1:
            return int(logits.argmax().item())
        logits = logits / self.temperature
        if self.top_k > 0:
            kth = torch.topk(logits, min(self.top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, -1)
        if self.top_p < 1:
            sorted_p, order = probs.sort(descending=True)
            cut = sorted_p.cumsum(-1) - sorted_p > self.top_p  # keep the smallest set reaching top_p
            probs = probs.scatter(0, order, sorted_p.masked_fill(cut, 0.0))
        return int(torch.multinomial(probs, 1, generator=gen).item())


def _bad(msg: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": msg}}, status=status)


def make_app(model: Model, dump_dir: str, pace_s: float = 0.0) -> web.Application:
    import torch

    from ..codec.ckpt import write_sample

    fwd_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forward")
    io_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="dump")

    file_dtype = dump.file_dtype() or model.dtype
    compress = dump.file_storage() == "ckpt.gz"
    bits = dump.file_mantissa_bits()

    def write(rid: str, ids: list[int], mask: list[int], final, aux) -> dict:
        nbytes, checksum = write_sample(
            dump.data_path(dump_dir, rid),
            input_ids=torch.tensor(ids, dtype=torch.int64),
            loss_mask=torch.tensor(mask, dtype=torch.int64),
            hidden_state=final,
            aux_hidden_state=aux,
            dtype=file_dtype,
            compress=compress,
            mantissa_bits=bits,
        )
        meta = {
            "seq": len(ids),
            "bytes": nbytes,
            "checksum": checksum,
            "hidden_size": model.hidden_size,
            "dtype": file_dtype,
            "writer": f"reference pid {os.getpid()}",
        }
        dump.write_sidecar(dump_dir, rid, meta)
        return meta

    async def generate(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _bad("body is not JSON")
        if not isinstance(body, dict):
            return _bad("body must be an object")
        ids = body.get("input_ids")
        if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
            return _bad("input_ids must be a non-empty list of integers")
        if not all(0 <= t < model.vocab_size for t in ids):
            return _bad("input_ids outside the vocabulary")
        params = body.get("sampling_params") or {}
        custom = params.get("custom_params") or {}
        rid = body.get("rid") or "anon"
        want_dump = bool(custom.get(dump.CUSTOM_KEY))
        try:
            dump.check_rid(rid)
            mask = dump.decode_mask(custom.get(dump.MASK_KEY, ""), len(ids)) if want_dump else None
        except dump.DumpError as e:
            return _bad(str(e))
        loop = asyncio.get_running_loop()
        began = time.monotonic()
        if not want_dump:  # a plain request: the answer, as SGLang's /generate gives it
            try:
                sampling = Sampling(params)
            except (TypeError, ValueError) as e:
                return _bad(str(e))
            out, finish = await loop.run_in_executor(fwd_pool, model.generate, ids, sampling)
            if pace_s:
                await asyncio.sleep(max(0.0, pace_s - (time.monotonic() - began)))
            meta = {"id": rid, "prompt_tokens": len(ids), "completion_tokens": len(out), "cached_tokens": 0,
                    "finish_reason": finish}  # fmt: skip
            return web.json_response({"output_ids": out, "meta_info": meta})
        final, aux, next_id = await loop.run_in_executor(fwd_pool, model.forward, ids)
        meta = {"id": rid, "prompt_tokens": len(ids), "cached_tokens": 0, "finish_reason": {"type": "length"}}
        if want_dump:
            meta["hsx_dump"] = await loop.run_in_executor(
                io_pool, write, rid, ids, mask, final[0:1], aux[0:1]
            )
        if pace_s:
            await asyncio.sleep(max(0.0, pace_s - (time.monotonic() - began)))
        return web.json_response({"output_ids": [next_id], "meta_info": meta})

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def server_info(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                "backend": "reference",
                "version": "hsx-reference",
                "hidden_size": model.hidden_size,
                "aux_layer_ids": model.aux_ids,
                "dtype": model.dtype,
                "dump_dir": dump_dir,
            }
        )

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(
        [
            web.post("/generate", generate),
            web.get("/health", health),
            web.get("/health_generate", health),
            web.get("/ready", health),
            web.get("/server_info", server_info),
        ]
    )
    return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m runner.serve.reference_server")
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--dump-dir", default=os.environ.get(dump.DUMP_DIR_ENV, ""))
    p.add_argument("--aux-layer-ids", default=os.environ.get(dump.DUMP_LAYERS_ENV, ""))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--pace-s", type=float, default=float(os.environ.get(PACE_ENV) or 0.0))
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="[%(asctime)s] %(message)s")
    if not a.dump_dir:
        p.error(f"--dump-dir or {dump.DUMP_DIR_ENV} is required")
    os.makedirs(a.dump_dir, exist_ok=True)
    aux = [int(x) for x in a.aux_layer_ids.split(",") if x.strip()]
    model = Model(a.model, a.device, a.dtype, a.threads, aux, a.trust_remote_code)
    if a.pace_s:
        log.info("paced: an answer no sooner than %gs after its request", a.pace_s)
    app = make_app(model, a.dump_dir, max(0.0, a.pace_s))

    async def on_startup(_app):
        log.info(READY_LINE)

    app.on_startup.append(on_startup)
    # A stop is SIGTERM: a request still in flight is the runner's to retry, so no grace for it.
    web.run_app(
        app, host=a.host, port=a.port, print=None, access_log=None, handle_signals=True, shutdown_timeout=1.0
    )
    # Every dump is written and renamed before its answer; the interpreter's own teardown of torch
    # (seconds of garbage collection) is all that is left, and the runner's stop waits for it.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
