"""Rules of kernel/protocol.py: the worker value codec and frame reassembly."""

from __future__ import annotations

import enum
import math
import random
import struct
from typing import Any

import numpy as np
import pytest

from evopolicy.kernel import protocol
from evopolicy.kernel.protocol import CodecError, FrameBuffer, decode, encode, frame

ALLOWED_DTYPES = [
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
]


def assert_same(decoded: Any, original: Any) -> None:
    """Equal value and the same type, all the way down (tuples stay tuples, dtypes stay)."""
    if isinstance(original, np.ndarray):
        assert isinstance(decoded, np.ndarray)
        assert decoded.dtype == original.dtype.newbyteorder("=")
        assert decoded.shape == original.shape
        equal_nan = original.dtype.kind in "fc"
        assert np.array_equal(decoded, original, equal_nan=equal_nan)
        return
    assert type(decoded) is type(original), (type(decoded), type(original))
    if isinstance(original, float | np.floating) and math.isnan(original):
        assert math.isnan(decoded)
    elif isinstance(original, list | tuple):
        assert len(decoded) == len(original)
        for decoded_item, original_item in zip(decoded, original, strict=True):
            assert_same(decoded_item, original_item)
    elif isinstance(original, dict):
        assert list(decoded) == list(original)
        for key in original:
            assert_same(next(k for k in decoded if k == key), key)
            assert_same(decoded[key], original[key])
    else:
        assert decoded == original


def _array(dtype: str) -> np.ndarray:
    return np.arange(6).astype(dtype).reshape(2, 3)


VALUES: dict[str, Any] = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "minus_one": -1,
    "int64_min": -(2**63),
    "int64_max": 2**63 - 1,
    "just_over_int64": 2**63,
    "just_under_int64": -(2**63) - 1,
    "big_positive": 2**100,
    "big_negative": -(2**100),
    "float": 1.5,
    "negative_zero": -0.0,
    "tiny_float": 5e-324,
    "inf": math.inf,
    "minus_inf": -math.inf,
    "nan": math.nan,
    "empty_str": "",
    "unicode_str": "na\N{LATIN SMALL LETTER I WITH DIAERESIS}ve \N{SNOWMAN} \U0001f600",
    "empty_bytes": b"",
    "nine_byte_bytes": b"abcd",
    "nine_byte_str": "abcd",
    "bytes": bytes(range(256)),
    "empty_list": [],
    "empty_tuple": (),
    "empty_dict": {},
    "list": [1, "two", 3.0, None],
    "tuple": (1, (2, (3,)), [4]),
    "list_of_tuples": [(1, 2), (3, 4)],
    "tuple_of_lists": ([1], [2, [3]]),
    "str_keys": {"a": 1, "b": [2, 3]},
    "int_keys": {0: "zero", -5: "minus five", 2**70: "big"},
    "tuple_keys": {(1, 2): "pair", (): "empty", ("x", (3,)): {"nested": True}},
    "mixed_keys": {None: 1, True: 2, 1.5: 3, b"k": 4},
    "float32_scalar": np.float32(0.25),
    "float64_scalar": np.float64(-2.5),
    "int64_scalar": np.int64(-7),
    "uint8_scalar": np.uint8(255),
    "bool_scalar": np.bool_(True),
    "complex_scalar": np.complex128(1 - 2j),
    "nan_float32_scalar": np.float32("nan"),
    "empty_array": np.zeros((0, 3), dtype=np.float32),
    "zero_d_float": np.array(2.5),
    "zero_d_uint8": np.array(9, dtype=np.uint8),
    "image": np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3),
    "float_array_with_specials": np.array([np.nan, np.inf, -np.inf, 0.0], dtype=np.float64),
    "fortran_order": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    "nested": {
        "observation": np.linspace(-1, 1, 4, dtype=np.float32),
        "info": [{"step": 3, "done": False}, (np.int64(2), b"raw")],
        "history": ((1.0, 2), [None, "text"]),
    },
}
for _name in ALLOWED_DTYPES:
    VALUES[f"array_{_name}"] = _array(_name)


