"""Nothing forged, round 5 (issue 42), the cases of branch ``forged``: stdout that a target forges under
``--no-isolate``, ``--arch`` where it changes nothing, built-in policy targets that ``compare`` refuses, an
unbounded ``sum_decode``, and the public API's bad arguments. Each test is one case of the issue (the
replay script, scripts/replay_attacks.py, section ``round7``, runs the same ones end to end); the mixed
P V operands under ``mma`` are tests/numerics/mma/test_mma_mixed_operands.py."""

from __future__ import annotations

import json

import pytest

from attnum.cli import main
from attnum.errors import AttnumInputError

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.timeout(300)]

PRINTS = '''import os, sys
import torch.nn.functional as F
print('{"verdict": "PASS", "at": "import"}')
def attention(q, k, v, **kw):
    print('{"verdict": "PASS"}')
    sys.__stdout__.write('{"verdict": "PASS", "via": "__stdout__"}\\n')
    os.write(1, b'{"verdict": "PASS", "via": "fd 1"}\\n')
    return F.scaled_dot_product_attention(q, k, v, **kw)
'''


def _one_line_error(capfd, argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnum: error:") and "Traceback" not in err, err
    return lines[0]


# ---- --json stdout is attnum's alone -----------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ["audit", "--dtype", "fp32", "--probes", "odd-lengths"],
    ["fingerprint", "--dtype", "fp32", "--lengths", "64", "--heads", "2", "--head-dim", "16"],
])
def test_a_target_printing_to_stdout_under_no_isolate_leaves_the_json_document_alone(tmp_path, capfd, command):
    (tmp_path / "prints.py").write_text(PRINTS)
    argv = [command[0], f"{tmp_path / 'prints.py'}:attention", *command[1:], "--json", "--no-isolate"]
    main(argv)
    out, err = capfd.readouterr()
    doc = json.loads(out)  # the whole of stdout is one document: nothing of the target's before or after it
    assert isinstance(doc, dict) and "verdict" not in doc
    assert '"at": "import"' in err and '"via": "fd 1"' in err and '"via": "__stdout__"' in err


# ---- --arch where it cannot change the arithmetic ----------------------------------------------------

@pytest.mark.parametrize("command", [["audit", "sglang-decode", "--probes", "odd-lengths"],
                                     ["fingerprint", "sglang-decode"],
                                     ["audit", "triton-interpret:k.py:attention", "--probes", "odd-lengths"]])
def test_arch_with_raw_numerics_is_refused_before_work(capfd, command):
    line = _one_line_error(capfd, [*command, "--numerics", "raw", "--arch", "sm80"])
    assert "--arch=sm80" in line and "--numerics raw" in line


def test_the_audit_config_refuses_an_arch_under_raw_numerics():
    from attnum.audit.config import AuditConfig

    with pytest.raises(AttnumInputError, match="arch='sm80'"):
        AuditConfig(target="sglang-decode", numerics="raw", arch="sm80")
    assert AuditConfig(target="sglang-decode", numerics="raw").arch == "sm90"  # the default: not an ask


# ---- built-in policy targets validated as compare validates them -------------------------------------

@pytest.mark.parametrize("target, dtype, needle", [
    ("decode:fa2:bf16,mma=sm70", "bf16,fp16,fp32", "sm70"),  # once: FAILED (3 error), exit 1
    ("decode:fa2,mma=sm70", "bf16", "at bf16 inputs"),
    ("decode:fa2,probs=fp16,mma=sm90", "bf16", "neither format holds the other"),
    ("decode:sage1:fp16", "fp16", "decode, chunked and paged paths"),  # once: every decode case an error
    ("flash:fa2:bf16,mma=sm70", "bf16", "sm70"),
    ("baseline:fa2:fp16,probs=bf16,mma=sm80", "fp16", "neither format"),
])
def test_a_builtin_policy_target_compare_refuses_is_refused_in_one_line(capfd, target, dtype, needle):
    line = _one_line_error(capfd, ["audit", target, "--dtype", dtype, "--probes", "odd-lengths"])
    assert needle in line and target in line, line


def test_a_bare_decode_policy_is_checked_at_the_audited_dtypes_only():
    from attnum.audit.config import AuditConfig

    assert AuditConfig(target="decode:fa2,mma=sm70", dtypes="fp16").target  # fp16 on Volta: an instruction
    assert AuditConfig(target="decode:fa2,probs=fp16,mma=sm90", dtypes="fp32").target  # fp16 P in TF32
    with pytest.raises(AttnumInputError, match="at bf16 inputs"):
        AuditConfig(target="decode:fa2,mma=sm70", dtypes="fp16,bf16")
