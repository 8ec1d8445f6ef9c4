"""How attnum.sqlite here was written: by attnum at commit dfaee26, before study families moved to studies/.

    git worktree add /tmp/old dfaee26
    PYTHONPATH=/tmp/old/src python tests/data/old_store/make_store.py   # (run from this folder)

Every kind of sweep point of that layout (compare, kernels, attribute, decode, ring, spec, fp8-table)
at tiny sizes. tests/store/test_old_store.py reads it with the current code. Not collected by pytest.
"""

import dataclasses
from pathlib import Path

from attnum.sweep.inference import FP8TablePoint

from attnum.sweep.executors import SweepOptions, run_sweep
from attnum.sweep.spec import Group, load_spec

spec = load_spec("spec.toml")
fp8 = Group(name="fp8-table", points=(FP8TablePoint(seq_len=16, heads=1, head_dim=8),))
spec = dataclasses.replace(spec, groups=spec.groups + (fp8,))
print(run_sweep(spec, SweepOptions(out=Path("out"), jobs=1, executor="local", quiet=True,
                                   command="attnum sweep spec.toml (+ one fp8-table point), commit dfaee26")))
