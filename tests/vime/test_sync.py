"""Weight sync: bucketing, packing, the colocated hand-over and the two-process broadcast."""

from __future__ import annotations

import pytest
import torch

from vime.weight_sync import (
    BroadcastSync,
    ColocatedSync,
    EngineSpec,
    SyncFault,
    bucket_metadata,
    bucketize,
    pack_into,
    unpack,
)


def _named():
    return [
        ("a", torch.arange(10, dtype=torch.float32)),  # 40 bytes
        ("b", torch.ones(3, 4, dtype=torch.bfloat16)),  # 24 bytes
        ("c", torch.arange(6, dtype=torch.int64).reshape(2, 3)),  # 48 bytes
        ("d", torch.full((2,), 7.0, dtype=torch.float16)),  # 4 bytes
    ]


def test_bucketize_respects_buffer_size():
    sizes = [[n for n, _ in b] for b in bucketize(_named(), buffer_size=64)]
    assert sizes == [["a", "b"], ["c", "d"]]
    assert [[n for n, _ in b] for b in bucketize(_named(), buffer_size=8)] == [["a"], ["b"], ["c"], ["d"]]
    assert len(list(bucketize(_named(), buffer_size=1 << 20))) == 1
    with pytest.raises(ValueError, match="positive"):
        list(bucketize(_named(), buffer_size=0))


def test_pack_unpack_round_trip_mixed_dtypes():
    bucket = _named()
    flat, metas = pack_into(bucket)
    assert flat.dtype == torch.uint8 and flat.numel() == sum(m.nbytes for m in metas) == 116
    assert [m.offset for m in metas] == [0, 40, 64, 112]
    for (name, t), (n2, back) in zip(bucket, unpack(flat, metas)):
        assert name == n2 and back.dtype == t.dtype and torch.equal(back, t)
    assert metas == bucket_metadata(bucket)


def test_pack_reuses_a_large_enough_staging_buffer():
    staging = torch.empty(1024, dtype=torch.uint8)
    flat, _ = pack_into(_named()[:1], staging)
    assert flat.data_ptr() == staging.data_ptr()


# ----------------------------------------------------------------------------- colocated


@pytest.fixture()
def world(tmp_path):
    from vime.convert import iter_hf_weights, save_train_model_hf
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine

    model = TrainLM(tiny_config(seed=9))
    save_train_model_hf(tmp_path / "ckpt", model)
    engine = RolloutEngine.from_hf(tmp_path / "ckpt")
    return model, engine, lambda: iter_hf_weights(model), tmp_path / "ckpt"


def _perturb(model, scale=0.01):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale)


@pytest.mark.parametrize("packed", [True, False])
def test_colocated_sync_matches_trainer_and_bumps_version(world, packed):
    model, engine, weights, _ = world
    sync = ColocatedSync(engine, packed=packed, buffer_size=64 * 1024)
    engine.check_weights("snapshot")
    first = sync.push(weights())
    assert first.ok and first.version == 1 and first.buckets > 1
    engine.check_weights("compare")  # checkpoint -> train -> HF round trip is exact
    _perturb(model)
    report = sync.push(weights())
    assert report.ok and report.version == 2
    assert sorted(report.names) == sorted(engine.named_weights())
    for name, t in weights():
        assert torch.equal(engine.named_weights()[name], t), name
    assert engine.events.count("start_weight_update") == 2 and "continue" in engine.events


def test_colocated_receiver_owns_its_storage(world):
    """Packed buckets share one staging buffer: keeping views would load later buckets' bytes."""
    model, engine, weights, _ = world
    sync = ColocatedSync(engine, packed=True, buffer_size=64 * 1024)
    kept = {}
    native = engine.update_weights

    def deferred(chunk):  # a loader that defers use, like layerwise reload
        kept.update(chunk)
        return native(chunk)

    engine.update_weights = deferred
    assert sync.push(weights()).ok
    staging_ptr = sync._staging.data_ptr()
    assert all(t.untyped_storage().data_ptr() != staging_ptr for t in kept.values())
    for name, t in weights():
        assert torch.equal(kept[name], t)


