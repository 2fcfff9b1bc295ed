"""The self-test: one real request through the dump path before any sample is written, its
file checked by the same checker verify uses."""

from __future__ import annotations

import asyncio
import uuid

from ..contract import dump
from ..contract.errors import JobFailed
from ..data.dataset import Dataset, RowError

TOKENS = 64  # of the first usable row: enough to exercise every layer, quick on any model


async def self_test(server, ds: Dataset, remaining: list[int], dump_dir: str, job, hidden: int) -> int:
    """Raise JobFailed with what is wrong; return the number of tokens sent."""
    import aiohttp

    from ..codec.ckpt import check_tensors, load_sample

    sample = None
    for idx in remaining[:50]:
        try:
            sample = ds.get(idx)
            break
        except RowError:
            continue
    ids = sample.input_ids[:TOKENS] if sample else [1, 2, 3, 4]
    mask = sample.loss_mask[:TOKENS] if sample else [0, 1, 1, 1]
    rid = f"selftest-{uuid.uuid4().hex[:8]}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
            async with http.post(server.url + "/generate", json=dump.request_body(rid, ids, mask)) as r:
                if r.status != 200:
                    raise JobFailed(f"self-test failed: server answered {r.status}: {(await r.text())[:300]}")
        meta = await dump.await_dump(dump_dir, rid, job.dump_wait_s, server.alive)
        problem = check_tensors(
            load_sample(dump.data_path(dump_dir, rid)),
            hidden,
            job.dtype,
            ids,
            mantissa_bits=job.mantissa_bits,
        )
        if not problem and meta["seq"] != len(ids):
            problem = f"the sidecar says {meta['seq']} rows for {len(ids)} tokens"
        if problem:
            raise JobFailed(f"self-test failed: {problem}")
    except (aiohttp.ClientError, asyncio.TimeoutError, dump.DumpError, ValueError, KeyError) as e:
        raise JobFailed(f"self-test failed: {type(e).__name__}: {e}") from None
    finally:
        dump.remove_dump(dump_dir, rid)
    return len(ids)
