"""`train export` (runner/train/exporter.py): the draft's layer ids checked, and how SGLang serves it."""

from __future__ import annotations

import json
import os

import pytest

from runner.train import exporter, record, runspec

from .units import _cfg, _ckpt, _fake_python, _model

EXPORTER = """import json, os, sys
def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    out = argv[argv.index("--output-dir") + 1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"eagle_config": {"eagle_aux_hidden_state_layer_ids": IDS}}, f)
if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("ids", [[1, 3, 4], [0, 1, 2]])
def test_export_checks_the_drafts_layer_ids_and_says_how_sglang_serves_it(tmp_path, ids):
    _model(tmp_path)
    py = _fake_python(tmp_path, "sf", "0.2.0", EXPORTER.replace("IDS", repr(ids)))
    cfg = _cfg(tmp_path, python=py)
    (tmp_path / "out" / "dataset.json").write_text(json.dumps({"aux_layer_ids": [1, 3, 4]}))
    root = runspec.run_dir(cfg)
    _ckpt(tmp_path / "out-train" / "output", 4, ["training_state.pt", "training_state_rank0.pt"])
    record.Record(
        root, {"phase": "done", "run_id": "hsx-eagle3", "output_dir": f"{root}/output", "world": 1}
    ).write()
    rep = exporter.export(cfg)
    out = os.path.join(root, "export")
    if ids != [1, 3, 4]:  # the export's own config names other layers: refused loudly, files kept
        assert rep.code == 1 and rep.text.startswith(
            "export REFUSED: the exported draft's layer ids [0, 1, 2]"
        )
        assert "differ from the extraction's [1, 3, 4]" in rep.text and "do not serve it" in rep.text
        assert not rep.obj["ok"] and os.path.exists(os.path.join(out, "config.json"))
        return
    model = str(tmp_path / "model")
    assert rep.code == 0 and rep.obj["flags"] == [
        "--model-path", model, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", out,
        "--speculative-num-steps", "5", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
    ]  # fmt: skip
    assert rep.obj["message"] == (
        f"exported step 4 to {out}; serve it with: python -m sglang.launch_server --model-path {model} "
        f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {out} --speculative-num-steps 5 "
        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8 (`/measure start` measures it)"
    )
