"""gcpause.paused: no collection while paused; on exit the survivors skip the young-generation
pass (they go to the oldest generation), the collector is on again, and cycles made while paused
are still collected."""

import gc
import weakref

from porter.gcpause import paused as gc_paused


class _Node:
    pass


def test_survivors_skip_the_young_generation_and_cycles_are_still_collected():
    assert gc.isenabled()
    gc.collect()
    with gc_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(50_000)]  # many more than the young generation's threshold
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        probe = weakref.ref(a)
        del a, b
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # nothing left frozen
    # A plain gc.enable() would leave ~50,000 objects counted in generation 0.
    assert gc.get_count()[0] < 1_000
    assert probe() is not None  # not collected yet: it sits in the oldest generation
    gc.collect()
    assert probe() is None
    assert len(kept) == 50_000


def test_nested_pause_leaves_the_collector_off_until_the_outer_one_ends():
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
