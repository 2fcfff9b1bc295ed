"""conftest's write_config, which the tests write their configs with: what it writes reads back
as the very values given, whatever a string holds."""

from __future__ import annotations

import math

import pytest

from tests.conftest import read_config as _read
from tests.conftest import write_config


def test_every_kind_of_value_reads_back_as_given(tmp_path):
    odd = 'a "quoted" \\ back\\slash\nnew line\ttab \x00\x1f\x7f \u00e9 \U0001f600'
    job = {"name": odd, "retries": 3, "rate_window_s": 0.3, "tiny": 1e-05, "big": 10**18, "neg": -2,
           "on": True, "off": False, "args": ["--x", "1", 2, 1.5, True, ["nested"]], "empty": []}  # fmt: skip
    server = {"env": {"A": "1", "with space": odd}, "port": 30001}
    path = write_config(
        tmp_path / "hsx.toml",
        job=job,
        server=server,
        **{"train.specforge.training": {"ttt_length": 3}},
        remote={"runner": tmp_path / "bin" / "hsx-runner", "dotted.key": "v"},
    )
    assert path == str(tmp_path / "hsx.toml")
    got = _read(path)
    assert list(got) == ["job", "server", "train", "remote"]
    assert got["job"] == job and got["server"] == server
    assert got["train"] == {"specforge": {"training": {"ttt_length": 3}}}
    assert got["remote"] == {"runner": str(tmp_path / "bin" / "hsx-runner"), "dotted.key": "v"}


def test_floats_beyond_the_plain_ones_and_values_toml_has_no_word_for(tmp_path):
    path = write_config(tmp_path / "a.toml", job={"a": math.inf, "b": -math.inf, "c": math.nan, "d": 1e300})
    got = _read(path)
    assert got["job"]["a"] == math.inf and got["job"]["b"] == -math.inf and math.isnan(got["job"]["c"])
    assert got["job"]["d"] == 1e300
    for bad in (None, object(), {1, 2}):
        with pytest.raises(TypeError, match="no TOML value"):
            write_config(tmp_path / "b.toml", job={"x": bad})
