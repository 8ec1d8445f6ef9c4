"""Run by tests/kernels/triton/test_triton_addresses.py in a child with TRITON_INTERPRET=1: tiny kernels that
access memory inside and outside their tensor arguments, each run ``REPEAT`` times under attnum's address
checks (``triton_interp.under``, with argv[1] as the numerics). Prints one JSON line: case -> the list of
outcomes, one per run (``pass``, ``OutOfBounds: ...`` or ``Unchecked: ...``), and ``restored``: whether
the interpreter's patched attributes are Triton's own again afterwards (also after the checks were
entered inside an outer ``faithful`` block, the other nesting order)."""

import json
import sys

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter as I
from triton.tools.tensor_descriptor import TensorDescriptor

from attnum.kernels.triton import faithful as triton_faithful
from attnum.kernels.triton import interp as triton_interp
from attnum.kernels.triton.addresses import OutOfBounds

REPEAT = 3
BLOCK = 16


@triton.jit
def copy(x_ptr, out_ptr, n_read, n_write, BLOCK: tl.constexpr):
    """out[i] = x[i] for i < n_read (masked), stored for i < n_write."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n_read, other=0.0)
    tl.store(out_ptr + offs, x, mask=offs < n_write)


@triton.jit
def wild_masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Lanes i >= n point 2**40 elements away, and are masked off: neither checked nor dereferenced."""
    offs = tl.arange(0, BLOCK)
    far = tl.where(offs < n, offs, offs.to(tl.int64) + (1 << 40))
    x = tl.load(x_ptr + far, mask=offs < n, other=0.0)
    tl.store(out_ptr + far, x + 1.0, mask=offs < n)


@triton.jit
def scalar_at(x_ptr, out_ptr, i):
    """A scalar tl.load at element i (negative: before the start)."""
    tl.store(out_ptr, tl.load(x_ptr + i))


@triton.jit
def hop(a_ptr, b_ptr, out_ptr, delta, BLOCK: tl.constexpr):
    """Reads through a's pointer at a + delta: delta = b - a lands in b's storage, which is not a's."""
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(a_ptr + delta + offs) + tl.load(b_ptr + offs))


@triton.jit
def paged_sum(table_ptr, cache_ptr, out_ptr, seq_len, max_blocks, PAGE: tl.constexpr):
    """The sum of a sequence's cached values through its block table (one row of max_blocks entries);
    the number of pages read comes from seq_len, not from the table's width: a seq_len longer than the
    table covers reads table entries past its end."""
    acc = tl.zeros([PAGE], tl.float32)
    offs = tl.arange(0, PAGE)
    for j in range(0, tl.cdiv(seq_len, PAGE)):
        page = tl.load(table_ptr + j)
        acc += tl.load(cache_ptr + page * PAGE + offs, mask=j * PAGE + offs < seq_len, other=0.0)
    tl.store(out_ptr + offs, acc)


@triton.jit
def atomic_at(x_ptr, start, BLOCK: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    tl.atomic_add(x_ptr + offs, 1.0)


@triton.jit
def via_descriptor(desc, out_ptr, row, BLOCK: tl.constexpr):
    """A [1, BLOCK] tile of a tensor descriptor at (row, 0)."""
    x = desc.load([row, 0])
    tl.store(out_ptr + tl.arange(0, BLOCK)[None, :], x)


@triton.jit
def from_integer(addr, out_ptr, BLOCK: tl.constexpr):
    """A pointer built from an integer the kernel was handed: no provenance."""
    p = addr.to(tl.pointer_type(tl.float32))
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(p + tl.arange(0, BLOCK)))


def cases():
    x = torch.arange(10, dtype=torch.float32)
    out = torch.zeros(BLOCK)
    buf = torch.arange(32, dtype=torch.float32)
    a, b = buf[:16], buf[16:]  # one storage: a's end is b's start
    kv = torch.arange(24, dtype=torch.float32).view(3, 2, 4)[:, 0]  # (3, 4), a gap of 4 after every row
    table = torch.tensor([2, 0], dtype=torch.int32)
    cache = torch.arange(3 * 8, dtype=torch.float32)
    grid = (1,)
    return {
        "inside": lambda: copy[grid](x, out, 10, 10, BLOCK=BLOCK),
        "read 1 past the end": lambda: copy[grid](x, out, 11, 10, BLOCK=BLOCK),
        "past the end only in masked lanes": lambda: copy[grid](x, out, 10, 10, BLOCK=BLOCK),
        "wild addresses in masked lanes": lambda: wild_masked[grid](x, x.clone(), 10, BLOCK=BLOCK),
        "store past the end": lambda: copy[grid](x, out[:8], 10, 10, BLOCK=BLOCK),
        "scalar load past the end": lambda: scalar_at[grid](x, out, 10),
        "scalar load before the start": lambda: scalar_at[grid](x, out, -1),
        "into another argument's storage": lambda: hop[grid](a, b, out, 16, BLOCK=BLOCK),
        "into a separate tensor": lambda: hop[grid](x, buf, out, (buf.data_ptr() - x.data_ptr()) // 4, BLOCK=BLOCK),
        "gap of a view": lambda: scalar_at[grid](kv, out, 4),
        "last element of a view": lambda: scalar_at[grid](kv, out, 2 * 8 + 3),
        "block table within": lambda: paged_sum[grid](table, cache, out[:8], 16, 2, PAGE=8),
        "block table past its end": lambda: paged_sum[grid](table, cache, out[:8], 17, 2, PAGE=8),
        "atomic past the end": lambda: atomic_at[grid](x, 2, BLOCK=BLOCK),
        "descriptor past the end": lambda: via_descriptor[grid](
            TensorDescriptor(x.view(2, 5)[:, :4].contiguous().view(2, 4).repeat(1, 4), [3, BLOCK], [BLOCK, 1],
                             [1, BLOCK]), out, 2, BLOCK=BLOCK),
        "descriptor within": lambda: via_descriptor[grid](
            TensorDescriptor(torch.zeros(2, BLOCK), [2, BLOCK], [BLOCK, 1], [1, BLOCK]), out, 1, BLOCK=BLOCK),
        "integer pointer inside an argument": lambda: from_integer[grid](out.data_ptr(), out, BLOCK=BLOCK),
        "integer pointer outside every argument": lambda: from_integer[grid](x.data_ptr(), out, BLOCK=BLOCK),
    }


def outcome(run, numerics):
    try:
        triton_interp.under(run, numerics)()
        return "pass"
    except (OutOfBounds, NotImplementedError) as exc:
        return f"{type(exc).__name__}: {exc}"


def patched():
    """What attnum's patches replace: the launch, the argument conversion, the builder's methods (an
    instance attribute shadows the class's; the grid indices Triton sets there are data)."""
    b = I.interpreter_builder
    return I.GridExecutor.__call__, I._implicit_cvt, sorted(k for k, v in vars(b).items() if callable(v))


def main():
    numerics = sys.argv[1]
    before = patched()
    result = {name: [outcome(run, numerics) for _ in range(REPEAT)] for name, run in cases().items()}
    with triton_faithful.faithful():  # the checks entered inside the model: the other nesting order
        result["inside an outer faithful block"] = [outcome(cases()["read 1 past the end"], numerics)]
    result["restored"] = patched() == before
    print(json.dumps(result))


if __name__ == "__main__":
    main()
