"""What the sweep machinery asks of a study's point, in one place (see attnum.sweep.registry).

``attnum.studies.paper.point.Point`` is the compare point; the serving and parallel studies add
points of their own kinds, frozen dataclasses with a ``kind`` field. Each mixes in
:class:`StudyPoint` for its stored ``config``, its ``key`` (a hash of the config: a point's identity
in the store) and "no kernel point", and is rebuilt from a stored config by :func:`from_config`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from attnum.errors import bad_value


def point_key(identity: dict[str, Any]) -> str:
    """The store key of a point: 20 hex digits of the SHA-256 of its canonical JSON identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


class StudyPoint:
    """``config``/``identity``/``key``/``kernel_point`` for a frozen dataclass with a ``kind`` field."""

    def config(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def identity(self) -> dict[str, Any]:
        return self.config()

    @property
    def key(self) -> str:
        return point_key(self.identity())

    def check_fields(self, table: dict[str, tuple[str, Any]]) -> None:
        """Check every field but ``kind`` against ``table`` {field: (allowed, ok)}, or the shared
        validators of :data:`attnum.sweep.axes.COMMON` for fields the table does not name; the
        studies' emulation runs on CPU."""
        from attnum.sweep.axes import COMMON, allowed_for

        for f in dataclasses.fields(self):
            if f.name == "kind":
                continue
            allowed, ok = table[f.name] if f.name in table else COMMON[f.name]
            if not ok(getattr(self, f.name)):
                raise bad_value(f.name, getattr(self, f.name), allowed_for(allowed, ok, getattr(self, f.name)))
        if getattr(self, "device", "cpu") != "cpu":
            raise bad_value("device", self.device, "'cpu' (the studies' emulation runs on CPU)")

    def kernel_point(self) -> None:
        return None  # real kernels are audited (attnum audit), not swept, beside these studies


def from_config(config: dict[str, Any], types: dict[str, type]) -> Any:
    """The point a stored ``config`` describes, one of ``types`` (kind -> class)."""
    kind = config.get("kind")
    if kind not in types:
        raise bad_value("kind", kind, f"one of {tuple(types)}")
    return types[kind](**config)