@pytest.mark.parametrize("value", list(VALUES.values()), ids=list(VALUES))
def test_value_round_trips_with_its_type(value):
    assert_same(decode(encode(value)), value)


@pytest.mark.parametrize("value", list(VALUES.values()), ids=list(VALUES))
def test_encoding_is_deterministic(value):
    assert encode(value) == encode(value)


@pytest.mark.parametrize("dtype", ALLOWED_DTYPES)
def test_decoded_arrays_are_writable_copies(dtype):
    data = encode(_array(dtype))
    decoded = decode(data)
    assert decoded.flags.writeable
    decoded[0, 0] = decoded[1, 1]
    assert decoded[0, 0] == decoded[1, 1]
    assert_same(decode(data), _array(dtype))


@pytest.mark.parametrize("dtype", ["float32", "uint8", "bool", "complex128"])
def test_repeated_array_decodes_are_equal_independent_copies(dtype):
    # Decoding the same header again may take a cached path; the result must not differ.
    original = _array(dtype)
    data = encode(original)
    first, second, third = decode(data), decode(data), decode(memoryview(data))
    for decoded in (first, second, third):
        assert_same(decoded, original)
        assert decoded.flags.writeable
    second[0, 0] = second[1, 2]
    assert_same(first, original)
    assert_same(third, original)


@pytest.mark.parametrize("length", [8, 9, 10, 11])
def test_repeated_array_decodes_agree_on_max_items(length):
    data = encode(np.zeros(length, dtype=np.uint8))
    outcomes = []
    for _ in range(3):
        try:
            outcomes.append(decode(data, max_items=10).shape)
        except CodecError:
            outcomes.append("rejected")
    assert outcomes[0] == outcomes[1] == outcomes[2]
    if length > 10:
        assert outcomes[0] == "rejected"


def test_known_array_header_with_wrong_payload_length_is_rejected():
    data = encode(np.arange(6, dtype=np.int32))
    assert_same(decode(data), np.arange(6, dtype=np.int32))
    for defective in (data[:-1], data + b"\x00", data[:-4]):
        with pytest.raises(CodecError):
            decode(defective)


def test_arrays_of_one_dtype_and_shape_round_trip_whatever_their_layout():
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    layouts = [
        values,
        np.asfortranarray(values),
        np.arange(24, dtype=np.int32).reshape(3, 8)[:, ::2] // 2,
        values.astype(">i4"),
        values.T.copy().T,
    ]
    for layout in layouts * 2:
        np.testing.assert_array_equal(layout, values)
        assert_same(decode(encode(layout)), values)


def test_non_contiguous_array_round_trips_as_its_values():
    base = np.arange(20, dtype=np.int16)
    strided = base[::2]
    assert not strided.flags.c_contiguous
    decoded = decode(encode(strided))
    assert_same(decoded, strided)
    assert decoded.flags.c_contiguous


def test_transposed_array_round_trips_as_its_values():
    transposed = np.arange(6, dtype=np.float64).reshape(2, 3).T
    assert_same(decode(encode(transposed)), transposed)


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2", ">c16"])
def test_big_endian_array_comes_back_little_endian_with_equal_values(dtype):
    original = np.arange(5).astype(dtype)
    decoded = decode(encode(original))
    assert decoded.dtype == np.dtype(dtype).newbyteorder("<")
    assert decoded.dtype.byteorder in ("<", "=")
    np.testing.assert_array_equal(decoded, original)


def test_str_subclass_is_encoded_as_str():
    class Name(str):
        pass

    decoded = decode(encode(Name("policy")))
    assert type(decoded) is str
    assert decoded == "policy"


def test_int_enum_is_encoded_as_its_int_value():
    class Move(enum.IntEnum):
        LEFT = 0
        RIGHT = 1

    decoded = decode(encode([Move.RIGHT]))
    assert decoded == [1]
    assert type(decoded[0]) is int


