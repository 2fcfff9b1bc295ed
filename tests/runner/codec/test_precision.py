import math

import pytest
import torch

from runner.codec import precision
from runner.codec.precision import relative_error, round_mantissa


def bf16(*patterns: int) -> torch.Tensor:
    """bf16 tensor from 16-bit patterns written as unsigned hex."""
    return torch.tensor([p - 0x10000 if p >= 0x8000 else p for p in patterns], dtype=torch.int16).view(
        torch.bfloat16
    )


def patterns(t: torch.Tensor) -> list[int]:
    return [v & 0xFFFF for v in t.reshape(-1).view(torch.int16).tolist()]


# (input, bits, expected), worked by hand. At 4 bits the low 3 of the 7 mantissa bits go: 0b100
# is exactly half an ulp of the result.
CASES = [
    (0x3F80, 4, 0x3F80),  # 1.0 is exact
    (0x3F84, 4, 0x3F80),  # 1.03125: a tie, last kept bit 0 -> down to even, 1.0
    (0x3F8C, 4, 0x3F90),  # 1.09375: a tie, last kept bit 1 -> up to even, 1.125
    (0x3F85, 4, 0x3F88),  # just above half -> up
    (0x3F83, 4, 0x3F80),  # just below half -> down
    (0x3FFF, 4, 0x4000),  # 1.9921875: the carry leaves the mantissa, exponent + 1: 2.0
    (0x3FFC, 4, 0x4000),  # 1.96875: a tie with last kept bit 1, carried into the exponent
    (0xBF8C, 4, 0xBF90),  # the sign is kept: -1.09375 -> -1.125
    (0xBF84, 4, 0xBF80),  # -1.03125 -> -1.0
    (0x0000, 4, 0x0000),  # +0
    (0x8000, 4, 0x8000),  # -0 stays -0
    (0x8001, 4, 0x8000),  # the smallest negative subnormal rounds to -0, not +0
    (0x0004, 4, 0x0000),  # subnormal tie, last kept bit 0 -> 0
    (0x000C, 4, 0x0010),  # subnormal tie, last kept bit 1 -> up
    (0x007F, 4, 0x0080),  # the largest subnormal carries into the smallest normal
    (0x4049, 3, 0x4050),  # 3.140625 at 3 bits (drop 4, half 0b1000): above half -> 3.25
    (0x4048, 3, 0x4040),  # 3.125: a tie, last kept bit 0 -> 3.0
    (0x3FC0, 0, 0x4000),  # 1.5 at 0 bits: a tie between 1 (odd exponent) and 2 (even) -> 2
    (0x4040, 0, 0x4000),  # 3.0 at 0 bits: between 2 (even exponent) and 4 -> 2
    (0x4060, 0, 0x4080),  # 3.5 at 0 bits: above half -> 4
    (0x3F81, 6, 0x3F80),  # 1 + 1/128 at 6 bits (drop 1): a tie, last kept bit 0 -> down
    (0x3F83, 6, 0x3F84),  # 1 + 3/128: a tie, last kept bit 1 -> up
]


@pytest.mark.parametrize("src, bits, want", CASES)
def test_hand_worked_patterns(src, bits, want):
    out = round_mantissa(bf16(src), bits)
    assert out.dtype == torch.bfloat16
    assert patterns(out) == [want], f"{src:#06x} at {bits} bits: {patterns(out)[0]:#06x}, want {want:#06x}"


def test_hand_worked_cases_in_one_tensor():
    for bits in (0, 3, 4, 6):
        cases = [(s, w) for s, b, w in CASES if b == bits]
        out = round_mantissa(bf16(*(s for s, _ in cases)), bits)
        assert patterns(out) == [w for _, w in cases]


@pytest.mark.parametrize("bits", range(8))
def test_inf_and_nan_come_back_bit_for_bit(bits):
    special = [0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF, 0xFFFF, 0x7FA5]  # inf, -inf, nans
    assert patterns(round_mantissa(bf16(*special), bits)) == special


def test_overflow_saturates_at_the_largest_finite_value_of_the_precision():
    # 0x7F7F = 3.3895e38, the largest finite bf16: at 4 bits it is above the last tie (0x7F7C)
    # and IEEE rounding would give inf (0x7F80); saturation gives 0x7F78 = 3.3561e38.
    out = round_mantissa(bf16(0x7F7F, 0x7F7C, 0x7F7B, 0xFF7F, 0xFF7C), 4)
    assert patterns(out) == [0x7F78, 0x7F78, 0x7F78, 0xFF78, 0xFF78]
    assert bool(torch.isfinite(out).all())
    assert float(out[0]) == 1.9375 * 2.0**127
    assert patterns(round_mantissa(bf16(0x7F7F, 0x7F70), 0)) == [0x7F00, 0x7F00]  # 2**127