def test_colocated_failed_update_keeps_old_weights_and_version(world):
    model, engine, weights, _ = world
    sync = ColocatedSync(engine, packed=True, buffer_size=64 * 1024)
    assert sync.push(weights()).ok
    before = {n: t.clone() for n, t in engine.named_weights().items()}
    _perturb(model)
    report = sync.push(weights(), fault=SyncFault("drop", "lm_head.weight"))
    assert not report.ok and report.version == 1 and "not updated" in report.error
    assert engine.get_weight_version() == 1 and not engine.paused
    assert all(torch.equal(before[n], t) for n, t in engine.named_weights().items())


def test_corrupted_sync_is_caught_by_fingerprints(world):
    model, engine, weights, _ = world
    sync = ColocatedSync(engine, packed=False)
    engine.check_weights("snapshot")
    assert sync.push(weights(), fault=SyncFault("corrupt", "model.norm.weight")).ok
    with pytest.raises(AssertionError, match="changed"):
        engine.check_weights("compare")


def test_sync_fault_validation():
    with pytest.raises(ValueError, match="unknown sync fault"):
        SyncFault("flip")


# ----------------------------------------------------------------------------- broadcast (two processes)


def _engine_version(engine):
    return engine.weight_version


def test_broadcast_packed_and_per_tensor(world):
    from vime.rollout.engine import build_engine

    model, _, weights, ckpt = world
    spec = EngineSpec(build_engine, (), {"config": {}, "hf_dir": str(ckpt)})
    with BroadcastSync(spec, packed=True, buffer_size=64 * 1024, device_kind="cpu", timeout_s=60) as sync:
        assert sync.backend == "gloo" and sync.version == 0
        sync.call("check_weights", "snapshot")
        first = sync.push(weights())
        assert first.ok and first.version == 1 and first.buckets > 1
        sync.call("check_weights", "compare")
        _perturb(model)
        sync.packed = False
        second = sync.push(weights())
        assert second.ok and second.version == 2 and sync.apply(_engine_version) == 2
        remote = sync.call("named_weights")
        assert all(torch.equal(remote[n], t) for n, t in weights())
        # failure inside the engine process: the sender is not blocked, old version kept
        _perturb(model)
        failed = sync.push(weights(), fault=SyncFault("drop"))
        assert not failed.ok and failed.version == 2 and "not updated" in failed.error
        assert sync.call("get_weight_version") == 2
        after = sync.call("named_weights")
        assert all(torch.equal(after[n], remote[n]) for n in remote)
        with pytest.raises(Exception, match="no_such_verb"):
            sync.call("no_such_verb")
        context = sync._context
    assert sync._context is None
    assert all(not p.is_alive() for p in context.processes)


def _failing_factory():
    raise RuntimeError("engine cannot start")


def test_broadcast_engine_start_failure_is_reported_and_joined():
    sync = BroadcastSync(EngineSpec(_failing_factory), device_kind="cpu", timeout_s=30)
    with pytest.raises(Exception, match="engine cannot start"):
        sync.start()
    assert sync._context is None
    import torch.distributed as dist

    assert not dist.is_initialized()


def test_broadcast_notices_a_dead_engine_process(world):
    from vime.rollout.engine import build_engine

    _, _, weights, ckpt = world
    sync = BroadcastSync(EngineSpec(build_engine, (), {"config": {}, "hf_dir": str(ckpt)}), device_kind="cpu", timeout_s=20)
    sync.start()
    engine_process = sync._context.processes[0]
    engine_process.kill()  # e.g. the OOM killer
    engine_process.join(10)
    with pytest.raises(Exception, match="engine process exited"):
        sync.push(weights())  # fails at once instead of waiting out the collective timeout
    assert sync._context is None
    sync.close()  # idempotent


def test_flush_policy_first_then_every_n(world):
    from vime.weight_sync import should_flush

    assert [should_flush(i, 3) for i in range(7)] == [True, False, False, True, False, False, True]
    assert should_flush(0, 0) and not should_flush(5, 0)  # 0 = only the first publication
    model, engine, weights, _ = world
    sync = ColocatedSync(engine, flush_every=2)
    for _ in range(4):
        assert sync.push(weights()).ok
    assert engine.flush_count == 2  # pushes 0 and 2
