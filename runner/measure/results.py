"""results.jsonl: one line per request, appended whole and fsynced, so that a kill -9 at any
moment loses at most the request in flight and never counts one twice: a resume reads the file
and plans only what is missing. Every figure is computed from these lines."""

from __future__ import annotations

import json
import os
import statistics

from ..contract.atomic import read_jsonl, torn
from ..contract.measure import NONE, SettingFigures

KEYS = ("setting", "prompt", "output_ids", "meta_info", "latency_s")
MAX_LINE = 1 << 28  # a long answer's line with its top logprobs runs past read_jsonl's 1 MiB default


def append(path: str, row: dict) -> None:
    line = json.dumps(row, separators=(",", ":")) + "\n"
    with open(path, "ab") as f:
        if torn(path):  # a writer killed mid-line: end it, so it stays one bad line
            f.write(b"\n")
        f.write(line.encode())
        f.flush()
        os.fsync(f.fileno())


def read(path: str) -> dict[tuple[str, int], dict]:
    """The requests done, by (setting, prompt): the first whole line of each, an answer or the
    request's own failure (``error``: never sent again); a torn or broken line is passed over, and
    its request measured again."""
    done: dict[tuple[str, int], dict] = {}
    for row in read_jsonl(path, max_line=MAX_LINE):  # its own writer's lines: one skipped is asked again
        if not isinstance(row.get("prompt"), int) or "setting" not in row:
            continue
        if isinstance(row.get("error"), str) or (
            all(k in row for k in KEYS) and isinstance(row["meta_info"], dict)
        ):
            done.setdefault((str(row["setting"]), row["prompt"]), row)
    return done


def _sum(rows: list[dict], key: str) -> int:
    return sum(int(r["meta_info"].get(key) or 0) for r in rows)


def _histogram(rows: list[dict]) -> list[int] | None:
    out: list[int] = []
    for r in rows:
        h = r["meta_info"].get("spec_correct_drafts_histogram")
        if isinstance(h, list):
            out += [0] * (len(h) - len(out))
            for i, n in enumerate(h):
                out[i] += int(n)
    return out or None


def _first_difference(a: list, b: list) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # a shorter output differs where it ends
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def margin(alone: dict, at: int) -> float | None:
    """How far apart the target alone's two likeliest tokens were at output position ``at``
    (its ``top_logprobs``: a (logprob, token id, text) per candidate), None where unknown."""
    top = alone.get("top_logprobs")
    try:
        first, second = top[at][0][0], top[at][1][0]
        return round(abs(float(first) - float(second)), 6)
    except (TypeError, IndexError, KeyError, ValueError):
        return None


def figures(done: dict[tuple[str, int], dict], settings: list[str]) -> list[SettingFigures]:
    """Per setting (the target alone first): SGLang's accept length (completion tokens over
    verify steps, summed over its requests), accept rate, histogram, tokens/s, and which outputs
    differ from the target alone's."""
    answered = {k: r for k, r in done.items() if "error" not in r}  # a failed request has no figures
    base = {p: r for (s, p), r in answered.items() if s == NONE}
    base_rate = None
    out = []
    for setting in [NONE, *settings]:
        rows = [r for (s, _), r in sorted(answered.items()) if s == setting]
        if not rows:
            out.append(SettingFigures(setting))
            continue
        tokens = _sum(rows, "completion_tokens")
        latency = sum(float(r["latency_s"]) for r in rows)
        rate = tokens / latency if latency > 0 else None
        kw: dict = {"requests": len(rows), "completion_tokens": tokens, "tokens_per_s": rate}
        if setting == NONE:
            base_rate = rate
        else:
            verify, proposed = _sum(rows, "spec_verify_ct"), _sum(rows, "spec_num_proposed_drafts")
            kw["verify_ct"] = verify
            kw["accept_length"] = tokens / verify if verify else None
            kw["accept_rate"] = _sum(rows, "spec_num_correct_drafts") / proposed if proposed else None
            kw["histogram"] = _histogram(rows)
            kw["speedup"] = rate / base_rate if rate and base_rate else None
            pairs = [(r["prompt"], _first_difference(r["output_ids"], base[r["prompt"]]["output_ids"]))
                     for r in rows if r["prompt"] in base]  # fmt: skip
            kw["same"] = sum(1 for _, d in pairs if d is None)
            kw["differ"] = [[p, d, margin(base[p], d)] for p, d in pairs if d is not None]
        ttft = [float(r["ttft_s"]) for r in rows if isinstance(r.get("ttft_s"), (int, float))]
        kw["ttft_s"] = statistics.median(ttft) if ttft else None
        out.append(SettingFigures(setting, **kw))
    return out
