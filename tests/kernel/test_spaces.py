"""Rules of kernel/spaces.py: descriptions are JSON values; actions are checked, never clipped."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson
import pytest
from gymnasium import spaces

from evopolicy.kernel.protocol import decode, encode
from evopolicy.kernel.spaces import InvalidAction, describe_space, to_action


def assert_plain_json(value: Any) -> None:
    """Only JSON-native Python types, all the way down (no numpy scalars or arrays)."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            assert_plain_json(item)
    elif isinstance(value, list):
        for item in value:
            assert_plain_json(item)
    else:
        assert value is None or type(value) in (bool, int, float, str), type(value)


# describe_space


def test_box_with_uniform_bounds_collapses_them_to_numbers():
    description = describe_space(spaces.Box(-1.0, 1.0, (3,), np.float32))
    assert description == {
        "kind": "box",
        "shape": [3],
        "dtype": "float32",
        "low": -1.0,
        "high": 1.0,
    }
    assert type(description["low"]) is float


def test_image_box_collapses_its_bounds_to_integers():
    description = describe_space(spaces.Box(0, 255, (84, 84, 3), np.uint8))
    assert description["shape"] == [84, 84, 3]
    assert description["dtype"] == "uint8"
    assert (description["low"], description["high"]) == (0, 255)
    assert type(description["high"]) is int


def test_box_with_per_dimension_bounds_lists_them():
    box = spaces.Box(
        np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32), dtype=np.float32
    )
    description = describe_space(box)
    assert description["low"] == [-1.0, -2.0]
    assert description["high"] == [1.0, 2.0]
    assert description["shape"] == [2]


def test_two_dimensional_box_with_varying_bounds_keeps_its_nesting():
    low = np.array([[0, 1], [2, 3]], dtype=np.int64)
    description = describe_space(spaces.Box(low, low + 10, dtype=np.int64))
    assert description["low"] == [[0, 1], [2, 3]]
    assert description["high"] == [[10, 11], [12, 13]]
    assert description["dtype"] == "int64"


def test_unbounded_box_describes_infinite_bounds():
    description = describe_space(spaces.Box(-np.inf, np.inf, (2,), np.float64))
    assert description["low"] == -math.inf
    assert description["high"] == math.inf


def test_discrete_describes_n_and_start():
    assert describe_space(spaces.Discrete(5, start=-1)) == {"kind": "discrete", "n": 5, "start": -1}
    assert describe_space(spaces.Discrete(2)) == {"kind": "discrete", "n": 2, "start": 0}


def test_multi_discrete_describes_nvec_and_start():
    description = describe_space(spaces.MultiDiscrete([3, 4], start=[0, -2]))
    assert description == {
        "kind": "multi_discrete",
        "nvec": [3, 4],
        "start": [0, -2],
        "dtype": "int64",
    }


def test_multi_binary_describes_its_shape():
    assert describe_space(spaces.MultiBinary(4)) == {"kind": "multi_binary", "n": 4}
    assert describe_space(spaces.MultiBinary([2, 3])) == {"kind": "multi_binary", "n": [2, 3]}


def test_dict_and_tuple_describe_their_parts_recursively():
    space = spaces.Dict(
        {
            "move": spaces.Discrete(3),
            "arms": spaces.Tuple((spaces.MultiBinary(2), spaces.Box(-1.0, 1.0, (1,)))),
        }
    )
    description = describe_space(space)
    assert description["kind"] == "dict"
    assert description["spaces"]["move"] == {"kind": "discrete", "n": 3, "start": 0}
    arms = description["spaces"]["arms"]
    assert arms["kind"] == "tuple"
    assert [part["kind"] for part in arms["spaces"]] == ["multi_binary", "box"]
    assert arms["spaces"][1]["low"] == -1.0


SPACES: dict[str, spaces.Space[Any]] = {
    "box_uniform": spaces.Box(-2.0, 2.0, (1,), np.float32),
    "box_vector": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "box_per_dimension": spaces.Box(
        np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32), dtype=np.float32
    ),
    "box_image": spaces.Box(0, 255, (4, 4, 3), np.uint8),
    "box_unbounded": spaces.Box(-np.inf, np.inf, (2,), np.float64),
    "box_half_bounded": spaces.Box(
        np.array([0.0, -np.inf]), np.array([np.inf, 1.0]), dtype=np.float64
    ),
    "box_int": spaces.Box(-5, 5, (2,), np.int64),
    "box_scalar_shape": spaces.Box(0.0, 1.0, shape=(), dtype=np.float32),
    "discrete": spaces.Discrete(3),
    "discrete_start_minus_one": spaces.Discrete(3, start=-1),
    "discrete_single": spaces.Discrete(1),
    "multi_discrete": spaces.MultiDiscrete([3, 4]),
    "multi_discrete_2d": spaces.MultiDiscrete([[2, 3], [4, 5]]),
    "multi_discrete_start": spaces.MultiDiscrete([3, 3], start=[-1, 5]),
    "multi_binary": spaces.MultiBinary(4),
    "multi_binary_2d": spaces.MultiBinary([2, 2]),
    "dict": spaces.Dict(
        {"move": spaces.Discrete(3), "force": spaces.Box(-1.0, 1.0, (1,), np.float32)}
    ),
    "tuple": spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3))),
    "nested": spaces.Tuple(
        (
            spaces.Dict({"a": spaces.Discrete(4, start=1), "b": spaces.MultiDiscrete([2, 2])}),
            spaces.Box(-1.0, 1.0, (2, 2), np.float32),
        )
    ),
}


