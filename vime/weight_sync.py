"""Trainer -> rollout engine weight sync: colocated hand-over and decoupled broadcast.

Both transports drive the engine through the same state machine as the production framework:
pause -> flush -> start_weight_update -> update_weights(chunk) per bucket -> finish_weight_update ->
continue. The engine promotes the new weight version only when finish succeeds; a failed update
(a tensor missing, a shape that does not fit, a transport error) leaves it on the old weights and
the old version.

* Buckets: consecutive tensors grouped until `buffer_size` bytes (--update-weight-buffer-size); a
  tensor larger than the buffer travels alone.
* Packed (--vllm-weight-sync-packed): one flat byte buffer per bucket plus metadata (name, dtype,
  shape, offset); per tensor: one message per tensor.
* Colocated (`ColocatedSync`): same process. With packing the sender reuses ONE staging buffer for
  every bucket, like the production packed producer, so a receiver that kept views instead of owning
  its storage would silently load the next bucket's bytes; the receiver clones before loading.
* Decoupled (`BroadcastSync`): the engine lives in a second process started with
  torch.multiprocessing spawn; both join a torch.distributed group on 127.0.0.1 (gloo on CPU, nccl on
  CUDA, hccl on Ascend) with rank 0 = trainer, rank 1 = engine; rank 0 hosts the rendezvous store on
  a port the OS assigns (no race for a "free" port). Per update rank 0 broadcasts the
  metadata first, then the tensors; rank 1 always drains every bucket (so an error on its side cannot
  deadlock the sender), then reports the outcome. Collectives carry a bounded timeout and the engine
  process is always joined, and killed if it does not exit.

Flush policy (`should_flush`): the engine's cache is flushed on the first publication and then every
`flush_every` syncs, as in production. Fault knobs (`SyncFault`) corrupt or drop one tensor in
transit so gates can prove they notice.
"""

from __future__ import annotations

import datetime as _dt
import time
import traceback
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

DEFAULT_BUFFER_SIZE = 512 * 1024 * 1024  # production default: 512 MiB

NamedTensors = Iterable[tuple[str, torch.Tensor]]


class WeightSyncError(RuntimeError):
    """The update did not complete; the engine kept its previous weights and version."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: str  # "float32", "bfloat16", ...
    shape: tuple[int, ...]
    offset: int = 0  # byte offset inside the packed bucket buffer
    nbytes: int = 0

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


@dataclass(frozen=True)
class SyncFault:
    """Inject a transport fault: `corrupt` perturbs one element of `name` (or the first tensor);
    `drop` leaves `name` out of the update altogether."""

    kind: str  # "corrupt" | "drop"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("corrupt", "drop"):
            raise ValueError(f"unknown sync fault {self.kind!r}; use 'corrupt' or 'drop'")


@dataclass
class SyncReport:
    transport: str  # "colocated" | "broadcast"
    packed: bool
    version: int  # engine version after the update (unchanged on failure)
    ok: bool
    buckets: int = 0
    tensors: int = 0
    bytes: int = 0
    seconds: float = 0.0
    names: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "packed": self.packed,
            "version": self.version,
            "ok": self.ok,
            "buckets": self.buckets,
            "tensors": self.tensors,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "error": self.error,
        }


# --------------------------------------------------------------------------- bucketing and packing


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def bucketize(named: NamedTensors, buffer_size: int = DEFAULT_BUFFER_SIZE) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group consecutive tensors into buckets of at most `buffer_size` bytes (big tensors go alone)."""
    if buffer_size <= 0:
        raise ValueError(f"update-weight buffer size must be positive, got {buffer_size}")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > buffer_size:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def bucket_metadata(bucket: Sequence[tuple[str, torch.Tensor]]) -> list[TensorMeta]:
    metas, offset = [], 0
    for name, t in bucket:
        nbytes = t.numel() * t.element_size()
        metas.append(TensorMeta(name, _dtype_name(t.dtype), tuple(t.shape), offset, nbytes))
        offset += nbytes
    return metas


