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


def pytest_collection_modifyitems(config, items):
    """Tests a measured run found slow get the ``slow`` marker (``pytest -m "not slow"``: the README's
    first check); a test marked in its own file stays marked."""
    slow = _measured_slow()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