@pytest.mark.parametrize("space", list(SPACES.values()), ids=list(SPACES))
def test_every_description_is_plain_json(space):
    description = describe_space(space)
    orjson.dumps(description)  # orjson refuses numpy values without an option
    assert_plain_json(description)
    assert isinstance(description["kind"], str)


# to_action: Discrete


DISCRETE = spaces.Discrete(3)


@pytest.mark.parametrize(
    "value",
    [2, np.int64(2), np.int32(2), np.uint8(2), np.array(2), np.array(2, dtype=np.uint16)],
    ids=["int", "int64", "int32", "uint8", "zero_d_int64", "zero_d_uint16"],
)
def test_discrete_accepts_integer_forms(value):
    action = to_action(DISCRETE, value)
    assert DISCRETE.contains(action)
    assert int(action) == 2


def test_discrete_with_start_accepts_its_lowest_value():
    space = spaces.Discrete(3, start=-1)
    assert int(to_action(space, -1)) == -1
    assert space.contains(to_action(space, -1))


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        np.bool_(True),
        1.0,
        np.float64(1.0),
        np.array(1.0),
        "1",
        b"1",
        [1],
        (1,),
        np.array([1]),
        None,
        3,
        -1,
        2**70,
        np.array(True),
        np.uint64(2**64 - 1),
    ],
    ids=repr,
)
def test_discrete_rejects_non_integers_and_out_of_range(value):
    with pytest.raises(InvalidAction):
        to_action(DISCRETE, value)


# to_action: Box

BOX = spaces.Box(-2.0, 2.0, (1,), np.float32)


@pytest.mark.parametrize(
    "value",
    [0.5, [0.5], np.array([0.5]), np.array([0.5], dtype=np.float32), np.float64(0.5), (0.5,)],
    ids=["float", "list", "float64_array", "float32_array", "float64_scalar", "tuple"],
)
def test_box_accepts_numeric_forms_and_converts_to_its_dtype_and_shape(value):
    action = to_action(BOX, value)
    assert isinstance(action, np.ndarray)
    assert action.dtype == np.float32
    assert action.shape == (1,)
    assert action[0] == np.float32(0.5)
    assert BOX.contains(action)


def test_box_accepts_its_exact_bounds():
    assert to_action(BOX, [2.0])[0] == 2.0
    assert to_action(BOX, -2.0)[0] == -2.0


@pytest.mark.parametrize("value", [2.5, [2.5], np.array([2.5]), -2.0001, 1e300, -math.inf])
def test_box_rejects_out_of_bounds_without_clipping(value):
    before = np.array(value, copy=True)
    with pytest.raises(InvalidAction) as caught:
        to_action(BOX, value)
    assert "not in" in str(caught.value)
    np.testing.assert_array_equal(np.asarray(value), before)  # the input was not clipped


def test_out_of_bounds_message_names_the_value():
    with pytest.raises(InvalidAction, match=r"2\.5"):
        to_action(BOX, 2.5)


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        [math.nan],
        [0.1, 0.2],
        [[0.1]] * 2,
        np.zeros((1, 1, 2)),
        [],
        "0.5",
        b"0.5",
        ["0.5"],
        [[0.1], [0.2, 0.3]],
        {"x": 0.5},
        None,
        [None],
        object(),
    ],
    ids=repr,
)
def test_box_rejects_nan_wrong_shapes_and_non_numbers(value):
    with pytest.raises(InvalidAction):
        to_action(BOX, value)


INT_BOX = spaces.Box(-5, 5, (2,), np.int64)


def test_int_box_accepts_integers():
    action = to_action(INT_BOX, [1, -5])
    assert INT_BOX.contains(action)
    np.testing.assert_array_equal(action, [1, -5])


@pytest.mark.parametrize(
    "value", [[1.0, 2.0], [1.5, 2], np.array([1.0, 2.0]), [True, False]], ids=repr
)
def test_int_box_rejects_floats(value):
    with pytest.raises(InvalidAction):
        to_action(INT_BOX, value)


