"""Sender side of a weight update, in process: the state machine vime runs for every sync.

pause -> flush (by policy) -> start_weight_update -> chunks of at most `buffer_bytes` -> finish(version)
-> continue. On any error the update is aborted and generation resumed; the engine keeps its old
weights and version (it only promotes on a complete finish).

`DirectHandOver` is the fallback `--colocate` transport used while `vime.weight_sync` is absent: it
passes the trainer's tensors (views) and relies on the engine cloning on receive.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator

import torch


def bucket_by_bytes(named: Iterable[tuple[str, torch.Tensor]], buffer_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group tensors into chunks of at most buffer_bytes (a tensor larger than that travels alone)."""
    chunk: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named:
        nbytes = t.numel() * t.element_size()
        if chunk and size + nbytes > buffer_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, t))
        size += nbytes
    if chunk:
        yield chunk


class DirectHandOver:
    """In-process transport: hands tensors straight to the engine (which clones them)."""

    name = "direct"

    def __init__(self, engine, buffer_bytes: int = 512 << 20, flush_every: int = 1):
        self.engine = engine
        self.buffer_bytes = buffer_bytes
        self.flush_every = max(1, flush_every)
        self.syncs = 0
        engine.init_weight_transfer_engine({"backend": "direct"})

    def update_weights(self, named: Iterable[tuple[str, torch.Tensor]], version: int) -> dict:
        engine = self.engine
        start = time.perf_counter()
        nbytes = 0
        engine.pause_generation()
        try:
            if self.syncs == 0 or self.syncs % self.flush_every == 0:
                engine.flush_cache()
            engine.start_weight_update(is_checkpoint_format=True)
            try:
                for chunk in bucket_by_bytes(named, self.buffer_bytes):
                    nbytes += sum(t.numel() * t.element_size() for _, t in chunk)
                    engine.update_weights(chunk)
                engine.finish_weight_update(version)
            except BaseException:
                if engine._pending is not None:
                    engine.abort_weight_update()
                raise
        finally:
            engine.continue_generation()
        self.syncs += 1
        return {"bytes": nbytes, "seconds": time.perf_counter() - start, "version": version, "transport": self.name}

    def close(self) -> None:
        pass
