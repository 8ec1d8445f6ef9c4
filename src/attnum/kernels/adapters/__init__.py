"""One module per upstream project: its kernels behind attnum's protocol (SDPA, decode, merge; :mod:`attnum.kernels.serving`).

An adapter imports the protocol (:mod:`attnum.kernels.conventions`, :mod:`attnum.kernels.serving`,
:mod:`attnum.kernels.serving_layout`), the wheel source and the Triton model; never another adapter.
"""
