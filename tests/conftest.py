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
