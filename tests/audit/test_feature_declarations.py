"""A score feature declared as docs/audit.md says is honoured on every kind of target: a plain function, a
plain class (``attnum_softcap = True`` beside its ``sdpa``), both under ``triton-interpret:``, and a serving
entry point (``decode.attnum_softcap``). Before issue 40's change a plain class's declaration was dropped (the
softcap probe said "does not declare") and the interpreter's wrapper dropped the keyword (TypeError)."""

from __future__ import annotations

import textwrap

import pytest

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.errors import AttnumInputError
from attnum.kernels import conventions
from attnum.kernels.registry import resolve

pytestmark = pytest.mark.usefixtures("one_thread")

USER_FILE = textwrap.dedent('''
    import math
    import torch


    def _attention(q, k, v, attn_mask=None, is_causal=False, scale=None, softcap=None):
        s = (q.float() @ k.float().transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if is_causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        return (s.softmax(-1) @ v.float()).to(q.dtype)


    class Capped:
        """A serving adapter as a user writes one: no attnum import, the declaration an attribute."""
        attnum_softcap = True

        @staticmethod
        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                 softcap=None):
            return _attention(q, k, v, attn_mask, is_causal, scale, softcap)


    class Malformed(Capped):
        attnum_softcap = "yes"


    def capped_fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                  softcap=None):
        return _attention(q, k, v, attn_mask, is_causal, scale, softcap)


    capped_fn.attnum_softcap = True
''')


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "capped.py"
    path.write_text(USER_FILE)
    return path


def softcap_row(spec: str, *, isolate: bool = False):
    report = run_audit(AuditConfig(target=spec, probes="softcap-overflow", dtypes="fp32", isolate=isolate))
    return report.results[0]


@pytest.mark.parametrize("spec", ["{path}:Capped", "{path}:capped_fn", "triton-interpret:{path}:Capped",
                                  "triton-interpret:{path}:capped_fn"])
def test_a_declared_softcap_is_asked_and_passes(user_file, spec):
    # a triton-interpret: target runs in a kernel server: TRITON_INTERPRET=1 must precede triton's import, and
    # another test of this worker may have imported triton already
    row = softcap_row(spec.format(path=user_file), isolate=spec.startswith("triton-interpret:"))
    assert row.status == "pass", row.note
    assert len(row.cases) > 4  # every (cap, multiple) the format holds, not the one "unsupported" case


def test_the_declaration_crosses_the_kernel_server(user_file):
    row = softcap_row(f"{user_file}:Capped", isolate=True)
    assert row.status == "pass", row.note


def test_a_class_declaration_reaches_the_target_and_its_entry_points(user_file):
    target = resolve(f"{user_file}:Capped").fn
    assert conventions.feature(target, "softcap") and not conventions.feature(target, "window")


def test_a_malformed_class_declaration_is_one_line(user_file):
    with pytest.raises(AttnumInputError, match=r"Malformed\.attnum_softcap='yes'"):
        resolve(f"{user_file}:Malformed")


def test_an_entry_declares_for_itself_a_target_for_every_entry():
    def decode(*a, **kw):
        return None

    class Plain:
        pass

    assert not conventions.entry_feature(Plain, decode, "softcap")
    decode.attnum_softcap = True
    assert conventions.entry_feature(Plain, decode, "softcap")
    del decode.attnum_softcap
    Plain.attnum_softcap = True
    assert conventions.entry_feature(Plain, decode, "softcap")