def pack_into(bucket: Sequence[tuple[str, torch.Tensor]], out: torch.Tensor | None = None) -> tuple[torch.Tensor, list[TensorMeta]]:
    """Copy a bucket's bytes into one flat uint8 buffer (reusing `out` when it is large enough)."""
    metas = bucket_metadata(bucket)
    total = sum(m.nbytes for m in metas)
    device = bucket[0][1].device if bucket else torch.device("cpu")
    if out is None or out.numel() < total or out.device != device:
        out = torch.empty(total, dtype=torch.uint8, device=device)
    flat = out[:total]
    for (_, t), m in zip(bucket, metas):
        flat[m.offset : m.offset + m.nbytes].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
    return flat, metas


def unpack(flat: torch.Tensor, metas: Sequence[TensorMeta]) -> list[tuple[str, torch.Tensor]]:
    """Views into `flat` (no copies): whoever keeps them must clone."""
    return [(m.name, flat[m.offset : m.offset + m.nbytes].view(m.torch_dtype).reshape(m.shape)) for m in metas]


def _apply_fault(bucket: list[tuple[str, torch.Tensor]], fault: SyncFault | None, state: dict) -> list[tuple[str, torch.Tensor]]:
    """Return the bucket as it will travel; the fault fires once per update."""
    if fault is None or state.get("fired"):
        return bucket
    target = fault.name
    out = []
    for name, t in bucket:
        hit = not state.get("fired") and (target is None or name == target) and t.is_floating_point()
        if hit and fault.kind == "drop":
            state["fired"] = name
            continue
        if hit and fault.kind == "corrupt":
            state["fired"] = name
            t = t.detach().clone()
            t.view(-1)[0] += 1.0 + t.view(-1)[0].abs()
        out.append((name, t))
    return out


# --------------------------------------------------------------------------- engine state machine


def _version_of(engine: Any) -> int:
    """The engine's weight version; 0 while it holds checkpoint weights only."""
    return int(engine.weight_version or 0)


def should_flush(pushes_done: int, flush_every: int) -> bool:
    """Production flush policy: always on the first publication, then every `flush_every` syncs."""
    return pushes_done == 0 or (flush_every > 0 and pushes_done % flush_every == 0)


def _begin(engine: Any, flush: bool = True) -> None:
    engine.pause_generation()
    if flush:
        engine.flush_cache()
    engine.start_weight_update(is_checkpoint_format=True)


def _end(engine: Any, version: int) -> int:
    try:
        engine.finish_weight_update(version)
    finally:
        engine.continue_generation()
    return _version_of(engine)


def _abort(engine: Any) -> None:
    """Leave the engine usable on its old weights after a failed update."""
    abort = getattr(engine, "abort_weight_update", None)
    if abort is not None:
        abort()
    engine.continue_generation()


# --------------------------------------------------------------------------- colocated


class ColocatedSync:
    """In-process hand-over (the production IPC path, minus the IPC handles)."""

    transport = "colocated"

    def __init__(
        self, engine: Any, *, packed: bool = True, buffer_size: int = DEFAULT_BUFFER_SIZE, flush_every: int = 1
    ) -> None:
        self.engine = engine
        self.packed = packed
        self.buffer_size = buffer_size
        self.flush_every = flush_every
        self.pushes = 0
        self._staging: torch.Tensor | None = None  # reused across buckets and updates, on purpose
        engine.init_weight_transfer_engine({"init_info": {}})  # one-time, like the production IPC path

    def push(self, named: NamedTensors, *, fault: SyncFault | None = None) -> SyncReport:
        engine = self.engine
        old = _version_of(engine)
        report = SyncReport(self.transport, self.packed, old, ok=False)
        t0 = time.perf_counter()
        fault_state: dict = {}
        try:
            _begin(engine, should_flush(self.pushes, self.flush_every))
            for bucket in bucketize(named, self.buffer_size):
                bucket = _apply_fault(bucket, fault, fault_state)
                if self.packed:
                    self._staging, metas = pack_into(bucket, self._staging)
                    chunk = unpack(self._staging, metas)
                else:
                    chunk = [(n, t.detach()) for n, t in bucket]
                # The receiver owns its storage: the staging buffer is overwritten by the next bucket.
                engine.update_weights({n: t.clone() for n, t in chunk})
                report.buckets += 1
                report.tensors += len(chunk)
                report.bytes += sum(t.numel() * t.element_size() for _, t in chunk)
                report.names += [n for n, _ in chunk]
            report.version = _end(engine, old + 1)
            report.ok = True
            self.pushes += 1
        except Exception as exc:
            report.error = f"{type(exc).__name__}: {exc}"
            _abort(engine)
            report.version = _version_of(engine)
        report.seconds = time.perf_counter() - t0
        return report


