"""The kernel auditor (probes, the verdict rule, the runner, the kernel server's client), the fingerprinter
and the source scanner: ``attnum audit``, ``attnum fingerprint``, ``attnum scan``.

A regular package (not a namespace one) so that documentation tools find its modules; it imports nothing.
"""
