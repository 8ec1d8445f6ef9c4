"""The field's own bugs, found again: attnum's auditor measured against upstream attention-kernel bugs at their
broken and fixed releases (recall at the broken version, false alarms at the fixed one).

Kind ``bug-case``; commands ``bugs list`` and ``bugs run``. The corpus and the runner live in
:mod:`attnum.audit.bugs`; this family draws the recall table in ``attnum report``. Registered in :mod:`.family`.
"""