def test_str_subclass_is_encoded_by_its_content_not_its_str_method():
    # Deliberately not StrEnum: a (str, Enum) member's __str__ is "Colour.RED".
    class Colour(str, enum.Enum):  # noqa: UP042
        RED = "red"

    assert decode(encode(Colour.RED)) == "red"


@pytest.mark.parametrize(
    "value",
    [np.array(3.5), np.array(7, dtype=np.int64), np.array(True), np.array(2, dtype=">i4")],
    ids=["float64", "int64", "bool", "big_endian_int32"],
)
def test_zero_dimensional_array_keeps_its_shape(value):
    decoded = decode(encode(value))
    assert decoded.shape == ()
    assert_same(decoded, value)


# Values outside the protocol are refused with CodecError.


def _nested(depth: int, leaf: Any = 0) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def _self_referential() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


UNENCODABLE: dict[str, Any] = {
    "object": object(),
    "set": {1, 2},
    "frozenset": frozenset({1}),
    "function": lambda: None,
    "class": int,
    "object_array": np.array([object(), 1], dtype=object),
    "str_array": np.array(["a", "b"]),
    "datetime_array": np.array(["2024-01-01"], dtype="datetime64[D]"),
    "structured_array": np.zeros(2, dtype=[("x", "i4"), ("y", "f4")]),
    "longdouble_scalar": np.longdouble(1.0),
    "lone_surrogate": "\ud800",
    "too_deep": _nested(protocol.MAX_DEPTH + 1),
    "self_referential": _self_referential(),
    "set_inside_list": [1, [2, {3}]],
    "object_as_dict_value": {"k": object()},
}


@pytest.mark.parametrize("value", list(UNENCODABLE.values()), ids=list(UNENCODABLE))
def test_value_outside_the_protocol_raises_codec_error(value):
    with pytest.raises(CodecError):
        encode(value)


def test_nesting_up_to_max_depth_is_allowed():
    value = _nested(protocol.MAX_DEPTH)
    assert decode(encode(value)) == value


# Decoding is strict: every defect is a CodecError.

NESTED = VALUES["nested"] | {
    "big": -(2**100),
    "scalars": (np.float32(1.5), np.bool_(False)),
    "keys": {(1, "a"): b"\x00\xff"},
    "text": "\N{SNOWMAN}",
}


def test_every_proper_prefix_of_an_encoding_is_rejected():
    data = encode(NESTED)
    for end in range(len(data)):
        with pytest.raises(CodecError):
            decode(data[:end])


def test_trailing_bytes_are_rejected():
    data = encode([1, 2, 3])
    with pytest.raises(CodecError, match="trailing"):
        decode(data + b"\x00")
    with pytest.raises(CodecError):
        decode(encode(None) + encode(None))


@pytest.mark.parametrize("tag", [b"Z", b"\x00", b"\xff", b"n"])
def test_unknown_tag_is_rejected(tag):
    with pytest.raises(CodecError, match="tag"):
        decode(tag)


def _array_bytes(code: bytes, shape: tuple[int, ...], payload: bytes) -> bytes:
    header = bytes((len(code),)) + code + bytes((len(shape),))
    return b"a" + header + struct.pack(f"<{len(shape)}Q", *shape) + payload


def _scalar_bytes(code: bytes, payload: bytes) -> bytes:
    return b"g" + bytes((len(code),)) + code + payload


@pytest.mark.parametrize("code", [b"|O", b"|O8", b">f4", b"<M8[D]", b"<U1", b"xyz", b"", b"\xff"])
def test_disallowed_dtype_string_is_rejected(code):
    with pytest.raises(CodecError, match="dtype"):
        decode(_array_bytes(code, (1,), b"\x00" * 8))
    with pytest.raises(CodecError, match="dtype"):
        decode(_scalar_bytes(code, b"\x00" * 8))


