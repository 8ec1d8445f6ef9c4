"""``attnum fingerprint``: recover a black-box attention kernel's tiles, splits and precisions from its
outputs (:func:`fingerprint`; the method is docs/fingerprint.md)."""

from attnum.audit.fingerprint.engine import fingerprint

__all__ = ["fingerprint"]
