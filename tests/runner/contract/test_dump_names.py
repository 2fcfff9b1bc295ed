"""The dump contract's names and numbers are ASCII, matched whole: a request id ending in a
newline names no file, and a mask run in other digits is a DumpError, not a crash."""

import pytest

from runner.contract import dump


@pytest.mark.parametrize("rid", ["abc\n", "abc\nxyz", "r\u0663", ""])
def test_a_request_id_is_matched_whole(rid, tmp_path):
    with pytest.raises(dump.DumpError):
        dump.data_path(str(tmp_path), rid)


@pytest.mark.parametrize("text", ["1:\u00b2", "1:\u0663", "0:2,1:\uff11"])
def test_a_mask_run_in_other_digits_is_a_dump_error(text):
    with pytest.raises(dump.DumpError, match="bad loss-mask run"):
        dump.decode_mask(text, 3)


def test_mantissa_bits_from_the_environment_are_ascii(monkeypatch):
    monkeypatch.setenv(dump.DUMP_MANTISSA_ENV, "\u0663")
    with pytest.raises(dump.DumpError):
        dump.file_mantissa_bits()
