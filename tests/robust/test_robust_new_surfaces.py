"""Attacks on this round's new surfaces (the tensor-core model, its policy knob and CLI flags): each is
refused with one line that names what was wrong, before any work starts."""

from __future__ import annotations

import pytest
import torch

from attnum.cli import main
from attnum.numerics.mma import dense as mma


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnum: error:"), err
    return err[0]


@pytest.mark.parametrize("policy, reason", [
    ("fa2:bf16,mma=sm99", "mma='sm99' is not allowed"),  # the policy's knob, not only "policy not allowed"
    ("fa2:fp64,mma=sm90", "inputs='fp64' is not allowed with mma"),  # fp64 has no tensor-core type
])
def test_a_refused_policy_names_the_part_that_is_wrong(capsys, policy, reason):
    line = _one_line_error(capsys, ["compare", "--policy", policy, "--seq-len", "64", "--head-dim", "16"])
    assert reason in line, line


def test_fp8_table_refuses_an_architecture_without_fp8_before_running(capsys):
    line = _one_line_error(capsys, ["fp8-table", "--mma", "sm80"])
    assert "'fp8' on arch='sm80'" in line and "finished" not in line


@pytest.mark.parametrize("make, needle", [
    (lambda a, b: mma.matmul(a, b, arch="sm91"), "arch='sm91'"),
    (lambda a, b: mma.matmul(a.double(), b.double(), arch="sm90"), "a.dtype=torch.float64"),
    (lambda a, b: mma.matmul(a, b.half(), arch="sm90"), "b.dtype=torch.float16"),
    (lambda a, b: mma.matmul(a, b[:16], arch="sm90"), "b.shape=(16, 4)"),
    (lambda a, b: mma.matmul(a, b, torch.zeros(3, 3), arch="sm90"), "c.shape=(3, 3)"),
    (lambda a, b: mma.matmul(a, b, arch="sm90", out_format="fp16"), "out_format='fp16'"),
    (lambda a, b: mma.matmul(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), arch="sm80"), "'fp8' on arch='sm80'"),
])
def test_mma_matmul_refuses_with_the_input_named(make, needle):
    from attnum.errors import AttnumInputError

    a, b = torch.randn(4, 32).to(torch.bfloat16), torch.randn(32, 4).to(torch.bfloat16)
    with pytest.raises(AttnumInputError, match=None) as info:
        make(a, b)
    assert needle in str(info.value), str(info.value)
