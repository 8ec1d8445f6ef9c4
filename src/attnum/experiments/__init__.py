"""Studies built on the numerics core: one point (compare), validation, sweeps, the paper's specs."""
