"""Real-shaped targets (runner/data/targets.py): each family's model directory, tokenizer and chat
template runs dataset -> extraction -> verify; masks are the spans SpecForge trains on."""

from __future__ import annotations

import json
import os

import pytest

from runner.data import masks, targets
from runner.data.dataset import Dataset, load_tokenizer
from tests.conftest import runner, write_job
from tests.runner.helpers import out_dir, status, tensors, unrecorded_ckpts, verify

SAMPLES = 6
REMOTE = {"kimi-k2.5": True}
CONVERSATION = [
    {"role": "user", "content": "Is the sky blue?"},
    {"role": "assistant", "content": "Yes it is.", "reasoning_content": "The sky scatters light."},
    {"role": "user", "content": "Why?"},
    {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Short wavelengths scatter more."},
]  # fmt: skip
# What each family trains on in CONVERSATION, written down by hand from its template and
# SpecForge's rule for it (content, rendered reasoning and end of turn; never the header).
TRAINED = {
    "llama3": ["Yes it is.<|eot_id|>", "Rayleigh scattering.<|eot_id|>"],  # no reasoning in Llama-3
    "qwen3": [  # Qwen3 drops reasoning before the last user query and keeps it after
        "Yes it is.<|im_end|>\n",
        "<think>\nShort wavelengths scatter more.\n</think>\n\nRayleigh scattering.<|im_end|>\n",
    ],
    "gpt-oss": [  # harmony: the analysis channel and every channel tag after <|start|>assistant
        "<|channel|>final<|message|>Yes it is.<|end|>",
        "<|channel|>analysis<|message|>Short wavelengths scatter more.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Rayleigh scattering.<|return|>",
    ],
    # Kimi-K2.5 blanks the reasoning of every turn up to the last plain answer; <think> is trained
    "kimi-k2.5": ["<think></think>Yes it is.<|im_end|>", "<think></think>Rayleigh scattering.<|im_end|>"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    for name in targets.NAMES:
        targets.build(name, str(root / name / "model"), str(root / name / "data.jsonl"), SAMPLES, seed=3)
    return root


def _tok(built, name):
    return load_tokenizer(str(built / name / "model"), REMOTE.get(name, False))


def _runs(ids, mask):
    runs, cur = [], []
    for i, m in zip(ids, mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("name", targets.NAMES)
def test_masks_are_the_hand_written_spans(built, tmp_path, name):
    tok = _tok(built, name)
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"conversations": CONVERSATION}) + "\n")
    s = Dataset(str(data), tok, 4096).get(0)
    assert [tok.decode(r) for r in _runs(s.input_ids, s.loss_mask)] == TRAINED[name]
    assert type(tok).__name__ == ("TikTokenTokenizer" if name == "kimi-k2.5" else "TokenizersBackend")


@pytest.mark.parametrize("name", ["llama3", "qwen3", "gpt-oss"])
def test_fast_tokenizers_give_the_same_mask_both_ways(built, name):
    """Offsets (fast tokenizers) and growing prefixes (any tokenizer) agree on every row."""
    tok = _tok(built, name)
    marks = masks.markers(tok)
    rows = [json.loads(line) for line in open(built / name / "data.jsonl")] + [
        {"conversations": CONVERSATION}
    ]
    for row in rows:
        msgs = [{**t, "thinking": t.get("reasoning_content", "")} for t in row["conversations"]]
        text = masks.render(tok, msgs)
        spans = marks.spans(text)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        by_offsets = masks.offsets_mask(enc["offset_mapping"], spans)
        assert sum(by_offsets) > 0
        assert masks.prefix_mask(tok, text, len(enc["input_ids"]), spans) == by_offsets


def test_kimi_needs_trust_remote_code_and_names_the_key(built, tmp_path, demo_assets):
    conf = _job(built, tmp_path, demo_assets, "kimi-k2.5", job__trust_remote_code=False)
    p = runner("run", "--config", conf)
    assert p.returncode != 0 and "trust_remote_code" in p.stderr and "auto_map" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(out_dir(conf), "dataset.json"))


def _job(built, tmp_path, demo_assets, name, **kw):
    rows = open(built / name / "data.jsonl").readlines()
    kw.setdefault("job__trust_remote_code", REMOTE.get(name, False))
    return write_job(
        tmp_path / name, demo_assets, rows=rows, job__model=str(built / name / "model"), job__max_length=512,
        server__dtype="float32", **kw,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", targets.NAMES)
def test_each_target_runs_dataset_to_verified_output(built, tmp_path, demo_assets, name):
    """The reference backend runs the family's text model (Kimi's DeepSeek-V3 inside its
    wrapper); layers are SpecForge's for the target; files are bf16; verify passes."""
    import torch

    from runner.serve.reference_server import load_text_model

    conf = _job(built, tmp_path, demo_assets, name)
    runner("run", "--config", conf, check=True, timeout=600)
    code, rep = verify(conf)
    assert code == 0 and rep["ok"] == SAMPLES and rep["complete"], rep
    assert status(conf)["phase"] == "done" and unrecorded_ckpts(out_dir(conf)) == []
    with open(os.path.join(out_dir(conf), "dataset.json")) as f:
        desc = json.load(f)
    want_ids = {"gpt-oss": [1, 5, 9]}.get(name, [1, 3, 4])  # gpt-oss: SpecForge's configs use N-3
    assert desc["aux_layer_ids"] == want_ids and desc["dtype"] == "bfloat16", desc
    model = load_text_model(desc["model"], torch.float32, False)
    torch.set_num_threads(1)
    ds = Dataset(str(built / name / "data.jsonl"), _tok(built, name), 512)
    for i, t in tensors(conf).items():
        assert (
            t["input_ids"].tolist() == ds.get(i).input_ids and t["loss_mask"].tolist() == ds.get(i).loss_mask
        )
        assert t["hidden_state"].dtype == torch.bfloat16
        with torch.inference_mode():
            hs = model(t["input_ids"][None], output_hidden_states=True).hidden_states
        want = torch.cat([hs[k + 1] for k in desc["aux_layer_ids"]], dim=-1).to(torch.bfloat16)
        assert torch.allclose(t["aux_hidden_state"].float(), want.float(), atol=3e-2, rtol=2e-2), (name, i)
        assert torch.allclose(
            t["hidden_state"].float(), hs[-1].to(torch.bfloat16).float(), atol=3e-2, rtol=2e-2
        )


def test_wrapper_text_model_loads_every_weight_and_refuses_a_missing_one(built, tmp_path):
    """Kimi's text model gets its weights from language_model.*, none left random."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from runner.serve.reference_server import load_text_model

    src = built / "kimi-k2.5" / "model"
    weights = load_file(str(src / "model.safetensors"))
    model = load_text_model(str(src), torch.bfloat16, False)
    got = model.state_dict()
    for k in (
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
        "lm_head.weight",
    ):
        assert torch.equal(got[k], weights[f"language_model.{k}"]), k
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    del weights["language_model.model.layers.2.self_attn.o_proj.weight"]
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="o_proj"):
        load_text_model(str(broken), torch.bfloat16, False)
