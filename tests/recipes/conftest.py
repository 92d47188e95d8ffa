"""Recipe tests run in-process on one intra-op thread (subprocesses get OMP_NUM_THREADS=1):
on a shared 2-core machine, 2-thread torch ops can stall badly."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
