"""The cost model on devices: a CPU's measured peak and bandwidth, and the per-device comparison rows
(with the measured error beside the cost) that the serving and consistency studies print."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict

import torch

from attnum.attention.cost.model import DEVICES, Device, attention_cost
from attnum.errors import bad_value


@functools.lru_cache(maxsize=1)
def measure_cpu(n: int = 1024, copy_mb: int = 256) -> Device:
    """This CPU as measured now (cached): float32 GEMM FLOP/s (best of 3 n x n products) and memcpy
    bandwidth (best of 3 copies of ``copy_mb`` MB, read + write counted), used for every format."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.matmul(a, b, out=out)
    gemm = min(_timed(lambda: torch.matmul(a, b, out=out)) for _ in range(3))
    src = torch.ones(copy_mb * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    copy = min(_timed(lambda: dst.copy_(src)) for _ in range(3))
    flops = 2 * n**3 / gemm
    return Device(f"this CPU ({torch.get_num_threads()} threads, measured)",
                  {"bf16": flops, "fp8": flops, "fp32": flops}, 2 * src.numel() * 4 / copy,
                  f"measured: {n}x{n} float32 matmul, {copy_mb} MB copy")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare_costs(configs, *, devices=("A100", "H100", "H200"), errors=None, cpu: bool = False) -> list[dict]:
    """One row per config: FLOPs, bytes, intensity, per-device bound time (s) and memory/compute
    bound, and its speed-up over ``configs[0]`` (time ratio, > 1 = faster); with ``errors`` (one
    deviation per config, e.g. RMSE vs golden) also ``error_ratio`` over the first's, so a row reads
    "FP8 KV: decode bound 1.9x faster, 4x larger error". ``cpu``: add the measured CPU."""
    configs = list(configs)
    if errors is not None and len(errors) != len(configs):
        raise bad_value("errors", len(errors), f"one error per config ({len(configs)})")
    devs = [DEVICES[d] if isinstance(d, str) else d for d in devices] + ([measure_cpu()] if cpu else [])
    costs = [attention_cost(c) for c in configs]
    rows = []
    for i, cost in enumerate(costs):
        row = {"name": cost.config.name, "config": asdict(cost.config), "flops": cost.flops,
               "bytes": cost.total_bytes, "bytes_by_part": dict(cost.bytes), "intensity": cost.intensity,
               "devices": {}}
        for dev in devs:
            t, t0 = cost.time(dev), costs[0].time(dev)
            row["devices"][dev.name] = {"time_s": t, "bound": cost.bound(dev),
                                        "speedup": None if t is None or t0 is None else t0 / t}
        if errors is not None:
            row["error"] = errors[i]
            row["error_ratio"] = errors[i] / errors[0] if errors[0] else (1.0 if errors[i] == 0 else math.inf)
        rows.append(row)
    return rows


def summary(row: dict, device: str) -> str:
    """'NAME: decode bound 1.9x faster, error 4.0x larger' for one row of compare_costs on one device."""
    dev = row["devices"][device]
    if dev["speedup"] is None:
        return f"{row['name']}: no {row['config']['compute']} GEMM on {device}"
    text = f"{row['name']}: {row['config']['mode']} bound {dev['speedup']:.2f}x faster on {device} ({dev['bound']}-bound)"
    if "error_ratio" in row:
        text += f", error {row['error_ratio']:.2f}x the first row's"
    return text
