"""The policy-worker wire format: frames and a compact tagged value codec. No I/O.

A frame is ``<u32 length><u8 kind><payload>`` where length counts kind + payload.
Values are tagged: scalars, str, bytes, lists, tuples, dicts and numpy arrays
(dtype, shape, raw buffer) and numpy scalars. Decoding is bounded (size, depth,
item count) because the worker side is untrusted.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import numpy as np

WORKER_PROTOCOL: Final = "policy-worker/v1"

# Frame kinds. Host -> worker: INIT, OBS. Worker -> host: READY, ACT, FAIL.
INIT: Final = 1
READY: Final = 2
OBS: Final = 3
ACT: Final = 4
FAIL: Final = 5

HEADER = struct.Struct("<IB")
MAX_DEPTH: Final = 32
MAX_ITEMS: Final = 1_000_000

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")

_NONE, _TRUE, _FALSE = b"N", b"T", b"F"
_INT, _BIGINT, _FLOAT, _STR, _BYTES = b"i", b"I", b"f", b"s", b"b"
_ARRAY, _SCALAR, _LIST, _TUPLE, _DICT = b"a", b"g", b"l", b"t", b"d"
_INT_TAG, _FLOAT_TAG, _ARRAY_TAG = _INT[0], _FLOAT[0], _ARRAY[0]

# Numeric dtypes only (object arrays could carry anything), native little-endian.
_DTYPES: Final = {
    np.dtype(name).str: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}


class CodecError(ValueError):
    """A value cannot be encoded, or bytes are not a valid encoding."""


def frame(kind: int, payload: bytes = b"") -> bytes:
    """Wrap a payload in a frame header."""
    return HEADER.pack(len(payload) + 1, kind) + payload


def encode(value: Any) -> bytes:
    """Encode a value; raises CodecError for types outside the protocol."""
    out: list[bytes] = []
    _encode(value, out, 0)
    return b"".join(out)


def _encode(value: Any, out: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CodecError(f"value is nested more than {MAX_DEPTH} levels deep")
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = _encoder_for_subclass(value)
    encoder(value, out, depth)


def _encode_none(value: None, out: list[bytes], depth: int) -> None:
    out.append(_NONE)


def _encode_bool(value: bool, out: list[bytes], depth: int) -> None:
    out.append(_TRUE if value else _FALSE)


def _encode_int(value: int, out: list[bytes], depth: int) -> None:
    if -(2**63) <= value < 2**63:
        out.append(_INT + _I64.pack(value))
        return
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    out.append(_BIGINT + _U32.pack(len(raw)) + raw)


def _encode_float(value: float, out: list[bytes], depth: int) -> None:
    out.append(_FLOAT + _F64.pack(value))


def _encode_str(value: str, out: list[bytes], depth: int) -> None:
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CodecError(f"string is not valid UTF-8: {error}") from None
    out.append(_STR + _U32.pack(len(raw)) + raw)


def _encode_bytes(value: bytes, out: list[bytes], depth: int) -> None:
    out.append(_BYTES + _U32.pack(len(value)) + bytes(value))


def _encode_array(value: np.ndarray, out: list[bytes], depth: int) -> None:
    header = _ARRAY_HEADERS.get((value.dtype, value.shape))
    if header is None:
        dtype = _wire_dtype(value.dtype)
        if dtype != value.dtype:
            value = value.astype(dtype)  # byte-swapped input travels little-endian
        header = _array_header(value)
    out.append(header)
    out.append(value.tobytes())  # C order whatever the input's layout


def _array_header(value: np.ndarray) -> bytes:
    code = value.dtype.str.encode("ascii")
    shape = struct.pack(f"<{value.ndim}Q", *value.shape)
    header = _ARRAY + bytes((len(code),)) + code + bytes((value.ndim,)) + shape
    if len(_ARRAY_HEADERS) < 256:
        _ARRAY_HEADERS[(value.dtype, value.shape)] = header
    return header


# Observations repeat one dtype and shape for a whole episode: cache their headers.
_ARRAY_HEADERS: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}


def _encode_scalar(value: np.generic, out: list[bytes], depth: int) -> None:
    dtype = _wire_dtype(value.dtype)
    code = dtype.str.encode("ascii")
    out.append(_SCALAR + bytes((len(code),)) + code + np.asarray(value, dtype=dtype).tobytes())


def _encode_sequence(tag: bytes) -> Callable[[Any, list[bytes], int], None]:
    def encode_items(value: list[Any] | tuple[Any, ...], out: list[bytes], depth: int) -> None:
        out.append(tag + _U32.pack(len(value)))
        for item in value:
            _encode(item, out, depth + 1)

    return encode_items


def _encode_dict(value: dict[Any, Any], out: list[bytes], depth: int) -> None:
    out.append(_DICT + _U32.pack(len(value)))
    for key, item in value.items():
        _encode(key, out, depth + 1)
        _encode(item, out, depth + 1)


_ENCODERS: dict[type, Callable[[Any, list[bytes], int], None]] = {
    type(None): _encode_none,
    bool: _encode_bool,
    int: _encode_int,
    float: _encode_float,
    str: _encode_str,
    bytes: _encode_bytes,
    np.ndarray: _encode_array,
    list: _encode_sequence(_LIST),
    tuple: _encode_sequence(_TUPLE),
    dict: _encode_dict,
}
for _scalar_type in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16):
    _ENCODERS[_scalar_type] = _encode_scalar
for _scalar_type in (np.uint32, np.uint64, np.float16, np.float32, np.float64):
    _ENCODERS[_scalar_type] = _encode_scalar
for _scalar_type in (np.complex64, np.complex128):
    _ENCODERS[_scalar_type] = _encode_scalar


def _encoder_for_subclass(value: Any) -> Callable[[Any, list[bytes], int], None]:
    # Exact-type lookup failed; a subclass of a plain type travels as its base value
    # (IntEnum -> int, a str Enum -> its text), read with the base type's own methods.
    for base, to_base in _BASE_VALUES:
        if isinstance(value, base):
            encoder = _ENCODERS[base]
            return lambda v, out, depth: encoder(to_base(v), out, depth)
    if isinstance(value, np.generic):
        return _encode_scalar
    raise CodecError(f"values of type {type(value).__name__} cannot be sent")


_BASE_VALUES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (int, int.__index__),
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda v: bytes(memoryview(v))),
    (np.ndarray, lambda v: np.asarray(v).view(np.ndarray)),
    (list, lambda v: list(list.__iter__(v))),
    (tuple, lambda v: tuple(tuple.__iter__(v))),
    (dict, lambda v: dict(dict.items(v))),
)


def _wire_dtype(dtype: np.dtype) -> np.dtype:
    wire = _DTYPES.get(dtype.newbyteorder("<").str if dtype.byteorder == ">" else dtype.str)
    if wire is None:
        raise CodecError(f"arrays of dtype {dtype} cannot be sent; use a numeric dtype")
    return wire


def decode(data: bytes | memoryview, *, max_items: int = MAX_ITEMS) -> Any:
    """Decode one value that fills `data` exactly; raises CodecError on any defect."""
    if len(data) == 9:  # the common action: one int or float
        tag = data[0]
        if tag == _INT_TAG:
            return _I64.unpack_from(data, 1)[0]
        if tag == _FLOAT_TAG:
            return _F64.unpack_from(data, 1)[0]
    elif data and data[0] == _ARRAY_TAG:  # the common observation: one array
        array = _decode_known_array(data, max_items)
        if array is not None:
            return array
    view = memoryview(data)
    decoder = _Decoder(view, max_items)
    value = decoder.value(0)
    if decoder.offset != len(view):
        raise CodecError(f"{len(view) - decoder.offset} trailing bytes after the value")
    return value


def _decode_known_array(data: bytes | memoryview, max_items: int) -> np.ndarray | None:
    # A top-level array whose header was seen before; None sends it the long way.
    if len(data) < 3:
        return None
    code_length = data[1]
    if len(data) < 3 + code_length:
        return None
    header_length = 3 + code_length + 8 * data[2 + code_length]
    known = _KNOWN_HEADERS.get(bytes(data[:header_length]))
    if known is None:
        if len(_KNOWN_HEADERS) < 256:
            _learn_header(data, header_length)
        return None
    dtype, shape, size = known
    if len(data) != header_length + size or size // dtype.itemsize > max_items:
        return None
    return _array_from(memoryview(data)[header_length:], dtype, shape)


def _array_from(raw: bytes | memoryview, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    try:
        # Copy: the policy may write into its observation, and the buffer is reused.
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    except ValueError as error:  # e.g. a zero-size shape with an impossible extent
        raise CodecError(f"array of shape {shape} is not valid: {error}") from None


def _learn_header(data: bytes | memoryview, header_length: int) -> None:
    try:
        decoder = _Decoder(memoryview(data)[:header_length], MAX_ITEMS)
        decoder.take(1)
        dtype = decoder.dtype()
        ndim = decoder.take(1)[0]
        shape = struct.unpack(f"<{ndim}Q", decoder.take(8 * ndim))
    except CodecError:
        return
    size = dtype.itemsize
    for extent in shape:
        size *= extent
    if ndim <= MAX_DEPTH and size <= 8 * MAX_ITEMS:
        _KNOWN_HEADERS[bytes(data[:header_length])] = (dtype, shape, size)


_KNOWN_HEADERS: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}


class _Decoder:
    __slots__ = ("items", "max_items", "offset", "view")

    def __init__(self, view: memoryview, max_items: int) -> None:
        self.view = view
        self.offset = 0
        self.items = 0
        self.max_items = max_items

    def take(self, count: int) -> memoryview:
        end = self.offset + count
        if count < 0 or end > len(self.view):
            raise CodecError("value is truncated")
        chunk = self.view[self.offset : end]
        self.offset = end
        return chunk

    def count(self, added: int) -> None:
        self.items += added
        if self.items > self.max_items:
            raise CodecError(f"value has more than {self.max_items} items")

    def announce(self, length: int) -> None:
        # Refuse an impossible length before allocating anything for it.
        if self.items + length > self.max_items:
            raise CodecError(f"value has more than {self.max_items} items")

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CodecError(f"value is nested more than {MAX_DEPTH} levels deep")
        tag = bytes(self.take(1))
        if tag == _ARRAY:
            return self.array()
        self.count(1)
        if tag == _FLOAT:
            return _F64.unpack(self.take(8))[0]
        if tag == _INT:
            return _I64.unpack(self.take(8))[0]
        if tag == _NONE:
            return None
        if tag == _TRUE:
            return True
        if tag == _FALSE:
            return False
        if tag == _SCALAR:
            dtype = self.dtype()
            return np.frombuffer(self.take(dtype.itemsize), dtype=dtype)[0].copy()
        if tag in (_LIST, _TUPLE):
            (length,) = _U32.unpack(self.take(4))
            self.announce(length)
            items = [self.value(depth + 1) for _ in range(length)]
            return items if tag == _LIST else tuple(items)
        if tag == _DICT:
            (length,) = _U32.unpack(self.take(4))
            self.announce(2 * length)
            result: dict[Any, Any] = {}
            for _ in range(length):
                key = self.value(depth + 1)
                try:
                    result[key] = self.value(depth + 1)
                except TypeError:
                    raise CodecError("dict key is not hashable") from None
            return result
        if tag == _STR:
            (length,) = _U32.unpack(self.take(4))
            try:
                return str(self.take(length), "utf-8")
            except UnicodeDecodeError:
                raise CodecError("string is not valid UTF-8") from None
        if tag == _BYTES:
            (length,) = _U32.unpack(self.take(4))
            return bytes(self.take(length))
        if tag == _BIGINT:
            (length,) = _U32.unpack(self.take(4))
            return int.from_bytes(self.take(length), "little", signed=True)
        raise CodecError(f"unknown value tag {tag!r}")

    def dtype(self) -> np.dtype:
        length = self.take(1)[0]
        code = bytes(self.take(length)).decode("ascii", "replace")
        dtype = _DTYPES.get(code)
        if dtype is None:
            raise CodecError(f"dtype {code!r} is not allowed")
        return dtype

    def array(self) -> np.ndarray:
        dtype = self.dtype()
        ndim = self.take(1)[0]
        if ndim > MAX_DEPTH:
            raise CodecError(f"array has {ndim} dimensions")
        shape = struct.unpack(f"<{ndim}Q", self.take(8 * ndim))
        size = 1
        for extent in shape:
            size *= extent
        self.count(size)
        raw = self.take(size * dtype.itemsize)
        return _array_from(raw, dtype, shape)


class FrameBuffer:
    """Reassembles frames from a byte stream; refuses frames over `max_frame` bytes."""

    __slots__ = ("_buffer", "max_frame")

    def __init__(self, max_frame: int) -> None:
        self._buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def feed_and_pop(self, data: bytes) -> tuple[int, bytes] | None:
        """`feed` then `pop`, without copying when `data` is exactly one frame."""
        if not self._buffer and len(data) >= HEADER.size:
            length, kind = HEADER.unpack_from(data)
            if len(data) == 4 + length and 1 <= length <= self.max_frame:
                return kind, data[HEADER.size :]
        self._buffer += data
        return self.pop()

    def pop(self) -> tuple[int, bytes] | None:
        """The next whole frame as (kind, payload), or None if more bytes are needed.

        Raises:
            CodecError: the announced frame is empty or larger than `max_frame`.
        """
        buffer = self._buffer
        if len(buffer) < HEADER.size:
            return None
        length, kind = HEADER.unpack_from(buffer)
        if length < 1 or length > self.max_frame:
            raise CodecError(f"frame of {length} bytes exceeds the {self.max_frame}-byte limit")
        end = 4 + length
        if len(buffer) < end:
            return None
        payload = bytes(buffer[HEADER.size : end])
        del buffer[:end]
        return kind, payload