def test_bits_7_returns_the_tensor_itself():
    t = torch.randn(3, 5).to(torch.bfloat16)
    assert round_mantissa(t, 7) is t


@pytest.mark.parametrize("bits", [-1, 8, 16])
def test_bits_outside_0_to_7_are_refused(bits):
    with pytest.raises(ValueError, match="0..7"):
        round_mantissa(bf16(0x3F80), bits)


def test_other_inputs_are_refused():
    with pytest.raises(TypeError, match="bfloat16"):
        round_mantissa(torch.ones(3), 4)
    with pytest.raises(TypeError, match="int"):
        round_mantissa(bf16(0x3F80), 4.0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        round_mantissa([1.0], 4)


def test_shape_and_layout():
    t = torch.randn(2, 6, 10).to(torch.bfloat16)
    view = t[:, ::2, 1:]  # not contiguous
    out = round_mantissa(view, 3)
    assert out.shape == view.shape and out.dtype == torch.bfloat16
    assert patterns(out) == patterns(round_mantissa(view.contiguous(), 3))
    assert patterns(round_mantissa(torch.empty(0, 4, dtype=torch.bfloat16), 3)) == []


@pytest.mark.parametrize("bits", range(7))
def test_every_finite_bf16_goes_to_the_nearest_value_ties_to_even(bits, monkeypatch):
    """All 65,536 patterns against a reference that works on values, not bits: the nearest
    finite bf16 whose low 7 - bits mantissa bits are zero, a tie to the one whose last kept
    bit is 0, past the largest one saturated. Blocks of 1,000 exercise the block loop."""
    monkeypatch.setattr(precision, "_BLOCK", 1000)
    drop = 7 - bits
    mags = torch.arange(0x7F80, dtype=torch.int32)  # every finite non-negative magnitude
    grid_bits = mags[mags % (1 << drop) == 0]
    grid = grid_bits.to(torch.int16).view(torch.bfloat16).to(torch.float64)
    values = mags.to(torch.int16).view(torch.bfloat16).to(torch.float64)
    hi = torch.searchsorted(grid, values).clamp(max=len(grid) - 1)  # first grid value >= v
    lo = torch.where(grid[hi] > values, hi - 1, hi)
    down, up = values - grid[lo], grid[hi] - values
    odd_lo = (grid_bits[lo] >> drop) & 1 == 1
    pick_hi = (up < down) | ((up == down) & odd_lo)
    want = torch.where(pick_hi, grid_bits[hi], grid_bits[lo])
    want = torch.where(values > grid[-1], grid_bits[-1], want)  # saturation
    want = want.tolist()

    every = torch.arange(-0x8000, 0x8000, dtype=torch.int32).to(torch.int16)
    out = patterns(round_mantissa(every.view(torch.bfloat16), bits))
    src = [v & 0xFFFF for v in every.tolist()]
    for s, o in zip(src, out, strict=True):
        mag = s & 0x7FFF
        expect = s if mag >= 0x7F80 else (s & 0x8000) | want[mag]
        assert o == expect, f"{s:#06x} at {bits} bits: {o:#06x}, want {expect:#06x}"


def test_relative_error_hand_worked():
    orig = torch.tensor([3.0, 4.0], dtype=torch.bfloat16)
    assert relative_error(orig, torch.tensor([3.0, 4.5], dtype=torch.bfloat16)) == 0.1
    assert relative_error(orig, orig) == 0.0
    zero = torch.zeros(2, dtype=torch.bfloat16)
    assert relative_error(zero, zero) == 0.0
    assert relative_error(zero, orig) == math.inf
    with pytest.raises(ValueError, match="shapes"):
        relative_error(orig, torch.zeros(3, dtype=torch.bfloat16))


def test_relative_error_accumulates_in_float64_over_blocks(monkeypatch):
    g = torch.Generator().manual_seed(0)
    orig = (torch.randn(37, 11, generator=g) * 100).to(torch.bfloat16)
    rounded = round_mantissa(orig, 3)
    o, r = orig.double(), rounded.double()
    exact = float(torch.linalg.vector_norm(r - o) / torch.linalg.vector_norm(o))
    whole = relative_error(orig, rounded)
    monkeypatch.setattr(precision, "_CHUNK", 10)  # 41 blocks, the last one short
    assert relative_error(orig, rounded) == pytest.approx(exact, rel=1e-12)
    assert whole == pytest.approx(exact, rel=1e-12)
    assert 0.01 < whole < 0.04  # 3 mantissa bits: at most 2**-4 per value
