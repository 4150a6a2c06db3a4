# SPDX-License-Identifier: Apache-2.0
"""The two msgpack ndarray encodings robot stacks use, written from their published descriptions; neither ever
unpickles.

- **GR00T** (Isaac-GR00T ``MsgSerializer``): an ndarray is the map ``{"__ndarray_class__": true, "as_npy": <the
  bytes of np.save>}``, read back with ``np.load(allow_pickle=False)``; a ``ModalityConfig`` is
  ``{"__ModalityConfig_class__": true, "as_json": {...}}``.
- **openpi** (``openpi_client.msgpack_numpy``): ``{b"__ndarray__": true, b"data": raw bytes, b"dtype": dtype.str,
  b"shape": shape}`` and ``{b"__npgeneric__": true, ...}`` for scalars; object, void and complex dtypes are refused.

Decoding is bounded: sizes come from the msgpack limits below, and an ndarray's declared shape must match its
bytes before any array is made. Used by the clients of this package and by the server alike (numpy and msgpack
only); a malformed message raises ``WireError`` naming the field and the rule.
"""

from __future__ import annotations

import io
from typing import Any

import msgpack
import numpy as np


class WireError(ValueError):
    """A message that breaks the wire format: names the field and the rule."""

    def __init__(self, field: str, rule: str):
        super().__init__(f"{field}: {rule}")
        self.field, self.rule = field, rule


REFUSED_KINDS = "OVc"  # object (pickle), void / structured, complex


def _limits(max_bytes: int) -> dict:
    return {"max_bin_len": max_bytes, "max_str_len": 1 << 20,
            "max_array_len": 1 << 16, "max_map_len": 1 << 12, "max_ext_len": 0}


def _unpack(data: bytes, hook, max_bytes: int, strict_map_key: bool) -> Any:
    try:
        return msgpack.unpackb(data, object_hook=hook, strict_map_key=strict_map_key, **_limits(max_bytes))
    except WireError:
        raise
    except Exception as exc:
        raise WireError("message", f"not a msgpack message within the limits ({type(exc).__name__})") from None


def _plain(a: np.ndarray, field: str = "ndarray") -> np.ndarray:
    if a.dtype.kind in REFUSED_KINDS or a.dtype.hasobject:
        raise WireError(field, f"dtype {a.dtype} is not accepted (numbers and uint8 images only)")
    return a


# ---- GR00T PolicyServer ---------------------------------------------------------------------------
class ModalityConfigJSON:
    """A ``ModalityConfig`` as its fields, packed with the GR00T class marker, which NVIDIA's ``PolicyClient``
    turns back into its ``ModalityConfig``. Deliberately not a ``dict`` subclass: msgpack packs dict subclasses as
    plain maps without ever calling ``default``, so the marker would never be written."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict):
        self.fields = dict(fields)

    def __eq__(self, other) -> bool:
        return isinstance(other, ModalityConfigJSON) and other.fields == self.fields

    def __repr__(self) -> str:
        return f"ModalityConfigJSON({self.fields!r})"


def _groot_default(obj):
    if isinstance(obj, ModalityConfigJSON):
        return {"__ModalityConfig_class__": True, "as_json": obj.fields}
    if isinstance(obj, np.ndarray):
        out = io.BytesIO()
        np.save(out, _plain(obj), allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": out.getvalue()}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _groot_hook(obj: dict):
    if "__ModalityConfig_class__" in obj:  # this package's clients keep a ModalityConfig as its fields
        fields = obj.get("as_json")
        if not isinstance(fields, dict):
            raise WireError("ModalityConfig", "as_json must be a map of the config's fields")
        return fields
    if "__ndarray_class__" in obj:
        blob = obj.get("as_npy")
        if not isinstance(blob, bytes):
            raise WireError("ndarray", "as_npy must be the bytes np.save writes")
        try:
            return _plain(np.load(io.BytesIO(blob), allow_pickle=False))
        except WireError:
            raise
        except Exception as exc:  # np.load's ValueError for object arrays ("allow_pickle=False") included
            raise WireError("ndarray", f"not a readable .npy array without pickle ({exc})") from None
    return obj


def groot_pack(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_groot_default)


def groot_unpack(data: bytes, max_bytes: int) -> Any:
    return _unpack(data, _groot_hook, max_bytes, strict_map_key=True)


# ---- openpi ----------------------------------------------------------------------------------------
def _openpi_default(obj):
    if isinstance(obj, np.ndarray):
        _plain(obj)
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        _plain(np.asarray(obj))
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _openpi_hook(obj: dict):
    if b"__ndarray__" in obj or b"__npgeneric__" in obj:
        try:
            dtype = np.dtype(obj[b"dtype"])
            _plain(np.empty(0, dtype))
            if b"__npgeneric__" in obj:
                return dtype.type(obj[b"data"])
            shape, data = tuple(int(n) for n in obj[b"shape"]), obj[b"data"]
            if any(n < 0 for n in shape) or int(np.prod(shape)) * dtype.itemsize != len(data):
                raise WireError("ndarray", f"shape {list(shape)} of {dtype} does not match its {len(data)} bytes")
            return np.frombuffer(data, dtype=dtype).reshape(shape).copy()  # writable, owns its bytes
        except WireError:
            raise
        except Exception as exc:
            raise WireError("ndarray", f"not a valid openpi ndarray ({type(exc).__name__})") from None
    return obj


def openpi_pack(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_openpi_default)


def openpi_unpack(data: bytes, max_bytes: int) -> Any:
    return _unpack(data, _openpi_hook, max_bytes, strict_map_key=False)