def test_hand_built_array_encoding_decodes():
    # Guards the helper above: the same layout with an allowed dtype is accepted.
    decoded = decode(_array_bytes(b"<i4", (2,), struct.pack("<2i", 5, -6)))
    assert_same(decoded, np.array([5, -6], dtype=np.int32))


def test_more_items_than_max_items_are_rejected():
    data = encode(list(range(100)))
    assert decode(data) == list(range(100))
    with pytest.raises(CodecError, match="items"):
        decode(data, max_items=10)


def test_array_elements_count_against_max_items():
    data = encode(np.zeros(100, dtype=np.uint8))
    with pytest.raises(CodecError, match="items"):
        decode(data, max_items=10)


def test_announced_length_beyond_max_items_is_rejected_before_reading_items():
    for tag in (b"l", b"t", b"d"):
        with pytest.raises(CodecError):
            decode(tag + struct.pack("<I", 2**32 - 1))


def test_huge_announced_array_is_rejected_without_allocating():
    with pytest.raises(CodecError):
        decode(_array_bytes(b"<f8", (2**32, 2**32), b""))


def test_invalid_utf8_is_rejected():
    with pytest.raises(CodecError, match="UTF-8"):
        decode(b"s" + struct.pack("<I", 2) + b"\xff\xfe")


def test_nesting_deeper_than_max_depth_is_rejected_when_decoding():
    list_of_one = b"l" + struct.pack("<I", 1)
    with pytest.raises(CodecError, match="nested"):
        decode(list_of_one * (protocol.MAX_DEPTH + 1) + b"N")
    assert decode(list_of_one * protocol.MAX_DEPTH + b"N") == _nested(protocol.MAX_DEPTH, None)


@pytest.mark.parametrize(
    "key", [encode([1]), encode({}), encode(np.zeros(2)), encode((1, [2]))], ids=str
)
def test_unhashable_dict_key_is_rejected(key):
    with pytest.raises(CodecError, match="hashable"):
        decode(b"d" + struct.pack("<I", 1) + key + encode(1))


def test_too_many_array_dimensions_are_rejected():
    ndim = protocol.MAX_DEPTH + 1
    with pytest.raises(CodecError, match="dimensions"):
        decode(_array_bytes(b"|u1", (1,) * ndim, b"\x00"))


def test_zero_size_array_with_an_impossible_extent_is_a_codec_error():
    data = _array_bytes(b"<f8", (0, 2**63), b"")
    for _ in range(2):  # the second decode takes the known-header path
        with pytest.raises(CodecError):
            decode(data)


def _decodes(data: bytes) -> bool:
    """True if `data` decodes, False on CodecError; any other exception fails the test."""
    try:
        decode(data)
    except CodecError:
        return False
    return True


def test_random_bytes_decode_or_raise_codec_error_only():
    rng = random.Random(0)
    # Bias the first byte towards real tags so the fuzz reaches past the tag dispatch.
    tags = b"NTFiIfsbagltd"
    outcomes = []
    for _ in range(2_000):
        data = bytearray(rng.randbytes(rng.randrange(0, 64)))
        if data and rng.random() < 0.5:
            data[0] = rng.choice(tags)
        outcomes.append(_decodes(bytes(data)))
    assert any(outcomes)  # the fuzz reached the value decoders, not only the tag check
    assert not all(outcomes)


