"""bench/regenerate.py at a tiny size on the reference backend: hsx and the bare client send the
same requests (the same completion tokens, greedy), rounds alternate, the work dir goes away."""

from __future__ import annotations

import json

import pytest

from bench import regenerate as br


@pytest.mark.slow  # a reference server importing torch
def test_hsx_and_the_bare_client_regenerate_the_same_tokens(tmp_path, capsys):
    argv = ["--backend", "reference", "--rows", "3", "--max-new-tokens", "4", "--repeats", "2"]
    assert br.main([*argv, "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    report = json.loads(out[-1])
    assert report["backend"] == "reference" and set(report["ratio"]) == {"bare"}
    runs = report["runs"]
    assert len(runs["hsx"]) == len(runs["bare"]) == 2
    tokens = {r["tokens"] for k in ("hsx", "bare") for r in runs[k]}
    assert len(tokens) == 1 and tokens.pop() > 0
    assert all(r > 0 for r in report["round_ratios"]["bare"])
    assert [line.split()[2] for line in out if line.startswith("round")] == ["hsx", "bare", "bare", "hsx"]
    assert list(tmp_path.iterdir()) == []


def test_specforge_needs_sglang_and_its_sibling(tmp_path):
    script = tmp_path / "regenerate_train_data.py"
    script.write_text("")
    with pytest.raises(SystemExit, match="2"):
        br.main(["--backend", "reference", "--specforge-script", str(script)])
    with pytest.raises(SystemExit, match=br.SIBLING):
        br.specforge_copy(str(script), str(tmp_path / "into"))
    (tmp_path / br.SIBLING).write_text("")
    copied = br.specforge_copy(str(script), str(tmp_path / "into"))
    assert sorted(p.name for p in (tmp_path / "into").iterdir()) == sorted([script.name, br.SIBLING])
    assert copied == str(tmp_path / "into" / script.name)
