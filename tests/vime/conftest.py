"""Shared test setup for the vime runtime tests."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_cpu_thread():
    # The tiny models gain nothing from intra-op threads, and on a busy host extra threads make runs
    # ~10x slower. Bit-exact comparisons within a test hold for any fixed thread count.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