# --------------------------------------------------------------------------- decoupled (broadcast)


@dataclass(frozen=True)
class EngineSpec:
    """How rank 1 builds its engine: `factory(*args, **kwargs)` must be importable (spawn pickles it)."""

    factory: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def _engine_main(
    index: int, spec: EngineSpec, host: str, port: int, backend: str, timeout_s: float, device_kind: str, threads: int
) -> None:
    """Rank 1: build the engine, then serve commands from rank 0 until "stop"."""
    import torch.distributed as dist

    torch.set_num_threads(threads)  # the trainer's setting; more threads than cores stall both processes
    if device_kind != "cpu":
        from vime.platform import get_platform

        # rank 1 takes the second device when there is one (the trainer keeps device 0)
        get_platform(device_kind).set_device(1 if _device_count(device_kind) > 1 else 0)
    timeout = _dt.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, 2, False, timeout=timeout)  # rank 0 hosts it
    dist.init_process_group(backend, store=store, rank=1, world_size=2, timeout=timeout)
    try:
        try:
            engine = spec.factory(*spec.args, **spec.kwargs)
            engine.init_weight_transfer_engine(
                {"master_address": host, "master_port": port, "rank_offset": 1, "world_size": 2, "backend": backend}
            )
        except Exception as exc:
            _reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
            return
        _reply({"ok": True, "version": _version_of(engine)})
        while True:
            cmd = _receive_command()
            op = cmd["op"]
            if op == "stop":
                break
            if op == "update":
                _reply(_serve_update(engine, cmd, device_kind))
            elif op not in ("call", "apply"):
                _reply({"ok": False, "error": f"unknown command {op!r}"})
            else:
                try:
                    fn = getattr(engine, cmd["method"]) if op == "call" else partial(cmd["fn"], engine)
                    value = fn(*cmd.get("args", ()), **cmd.get("kwargs", {}))
                    _reply({"ok": True, "value": _to_cpu(value)})
                except Exception as exc:
                    _reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    finally:
        dist.destroy_process_group()


def _device_count(kind: str) -> int:
    mod = getattr(torch, kind, None)
    return int(mod.device_count()) if mod is not None else 0


def _comm_device(device_kind: str) -> torch.device:
    if device_kind == "cpu":
        return torch.device("cpu")
    mod = getattr(torch, device_kind)
    return torch.device(device_kind, mod.current_device())


