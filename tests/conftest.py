import os

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                     reason="CUDA is not available")]),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def one_thread():
    """One torch thread for tests made of many tiny ops: on 2 oversubscribed cores OpenMP threads
    spin for seconds between them, and one thread is ~10x faster."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _measured_slow() -> frozenset[str]:
    """Node ids listed in tests/slow_tests.txt (written by scripts/slow_tests.py from a timed run)."""
    from pathlib import Path

    path = Path(__file__).with_name("slow_tests.txt")
    if not path.is_file():
        return frozenset()
    return frozenset(line.split(None, 1)[1].strip() for line in path.read_text().splitlines()
                     if line.strip() and not line.startswith("#") and len(line.split(None, 1)) == 2)


# A test module that imports this (tests/_wheel_helpers.py) needs pinned wheels: fetched once, or the test skips
# saying "needs the network". A single test that needs one (cached_wheel) is marked in its file.
WHEEL_HELPERS = ("fetched_or_skip",)


def pytest_collection_modifyitems(config, items):
    """Tests a measured run found slow get the ``slow`` marker (``pytest -m "not slow"``: a first check,
    docs/testing.md); a test marked in its own file stays marked. Tests of a module that fetches pinned
    wheels get the ``network`` marker."""
    slow = _measured_slow()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
        module = getattr(item, "module", None)
        if module is not None and any(getattr(module, name, None) is not None for name in WHEEL_HELPERS):
            item.add_marker(pytest.mark.network)


MAX_AUTO_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the README's Quickstart): one worker per core, at most :data:`MAX_AUTO_WORKERS`. Each
    worker holds its own torch, Triton and JAX (about 1 GB), and past 4 the suite's longest test (the audit
    under every CPU capability, 2-3 minutes, itself two processes at a time) bounds the wall time anyway."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_AUTO_WORKERS, cores))
