"""The dump writer: the scheduler only queues; a full queue slows it down (backpressure) but
never holds it near SGLang's watchdog; every failure leaves a note with its reason."""

from __future__ import annotations

import threading

import pytest
import torch

from patches import writer as w
from patches.capture import Sample
from runner.contract import dump


def sample(rid: str, n: int = 4, h: int = 8) -> Sample:
    return Sample(rid, list(range(n)), dump.encode_mask([1] * n), [torch.ones(n, 3 * h)], [torch.ones(n, h)])


@pytest.fixture
def gate(monkeypatch):
    """Writes block until the test opens the gate."""
    opened = threading.Event()
    real = w.write_sample_files

    def slow(dump_dir, s, *name):
        assert opened.wait(30)
        return real(dump_dir, s, *name)

    monkeypatch.setattr(w, "write_sample_files", slow)
    yield opened
    opened.set()


def test_wait_limit_stays_well_below_the_watchdog():
    for watchdog in (None, 20.0, 300.0, 3600.0):
        limit = w.wait_limit(watchdog)
        assert 1.0 <= limit <= 60.0 and limit <= (watchdog or w.SGLANG_WATCHDOG_S) / 4


def test_submit_returns_before_the_write(tmp_path, gate):
    wr = w.DumpWriter(str(tmp_path), workers=1, max_pending=4, wait_limit_s=5)
    wr.submit(sample("a"))  # returns with the write still blocked
    assert not dump.poll_dump(str(tmp_path), "a")
    gate.set()
    assert wr.drain(timeout=30) and dump.poll_dump(str(tmp_path), "a")["seq"] == 4
    wr.close()


def test_the_sidecar_names_the_process_that_wrote_it(tmp_path):
    wr = w.DumpWriter(str(tmp_path), workers=1, name="TP0 pid 4242")
    wr.submit(sample("a"))
    assert wr.drain(timeout=30)
    wr.close()
    assert dump.poll_dump(str(tmp_path), "a")["writer"] == "TP0 pid 4242"


def test_full_queue_blocks_then_gives_up_with_a_note(tmp_path, gate):
    wr = w.DumpWriter(str(tmp_path), workers=1, max_pending=2, wait_limit_s=0.3)
    wr.submit(sample("a"))
    wr.submit(sample("b"))
    done = threading.Event()
    threading.Thread(target=lambda: (wr.submit(sample("c")), done.set()), daemon=True).start()
    assert not done.wait(0.1)  # backpressure: the third waits for a slot ...
    assert done.wait(10)  # ... but not for ever
    with pytest.raises(dump.DumpError, match="queue stayed full for 0.3s"):
        dump.poll_dump(str(tmp_path), "c")
    gate.set()
    assert wr.drain(timeout=30)
    assert dump.poll_dump(str(tmp_path), "a") and dump.poll_dump(str(tmp_path), "b")
    assert (wr.written, wr.failed) == (2, 1)
    wr.close()


def test_a_freed_slot_lets_the_next_sample_in(tmp_path, gate):
    wr = w.DumpWriter(str(tmp_path), workers=1, max_pending=1, wait_limit_s=30)
    wr.submit(sample("a"))
    threading.Timer(0.2, gate.set).start()
    wr.submit(sample("b"))  # waits for a's slot, then goes in
    assert wr.drain(timeout=30) and wr.written == 2 and wr.failed == 0
    wr.close()


def test_a_failed_write_leaves_its_reason(tmp_path):
    wr = w.DumpWriter(str(tmp_path), workers=1)
    bad = sample("bad")
    bad.mask_text = "1:3"  # 3 mask entries for 4 tokens
    wr.submit(bad)
    assert wr.drain(timeout=30)
    with pytest.raises(dump.DumpError, match="loss mask has 3 entries for 4 tokens"):
        dump.poll_dump(str(tmp_path), "bad")
    assert not (tmp_path / "bad.dump").exists() and not (tmp_path / "bad.json").exists()
    wr.close()


def test_next_forward_waits_for_the_copy_of_hidden_rows_only():
    """Scheduler._copy_result_to_cpu's wrapper orders the forward stream after the copy."""
    from types import SimpleNamespace

    from patches.scheduler_patch import make_order_hook

    waits = []
    event = SimpleNamespace(query=lambda: False)
    sched = SimpleNamespace(forward_stream=SimpleNamespace(wait_event=waits.append))
    calls = []
    hook = make_order_hook(lambda self, result, batch: calls.append(batch))
    result = SimpleNamespace(copy_done=event)
    hook(sched, result, SimpleNamespace(return_hidden_states=True))
    hook(sched, result, SimpleNamespace(return_hidden_states=False))  # decode, health checks: no wait
    hook(sched, SimpleNamespace(copy_done=None), SimpleNamespace(return_hidden_states=True))  # CPU: no event
    assert len(calls) == 3 and waits == [event]


def test_rows_on_the_host_are_not_copied_again():
    from patches.staging import HostStage

    aux, final = torch.ones(5, 6), torch.ones(5, 2)
    a, f, ready = HostStage().rows(aux, final)
    assert a is aux and f is final and ready is None


def test_writer_threads_yield_the_cpu_to_the_scheduler(tmp_path, monkeypatch):
    import os

    seen = []
    monkeypatch.setattr(
        w,
        "write_sample_files",
        lambda d, s, name: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())),
    )
    wr = w.DumpWriter(str(tmp_path), workers=1)
    wr.submit(sample("a"))
    assert wr.drain(timeout=30)
    wr.close()
    assert len(seen) == 1 and seen[0] >= w.WRITER_NICE


@pytest.mark.parametrize(
    "env, want", [(None, torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)]
)
def test_files_take_the_job_dtype_from_the_environment(tmp_path, monkeypatch, env, want):
    """[job] dtype reaches the SGLang writer as HSX_DUMP_DTYPE; the sidecar says what was written."""
    from runner.codec.ckpt import load_sample

    if env is None:
        monkeypatch.delenv(dump.DUMP_DTYPE_ENV, raising=False)
    else:
        monkeypatch.setenv(dump.DUMP_DTYPE_ENV, env)
    s = sample("d")
    s.final_pieces = [torch.full((4, 8), 1.5)]  # fp32 from the model
    meta = w.write_sample_files(str(tmp_path), s)
    t = load_sample(dump.data_path(str(tmp_path), "d"))
    assert t["hidden_state"].dtype == t["aux_hidden_state"].dtype == want
    assert meta["dtype"] == str(want).removeprefix("torch.")
    assert float(t["hidden_state"][0, 0, 0]) == 1.5


def test_an_unknown_dump_dtype_is_refused(monkeypatch):
    monkeypatch.setenv(dump.DUMP_DTYPE_ENV, "int8")
    with pytest.raises(dump.DumpError, match="want one of bfloat16"):
        dump.file_dtype()
