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
