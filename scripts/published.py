"""Writes runner/assets/published.json, the published figures "/measure status" sets a draft's
beside, from SpecForge's SpecBundle data (docs/spec_bundle/public/raw_data/data.json in
sgl-project/SpecForge): each target served by SGLang with and without its EAGLE-3 draft, per
benchmark, batch size and setting. Run by hand when SpecBundle publishes more:
    python scripts/published.py PATH/TO/data.json COMMIT > runner/assets/published.json"""

from __future__ import annotations

import json
import sys

NAME = "SpecForge's SpecBundle"  # each row's source, as the status names it
URL = "https://github.com/sgl-project/SpecForge/blob/{commit}/docs/spec_bundle/public/raw_data/data.json"


def rows(data: dict) -> list[dict]:
    out = []
    for target, benches in data.items():
        for bench, b in benches.items():
            for r in b["results"]:
                alone = [
                    m for m in r["metrics"] if m["accept_length"] == 1.0 and "eagle" in m["Name"].lower()
                ]
                if len(alone) != 1:
                    raise SystemExit(f"{target} {bench}: no single run without the draft")
                for m in r["metrics"]:
                    if m is alone[0]:
                        continue
                    out.append({
                        "target": target, "benchmark": bench, "batch": r["batch_size"],
                        "setting": f"{r['steps']}/{r['topk']}/{r['num_draft_tokens']}", "draft": m["Name"],
                        "accept_length": round(m["accept_length"], 2),
                        "speedup": round(m["output_throughput"] / alone[0]["output_throughput"], 2),
                    })  # fmt: skip
    return out


def main(path: str, commit: str) -> None:
    with open(path, encoding="utf-8") as f:
        figures = rows(json.load(f))
    source = (
        f"{NAME}, {URL.format(commit=commit)}: SGLang, each target with and "
        "without its EAGLE-3 draft; accept length in SGLang's units, speedup in output tokens/s"
    )
    lines = ",\n".join("    " + json.dumps(r) for r in figures)
    head = f'  "name": {json.dumps(NAME)},\n  "source": {json.dumps(source)},\n'
    sys.stdout.write(f'{{\n{head}  "figures": [\n{lines}\n  ]\n}}\n')


if __name__ == "__main__":
    main(*sys.argv[1:3])
