"""`one_thread`: an autouse fixture that runs each test of a module with one torch thread.

The quick tier runs two pytest workers on the project's two cores, and torch starts one OpenMP
thread per core in each: the tiny models' many small operations then spend most of their CPU
with threads waiting for one another. Measured on 40 AdamW steps of a 2-layer, 32-wide model
(batches of 8 x 48 tokens), busy 2-core machine: 5.3-5.5 CPU-s with 2 threads, 1.1-1.2 with one.
A result depends on the thread count only through the order of float sums, which every test's
tolerance allows for, and both sides of a comparison inside a test run with the same count.

A module takes it by naming it (`one_thread = torch_threads.one_thread`): a fixture is found by
the name it has in the module, and an assignment, unlike an unused import, stays.
"""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
