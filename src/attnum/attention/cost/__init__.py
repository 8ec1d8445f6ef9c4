"""The cost model beside the accuracy: FLOPs, bytes, arithmetic intensity, roofline, per device."""

from attnum._moved import forward

# Before 0.2 this path was the module now at attnum.attention.cost.model; its names still resolve, with a warning.
__getattr__ = forward("attnum.attention.cost", "attnum.attention.cost.model", frozenset({
    "COMPUTE", "Cost", "CostConfig", "DEVICES", "Device", "ELEMENT_BYTES", "MODES", "attention_cost", "pairs",
    "split_decode_time"}))
