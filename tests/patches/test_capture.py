"""Capture, slicing and chunk reassembly against SGLang-shaped batches from a real tiny model,
checked row by row against one full transformers forward of each request."""

from __future__ import annotations

import logging

import pytest
import torch

from patches import capture
from patches.scheduler_patch import DumpState, make_append_hook
from runner.codec.ckpt import load_sample
from runner.contract import dump
from tests.patches import sim


@pytest.fixture(scope="module")
def model():
    return sim.tiny_model()


@pytest.fixture
def rig(tmp_path, model):
    state = DumpState(str(tmp_path), writer_rank=True)
    append = make_append_hook(sim.stock_append, lambda: state)
    forwards = {}

    def stream(_self, _reqs, _lp, _skip):  # the extractor waits for the files; so does the test
        assert state.writer.drain(timeout=30)

    def batch(pieces):
        for req, _s, _e in pieces:
            forwards.setdefault(req.rid, sim.ChunkedForward(model))
        return sim.run_batch(append, stream, pieces, forwards)

    yield state, batch, forwards
    state.writer.close()


def ids_of(seed: int, n: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 96, (n,), generator=g).tolist()


def assert_dump_matches(model, dump_dir, req, mask):
    ids = list(req.origin_input_ids)
    meta = dump.read_sidecar(dump_dir, req.rid)
    data = load_sample(dump.data_path(dump_dir, req.rid), mmap=False)
    final, aux = sim.reference(model, ids)
    assert meta["seq"] == len(ids) and meta["hidden_size"] == 64 and meta["dtype"] == "float32"
    assert data["input_ids"].tolist() == ids
    assert data["loss_mask"].tolist() == mask
    assert data["hidden_state"].shape == (1, len(ids), 64)
    assert data["aux_hidden_state"].shape == (1, len(ids), 192)
    torch.testing.assert_close(data["hidden_state"][0], final, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(data["aux_hidden_state"][0], aux, atol=1e-4, rtol=1e-4)


def test_mixed_chunked_batches_match_full_forward(rig, model, tmp_path):
    state, batch, _ = rig
    a_ids, b_ids, c_ids, d_ids = ids_of(1, 23), ids_of(2, 41), ids_of(3, 7), ids_of(4, 9)
    masks = {n: [0] * (n // 2) + [1] * (n - n // 2) for n in (23, 41, 7)}
    a = sim.make_req("s-a", a_ids, dump.encode_mask(masks[23]))
    b = sim.make_req("s-b", b_ids, dump.encode_mask(masks[41]))
    c = sim.make_req("s-c", c_ids, dump.encode_mask(masks[7]))
    plain = sim.make_req("HEALTH_CHECK_1", d_ids, None, marked=False)  # stock path, same batch
    # a chunk budget of 32 tokens: b is split across three batches, mixed with others
    rows1, _ = batch([(a, 0, 23), (b, 0, 9)])
    rows2, _ = batch([(b, 9, 25), (c, 0, 7), (plain, 0, 9)])
    assert not (tmp_path / "s-b.json").exists()  # middle chunks write nothing yet
    rows3, _ = batch([(b, 25, 41)])
    assert (rows1, rows2, rows3) == (32, 32, 16)  # the hook advanced the offset for every request
    for req, n in ((a, 23), (b, 41), (c, 7)):
        assert_dump_matches(model, str(tmp_path), req, masks[n])
    assert a.hidden_states == [] and b.hidden_states == []  # no JSON copy of dumped requests
    # the unmarked request got exactly its own rows through the stock path
    _final, aux = sim.reference(model, d_ids[:9])
    torch.testing.assert_close(torch.tensor(plain.hidden_states[0]), aux, atol=1e-4, rtol=1e-4)
    assert state.writer.written == 3 and len(state.chunks) == 0


def test_prefix_cached_rows_are_refused(rig, model, tmp_path, caplog):
    """A radix-cache hit forwards only the suffix: too few rows, so nothing is written."""
    _state, batch, forwards = rig
    ids = ids_of(5, 20)
    req = sim.make_req("s-prefix", ids, dump.encode_mask([1] * 20))
    forwards["s-prefix"] = sim.ChunkedForward(model)
    forwards["s-prefix"](ids[:8])  # the cached prefix, never seen by the hook
    with caplog.at_level(logging.ERROR, logger="hsx.dump"):
        batch([(req, 8, 20)])
    assert not (tmp_path / "s-prefix.dump").exists() and not (tmp_path / "s-prefix.json").exists()
    assert "12 rows gathered for 20 prompt tokens" in caplog.text


def test_aborted_and_retracted_requests_start_clean(rig, model, tmp_path):
    state, batch, forwards = rig
    ids = ids_of(6, 30)
    mask = [1] * 30
    req = sim.make_req("s-retry", ids, dump.encode_mask(mask))
    batch([(req, 0, 10)])  # first chunk buffered
    assert len(state.chunks) == 1
    req.is_retracted = True  # memory pressure: SGLang retracts, then prefills again from 0
    batch([(req, 10, 20)])
    assert len(state.chunks) == 0 and not (tmp_path / "s-retry.json").exists()
    req.is_retracted, req.retraction_count = False, 1
    forwards["s-retry"] = sim.ChunkedForward(model)
    batch([(req, 0, 16)])
    batch([(req, 16, 30)])
    assert_dump_matches(model, str(tmp_path), req, mask)

    gone = sim.make_req("s-abort", ids_of(7, 12), dump.encode_mask([1] * 12))
    batch([(gone, 0, 6)])
    gone.aborted = True
    batch([(gone, 6, 12)])
    assert len(state.chunks) == 0 and not (tmp_path / "s-abort.json").exists()


def test_bad_request_logs_and_keeps_the_server_going(rig, tmp_path, caplog):
    _state, batch, _ = rig
    bad_mask = sim.make_req("s-mask", ids_of(8, 10), dump.encode_mask([1] * 9))
    bad_rid = sim.make_req("../etc", ids_of(9, 5), dump.encode_mask([1] * 5))
    ok = sim.make_req("s-ok", ids_of(10, 6), dump.encode_mask([1] * 6))
    with caplog.at_level(logging.ERROR, logger="hsx.dump"):
        rows, _ = batch([(bad_mask, 0, 10), (bad_rid, 0, 5), (ok, 0, 6)])
    assert rows == 21
    assert "loss mask has 9 entries for 10 tokens" in caplog.text and "rid must match" in caplog.text
    # the bad mask's request is told why at once; a rid that cannot name a file only logs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-mask.failed", "s-ok.dump", "s-ok.json"]
    with pytest.raises(dump.DumpError, match="loss mask has 9 entries"):
        dump.poll_dump(str(tmp_path), "s-mask")


def test_other_tp_ranks_write_nothing(tmp_path, model):
    state = DumpState(str(tmp_path), writer_rank=False)
    append = make_append_hook(sim.stock_append, lambda: state)
    stream = lambda *_: None  # noqa: E731
    req = sim.make_req("s-rank1", ids_of(11, 9), dump.encode_mask([1] * 9))
    rows, _ = sim.run_batch(append, stream, [(req, 0, 9)], {"s-rank1": sim.ChunkedForward(model)})
    assert rows == 9 and req.hidden_states == [] and list(tmp_path.iterdir()) == []


def test_slice_rows_bounds():
    aux, final = torch.zeros(10, 6), torch.zeros(10, 2)
    a, f = capture.slice_rows(aux, final, 4, 6)
    assert a.shape == (6, 6) and f.shape == (6, 2)
    with pytest.raises(capture.RowMismatch, match=r"rows \[5, 11\) outside"):
        capture.slice_rows(aux, final, 5, 6)
    with pytest.raises(capture.RowMismatch, match="aux capture on"):
        capture.slice_rows(aux, None, 0, 1)


def test_aux_width_must_be_three_layers():
    s = capture.Sample("r", [1, 2], "1:2", [torch.zeros(2, 8)], [torch.zeros(2, 4)])
    with pytest.raises(capture.RowMismatch, match="aux width"):
        s.finish()