def _serve_update(engine: Any, cmd: dict, device_kind: str) -> dict:
    import torch.distributed as dist

    error = ""
    started = False
    device = _comm_device(device_kind)
    old = _version_of(engine)
    try:
        _begin(engine, cmd.get("flush", True))
        started = True
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    for metas in cmd["buckets"]:
        # Receive every bucket even after a failure: the sender is blocked in the same collectives.
        if cmd["packed"]:
            flat = torch.empty(sum(m.nbytes for m in metas), dtype=torch.uint8, device=device)
            dist.broadcast(flat, src=0)
            chunk = unpack(flat, metas)
        else:
            chunk = []
            for m in metas:
                t = torch.empty(m.shape, dtype=m.torch_dtype, device=device)
                dist.broadcast(t, src=0)
                chunk.append((m.name, t))
        if not error:
            try:
                engine.update_weights({n: t.clone() for n, t in chunk})
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
    if not error:
        try:
            version = _end(engine, cmd["version"])
            return {"ok": True, "version": version}
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    if started:
        try:
            _abort(engine)
        except Exception as exc:  # report both; the original error stays first
            error += f"; abort failed: {type(exc).__name__}: {exc}"
    return {"ok": False, "version": _version_of(engine) if started else old, "error": error}


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _send_command(cmd: dict) -> None:
    import torch.distributed as dist

    dist.broadcast_object_list([cmd], src=0)


def _receive_command() -> dict:
    import torch.distributed as dist

    box = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def _reply(obj: dict) -> None:
    import torch.distributed as dist

    dist.broadcast_object_list([obj], src=1)


def _await_reply() -> dict:
    import torch.distributed as dist

    box = [None]
    dist.broadcast_object_list(box, src=1)
    return box[0]  # type: ignore[return-value]