def test_mutated_encodings_decode_or_raise_codec_error_only():
    rng = random.Random(0)
    seeds = [encode(NESTED), encode(VALUES["image"]), encode(VALUES["tuple_keys"])]
    outcomes = []
    for _ in range(2_000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        outcomes.append(_decodes(bytes(data)))
    assert any(outcomes)
    assert not all(outcomes)


# Frames.


def test_frame_header_counts_kind_and_payload():
    assert frame(protocol.OBS, b"abc") == struct.pack("<IB", 4, protocol.OBS) + b"abc"
    assert frame(protocol.READY) == struct.pack("<IB", 1, protocol.READY)


FRAMES = [
    (protocol.INIT, encode({"program_dir": "/tmp/p", "context": {}})),
    (protocol.READY, b""),
    (protocol.OBS, encode(np.arange(10, dtype=np.float32))),
    (protocol.ACT, encode(1)),
    (protocol.FAIL, b"\x00" * 300),
]
STREAM = b"".join(frame(kind, payload) for kind, payload in FRAMES)


def _drain(buffer: FrameBuffer) -> list[tuple[int, bytes]]:
    frames = []
    while (popped := buffer.pop()) is not None:
        frames.append(popped)
    return frames


def test_frames_fed_one_byte_at_a_time_are_reassembled():
    buffer = FrameBuffer(max_frame=1024)
    received = []
    for index in range(len(STREAM)):
        buffer.feed(STREAM[index : index + 1])
        received.extend(_drain(buffer))
    assert received == FRAMES


def test_a_frame_is_not_popped_before_its_last_byte_arrives():
    single = frame(protocol.ACT, b"payload")
    buffer = FrameBuffer(max_frame=1024)
    buffer.feed(single[:-1])
    assert buffer.pop() is None
    buffer.feed(single[-1:])
    assert buffer.pop() == (protocol.ACT, b"payload")
    assert buffer.pop() is None


def test_several_frames_in_one_feed_are_all_reassembled():
    buffer = FrameBuffer(max_frame=1024)
    buffer.feed(STREAM)
    assert _drain(buffer) == FRAMES


def test_frames_split_at_random_points_are_reassembled():
    rng = random.Random(0)
    for _ in range(50):
        buffer = FrameBuffer(max_frame=1024)
        received = []
        start = 0
        while start < len(STREAM):
            end = start + rng.randrange(1, 40)
            buffer.feed(STREAM[start:end])
            received.extend(_drain(buffer))
            start = end
        assert received == FRAMES


def test_feed_and_pop_returns_an_exact_frame():
    buffer = FrameBuffer(max_frame=1024)
    for kind, payload in FRAMES:
        popped = buffer.feed_and_pop(frame(kind, payload))
        assert popped is not None
        assert (popped[0], bytes(popped[1])) == (kind, payload)
    assert buffer.pop() is None


def test_feed_and_pop_reassembles_frames_fed_one_byte_at_a_time():
    buffer = FrameBuffer(max_frame=1024)
    received = []
    for index in range(len(STREAM)):
        popped = buffer.feed_and_pop(STREAM[index : index + 1])
        if popped is not None:
            received.append(popped)
            received.extend(_drain(buffer))
    assert received == FRAMES


def test_feed_and_pop_keeps_frames_after_the_first():
    buffer = FrameBuffer(max_frame=1024)
    first = buffer.feed_and_pop(STREAM)
    assert [first, *_drain(buffer)] == FRAMES


def test_feed_and_pop_refuses_a_frame_over_max_frame():
    buffer = FrameBuffer(max_frame=16)
    with pytest.raises(CodecError):
        buffer.feed_and_pop(frame(protocol.OBS, b"x" * 16))


def test_frame_of_exactly_max_frame_is_accepted():
    buffer = FrameBuffer(max_frame=16)
    buffer.feed(frame(protocol.OBS, b"x" * 15))
    assert buffer.pop() == (protocol.OBS, b"x" * 15)


def test_frame_announcing_more_than_max_frame_is_refused_from_its_header():
    buffer = FrameBuffer(max_frame=16)
    buffer.feed(frame(protocol.OBS, b"x" * 16)[: protocol.HEADER.size])
    with pytest.raises(CodecError):
        buffer.pop()


def test_frame_announcing_zero_length_is_refused():
    buffer = FrameBuffer(max_frame=16)
    buffer.feed(struct.pack("<IB", 0, protocol.OBS))
    with pytest.raises(CodecError):
        buffer.pop()
