"""Rows still on the GPU (overlap schedule off) leave it once per batch, without blocking the
scheduler: one copy of the batch's aux and final-norm rows into pinned host memory on a side
stream; the writer thread waits for it, not the scheduler.

Ordering, explicitly: the side stream starts after the forward that produced the rows, and the
next forward waits for the copy, because those rows may live in a CUDA-graph buffer that the
next replay rewrites. The same holds for SGLang's own copy stream (see ``make_order_hook``).
"""

from __future__ import annotations

import weakref


class HostStage:
    def __init__(self):
        self._src = None  # weak reference to the batch tensor last staged
        self._staged = None
        self._stream = None

    def rows(self, aux, final):
        """(aux, final, ready): host copies of the whole batch's rows and the event that says
        they are complete (None when the rows are already on the host, or missing: the caller's
        slice_rows says so)."""
        if aux is None or final is None or aux.device.type == "cpu":
            return aux, final, None
        if self._src is not None and self._src() is aux:
            return self._staged
        import torch

        dev = torch.get_device_module(aux.device)
        if self._stream is None:
            self._stream = dev.Stream(device=aux.device)
        producer = dev.current_stream(aux.device)
        self._stream.wait_stream(producer)
        with dev.stream(self._stream):
            host = []
            for t in (aux, final):
                h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                h.copy_(t, non_blocking=True)
                t.record_stream(self._stream)
                host.append(h)
            ready = dev.Event()
            ready.record(self._stream)
        producer.wait_event(ready)
        self._src = weakref.ref(aux)
        self._staged = (host[0], host[1], ready)
        return self._staged