class BroadcastSync:
    """Decoupled sync to an engine in a spawned process. Use as a context manager:

        with BroadcastSync(EngineSpec(make_engine, (hf_dir,)), packed=True) as sync:
            report = sync.push(iter_hf_weights(model))
            version = sync.call("get_weight_version")
    """

    transport = "broadcast"

    def __init__(
        self,
        spec: EngineSpec,
        *,
        packed: bool = True,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        device_kind: str | None = None,
        timeout_s: float = 60.0,
        host: str = "127.0.0.1",
        flush_every: int = 1,
    ) -> None:
        from vime.platform import get_platform

        platform = get_platform(device_kind)
        self.spec = spec
        self.packed = packed
        self.buffer_size = buffer_size
        self.device_kind = platform.kind
        self.backend = platform.comm_backend
        self.timeout_s = timeout_s
        self.host = host
        self.flush_every = flush_every
        self.pushes = 0
        self._context: Any = None
        self._busy = False  # inside a command/reply exchange with the engine process
        self._version = 0
        self._device = torch.device("cpu")

    # ----- lifecycle
    def start(self) -> "BroadcastSync":
        import torch.distributed as dist
        import torch.multiprocessing as mp

        if dist.is_available() and dist.is_initialized():
            raise WeightSyncError(
                "a torch.distributed process group is already active in this process; "
                "the broadcast transport needs its own (destroy the other group first)"
            )
        timeout = _dt.timedelta(seconds=self.timeout_s)
        # Rank 0 hosts the rendezvous store on a port the OS picks, so no other process can take the
        # port between choosing and binding it; the engine process connects to it as a client.
        store = dist.TCPStore(self.host, 0, 2, True, timeout=timeout, wait_for_workers=False)
        self._context = mp.start_processes(
            _engine_main,
            args=(self.spec, self.host, store.port, self.backend, self.timeout_s, self.device_kind, torch.get_num_threads()),
            nprocs=1,
            join=False,
            start_method="spawn",
        )
        try:
            dist.init_process_group(self.backend, store=store, rank=0, world_size=2, timeout=timeout)
            if self.device_kind != "cpu":
                self._device = _comm_device(self.device_kind)
            ready = _await_reply()
        except BaseException:
            self._teardown(graceful=False)
            raise
        if not ready.get("ok"):
            self._teardown(graceful=True)  # the engine process exits on its own after reporting
            raise WeightSyncError(f"engine process failed to start: {ready.get('error')}\n{ready.get('traceback', '')}")
        self._version = int(ready.get("version", 0))
        return self

    def __enter__(self) -> "BroadcastSync":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._context is None:
            return
        alive = all(p.is_alive() for p in self._context.processes)
        # Interrupted mid-exchange (or engine gone): a "stop" would not be understood; kill instead.
        graceful = alive and not self._busy
        if graceful:
            try:
                _send_command({"op": "stop"})
            except Exception:
                graceful = False
        self._teardown(graceful=graceful)

    def _teardown(self, graceful: bool) -> None:
        import torch.distributed as dist

        ctx, self._context = self._context, None
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            if ctx is not None:
                _join_or_kill(ctx, 10.0 if graceful else 0.5)

    @property
    def version(self) -> int:
        """The engine's weight version as of the last completed push (0 = checkpoint weights only)."""
        return self._version

    # ----- commands
    def _ensure_alive(self) -> None:
        """Fail fast instead of waiting out a collective timeout when the engine process is gone."""
        if self._context is None:
            raise WeightSyncError("BroadcastSync is not started")
        dead = [p for p in self._context.processes if not p.is_alive()]
        if dead:
            code = dead[0].exitcode
            self._teardown(graceful=False)
            raise WeightSyncError(f"the engine process exited (exit code {code}); start a new BroadcastSync")

    def _exchange(self, cmd: dict, body: Callable[[], None] | None = None) -> dict:
        """One command -> (optional tensor traffic) -> reply round trip."""
        self._ensure_alive()
        self._busy = True
        _send_command(cmd)
        if body is not None:
            body()
        out = _await_reply()
        self._busy = False
        return out

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run `engine.<method>(*args, **kwargs)` in the engine process and return its (CPU) result."""
        out = self._exchange({"op": "call", "method": method, "args": args, "kwargs": kwargs})
        if not out["ok"]:
            raise WeightSyncError(f"engine.{method} failed in the engine process: {out['error']}\n{out.get('traceback', '')}")
        return out["value"]

    def apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(engine, *args, **kwargs)` in the engine process (`fn` must be importable: spawn pickles
        it by name), e.g. to install a worker extension there."""
        out = self._exchange({"op": "apply", "fn": fn, "args": args, "kwargs": kwargs})
        if not out["ok"]:
            raise WeightSyncError(f"{getattr(fn, '__name__', fn)} failed in the engine process: {out['error']}\n{out.get('traceback', '')}")
        return out["value"]

    def push(self, named: NamedTensors, *, fault: SyncFault | None = None) -> SyncReport:
        import torch.distributed as dist

        t0 = time.perf_counter()
        fault_state: dict = {}
        buckets = [_apply_fault(b, fault, fault_state) for b in bucketize(named, self.buffer_size)]
        metas = [bucket_metadata(b) for b in buckets]
        report = SyncReport(self.transport, self.packed, self._version, ok=False, buckets=len(buckets))

        def send_buckets() -> None:
            staging: torch.Tensor | None = None
            for bucket in buckets:
                if self.packed:
                    on_dev = [(n, t.detach().to(self._device)) for n, t in bucket]
                    staging, _ = pack_into(on_dev, staging)
                    dist.broadcast(staging, src=0)
                else:
                    for _, t in bucket:
                        dist.broadcast(t.detach().to(self._device).contiguous(), src=0)
                report.tensors += len(bucket)
                report.bytes += sum(t.numel() * t.element_size() for _, t in bucket)
                report.names += [n for n, _ in bucket]

        # Metadata first: the engine allocates its receive buffers from it; then the tensors.
        out = self._exchange(
            {"op": "update", "version": self._version + 1, "packed": self.packed, "buckets": metas,
             "flush": should_flush(self.pushes, self.flush_every)},
            send_buckets,
        )
        report.seconds = time.perf_counter() - t0
        report.ok = bool(out["ok"])
        report.version = int(out["version"])
        report.error = out.get("error", "")
        self._version = report.version
        self.pushes += int(report.ok)
        return report


def _join_or_kill(ctx: Any, timeout: float) -> None:
    """Join the spawned engine process; kill it if it outlives `timeout`."""
    deadline = time.monotonic() + timeout
    procs = list(ctx.processes)
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)