def test_int_box_rejects_out_of_range_integers():
    with pytest.raises(InvalidAction):
        to_action(INT_BOX, [6, 0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int8])
def test_narrow_int_box_accepts_in_range_integer_lists(dtype):
    space = spaces.Box(0, 100, (3,), dtype)
    action = to_action(space, [1, 2, 3])
    assert space.contains(action)


def test_float_overflowing_float32_is_rejected_even_by_an_unbounded_box():
    space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
    with pytest.raises(InvalidAction):
        to_action(space, [1e300])


# to_action: MultiDiscrete and MultiBinary

MULTI_DISCRETE = spaces.MultiDiscrete([3, 4])
MULTI_BINARY = spaces.MultiBinary(3)


@pytest.mark.parametrize("value", [[2, 3], (0, 0), np.array([1, 2]), np.array([1, 2], np.uint8)])
def test_multi_discrete_accepts_integer_sequences(value):
    action = to_action(MULTI_DISCRETE, value)
    assert MULTI_DISCRETE.contains(action)
    np.testing.assert_array_equal(action, np.asarray(value))


@pytest.mark.parametrize(
    "value", [[2.0, 3.0], [1.5, 1], np.array([1.0, 2.0]), [3, 0], [-1, 0], [1], "12"], ids=repr
)
def test_multi_discrete_rejects_floats_wrong_shapes_and_out_of_range(value):
    with pytest.raises(InvalidAction):
        to_action(MULTI_DISCRETE, value)


@pytest.mark.parametrize("value", [[1, 0, 1], np.array([0, 0, 1]), [True, False, True]])
def test_multi_binary_accepts_zero_one_sequences(value):
    action = to_action(MULTI_BINARY, value)
    assert MULTI_BINARY.contains(action)
    np.testing.assert_array_equal(action, np.asarray(value, dtype=np.int8))


@pytest.mark.parametrize(
    "value", [[0.0, 1.0, 1.0], [2, 0, 0], [-1, 0, 0], [1, 0], [[1, 0, 1]]], ids=repr
)
def test_multi_binary_rejects_floats_wrong_shapes_and_non_binary(value):
    with pytest.raises(InvalidAction):
        to_action(MULTI_BINARY, value)


@pytest.mark.parametrize("value", [[256, 1, 0], [257, 0, 0], [0, 0, -255]], ids=repr)
def test_multi_binary_rejects_out_of_range_integers_rather_than_wrapping_them(value):
    with pytest.raises(InvalidAction):
        to_action(MULTI_BINARY, value)


# to_action: Dict and Tuple

DICT = spaces.Dict({"move": spaces.Discrete(3), "force": spaces.Box(-1.0, 1.0, (1,), np.float32)})
TUPLE = spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, (1,), np.float32)))


def test_dict_converts_each_part():
    action = to_action(DICT, {"move": 1, "force": 0.5})
    assert DICT.contains(action)
    assert set(action) == {"move", "force"}
    assert action["force"].dtype == np.float32
    assert action["force"].shape == (1,)
    assert int(action["move"]) == 1


@pytest.mark.parametrize(
    "value",
    [
        {"move": 1},
        {"move": 1, "force": 0.5, "extra": 0},
        {"move": 1.0, "force": 0.5},
        {"move": 1, "force": 1.5},
        [1, 0.5],
        "move",
        None,
    ],
    ids=repr,
)
def test_dict_rejects_missing_or_extra_keys_and_invalid_parts(value):
    with pytest.raises(InvalidAction):
        to_action(DICT, value)


@pytest.mark.parametrize("value", [[1, 0.5], (1, [0.5]), (np.int64(0), np.array([-1.0]))])
def test_tuple_converts_each_part(value):
    action = to_action(TUPLE, value)
    assert isinstance(action, tuple)
    assert TUPLE.contains(action)
    assert action[1].dtype == np.float32


@pytest.mark.parametrize(
    "value",
    [[1], [1, 0.5, 0], (), [1.0, 0.5], [2, 0.5], [1, 2.0], {0: 1, 1: 0.5}, 1, "ab"],
    ids=repr,
)
def test_tuple_rejects_wrong_lengths_and_invalid_parts(value):
    with pytest.raises(InvalidAction):
        to_action(TUPLE, value)


# Property: every sampled value is accepted, directly and after crossing the wire.


@pytest.mark.parametrize("space", list(SPACES.values()), ids=list(SPACES))
def test_sampled_action_is_converted_to_a_member_of_its_space(space):
    space.seed(0)
    for _ in range(25):
        sample = space.sample()
        assert space.contains(to_action(space, sample))
        assert space.contains(to_action(space, decode(encode(sample))))
