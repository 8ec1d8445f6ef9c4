"""Address checks of the Triton model: every load and store of an interpreted kernel checked against the
tensor argument its pointer was derived from, the same verdict on every run, and an audit row that says so.

The interval arithmetic is checked against enumeration (every byte of every element of small views); the
tiny kernels of tests/_addresses_check.py run in child processes (TRITON_INTERPRET=1 must precede triton's
import), each case several times per process and in two processes (two heaps)."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import _paths
import numpy as np
import pytest
import torch

from attnum.audit.harness import raised
from attnum.audit.report import STYLE
from attnum.audit.verdict import FAILING, OUT_OF_BOUNDS, SEVERITY, STATUSES
from attnum.kernels.triton import addresses, extents
from attnum.sandbox.server import remote_exception

CHECK = _paths.TESTS / "_addresses_check.py"
ATTENTION = _paths.TESTS / "_addresses_attention.py"


def needs_triton():
    if importlib.util.find_spec("triton") is None:  # find_spec: triton must not be imported here
        pytest.skip("triton is not installed (pip install 'attnum[triton]')")


def views():
    """(id, tensor): contiguous, with gaps (a [blocks, 2, P] cache's K half, every other column), permuted,
    expanded (stride 0), offset into its storage, empty; 1-, 2- and 4-byte elements."""
    base = torch.arange(48, dtype=torch.float32)
    return [
        ("contiguous", base[:12].view(3, 4)),
        ("kv[:, 0]", base[:24].view(3, 2, 4)[:, 0]),
        ("every-other-column", base[:24].view(4, 6)[:, ::2]),
        ("transposed", base[:12].view(3, 4).t()),
        ("expanded", base[:4].view(1, 4).expand(3, 4)),
        ("offset", base[5:17].view(3, 4)),
        ("empty", base[:0]),
        ("fp16-gapped", torch.zeros(3, 2, 5, dtype=torch.float16)[:, 1, 1:4]),
        ("int8-gapped", torch.zeros(4, 3, dtype=torch.int8)[:, :2]),
    ]


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize(("name", "t"), views(), ids=[n for n, _ in views()])
def test_inside_is_the_enumeration_of_the_views_bytes(name, t, width):
    e = extents.extent("x", t)
    lo = t.data_ptr()
    span = max(e.hi - e.lo, 1)
    addr = np.arange(lo - 2 * width - 3, lo + span + 2 * width + 3, dtype=np.int64).astype(np.uint64)  # every byte
    want = extents.inside_reference(e, addr, width)
    got = extents.inside(e, addr, width)
    assert np.array_equal(got, want), (name, width, addr[got != want].astype(np.int64) - lo)
    if t.numel() and width <= t.element_size():  # the comparison above saw accesses inside, too
        assert want.any()


def test_an_extent_has_gaps_only_where_the_view_skips_elements():
    base = torch.zeros(3, 2, 4)
    assert extents.extent("k", base.view(6, 4)).dims is None
    assert extents.extent("k", base.view(6, 4).t()).dims is None  # permuted: every byte still an element's
    kv = extents.extent("k", base[:, 0])  # (3, 4), rows 32 bytes apart, 16 bytes each
    assert kv.dims == ((3, 32), (4, 4)) and kv.hi - kv.lo == 2 * 32 + 16 and kv.what == "(3, 4) float32"
    empty = extents.extent("k", base[:0])
    assert empty.hi == empty.lo


def test_an_access_outside_is_its_own_failing_status_and_crosses_the_kernel_server():
    exc = addresses.OutOfBounds("kernel k read past the end of K by 12 elements (24 bytes): 12 of 64 lanes, "
                                "program (0, 0, 0); K is (1, 1, 4, 16) float16")
    v = raised(exc)
    assert v.status == OUT_OF_BOUNDS and not v.passed and "past the end of K by 12 elements" in v.note
    assert OUT_OF_BOUNDS in FAILING and SEVERITY[OUT_OF_BOUNDS] > SEVERITY["fail"]
    back = remote_exception("OutOfBounds", str(exc))  # what the parent raises for the child's exception
    assert isinstance(back, addresses.OutOfBounds) and raised(back).status == OUT_OF_BOUNDS
    refused = remote_exception("Unchecked", "kernel k read through an address not derived from any tensor")
    assert raised(refused).status == "unsupported"


def test_the_audit_table_has_a_style_for_every_status():
    assert set(STATUSES) <= set(STYLE)  # "unwritten" had none: a probe row with it raised KeyError


def run_check(numerics):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(CHECK), numerics], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


# case -> (exception type or "pass", text the message must hold)
EXPECTED = {
    "inside": ("pass", ""),
    "read 1 past the end": ("OutOfBounds", "kernel copy read past the end of x_ptr by 1 element (4 bytes): 1 of 11 lanes"),
    "past the end only in masked lanes": ("pass", ""),
    "wild addresses in masked lanes": ("pass", ""),
    "store past the end": ("OutOfBounds", "kernel copy wrote past the end of out_ptr by 2 elements (8 bytes)"),
    "scalar load past the end": ("OutOfBounds", "read past the end of x_ptr by 1 element (4 bytes): 1 of 1 lane"),
    "scalar load before the start": ("OutOfBounds", "read before the start of x_ptr by 1 element (4 bytes)"),
    "into another argument's storage": ("OutOfBounds", "kernel hop read past the end of a_ptr by 16 elements"),
    "into a separate tensor": ("OutOfBounds", "kernel hop read "),
    "gap of a view": ("OutOfBounds", "read x_ptr between its elements (a gap of the view, 16 bytes from its start)"),
    "last element of a view": ("pass", ""),
    "block table within": ("pass", ""),
    "block table past its end": ("OutOfBounds", "kernel paged_sum read past the end of table_ptr by 1 element"),
    "atomic past the end": ("OutOfBounds", "atomic_at atomically updated past the end of x_ptr by 8 elements"),
    "descriptor past the end": ("OutOfBounds", "via_descriptor read past the end of desc by 16 elements"),
    "descriptor within": ("pass", ""),
    "integer pointer inside an argument": ("pass", ""),
    "integer pointer outside every argument": ("Unchecked", "not derived from any tensor argument"),
    "inside an outer faithful block": ("OutOfBounds", "read past the end of x_ptr by 1 element"),
}


@pytest.mark.slow  # two child processes that import triton and run ~60 tiny launches each
def test_every_access_outside_its_tensor_is_found_the_same_on_every_run():
    needs_triton()
    got = {numerics: run_check(numerics) for numerics in ("raw", "faithful")}
    for numerics, result in got.items():
        assert result.pop("restored") is True, numerics
        assert set(result) == set(EXPECTED), numerics
        for case, runs in result.items():
            kind, text = EXPECTED[case]
            assert len(set(runs)) == 1, (numerics, case, runs)  # the same on every run in the process
            assert runs[0].split(":")[0] == kind and text in runs[0], (numerics, case, runs[0])
    # and in another process, with another heap: the same words (where one separate tensor lies from
    # another is the heap's: that case's side and distance are left out)
    for case in EXPECTED:
        raw, faithful = got["raw"][case][0], got["faithful"][case][0]
        if case == "into a separate tensor":
            where = r"(past the end|before the start) of a_ptr by \d+ elements \(\d+ bytes\)"
            raw, faithful = (re.sub(where, "outside a_ptr", x) for x in (raw, faithful))
            assert "read outside a_ptr: 16 of 16 lanes" in raw, raw
        assert raw == faithful, case


@pytest.mark.slow  # two isolated audits of an interpreted kernel
def test_an_audit_row_says_which_tensor_a_kernel_read_past_and_by_how_much():
    needs_triton()

    def audit(fn):
        return subprocess.run([sys.executable, "-m", "attnum", "audit", f"triton-interpret:{ATTENTION}:{fn}",
                               "--probes", "scale-argument", "--dtype", "fp32"], capture_output=True, text=True,
                              timeout=300)

    bad = audit("attention_reads_past_k")  # S = 48 keys loaded as 64 rows: the last head's 16 rows past K
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    row = next(line for line in bad.stdout.splitlines() if line.startswith("scale-argument"))
    assert f" {OUT_OF_BOUNDS} " in row and "scale=None: kernel _fwd read past the end of K by 512 elements " \
        "(2048 bytes): 512 of 2048 lanes, program (1, 0, 0); K is (1, 2, 48, 32) float32 (+4 more out of bounds)" in row
    good = audit("attention")  # the same kernel with its key load masked
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
