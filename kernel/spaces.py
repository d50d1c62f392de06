"""Gymnasium spaces as values: JSON-able descriptions, and checked action conversion.

Conversion only changes representation (list -> array, float64 -> float32, a lone
scalar -> shape (1,)); it never clips or repairs. `space.contains` is the legality check.
"""

from __future__ import annotations

import math
from functools import singledispatch
from typing import Any

import numpy as np
from gymnasium import spaces


class InvalidAction(ValueError):
    """The policy's action is not a member of the action space."""


def _bound(values: np.ndarray) -> float | list[Any]:
    # Uniform bounds (e.g. image pixels 0..255) collapse to one number.
    flat = values.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return flat[0].item()
    return values.tolist()


@singledispatch
def describe_space(space: spaces.Space[Any]) -> dict[str, Any]:
    """A JSON-able description of a space (kind plus its defining numbers)."""
    return {"kind": type(space).__name__.lower(), "repr": repr(space)}


@describe_space.register
def _(space: spaces.Box) -> dict[str, Any]:
    return {
        "kind": "box",
        "shape": list(space.shape),
        "dtype": str(space.dtype),
        "low": _bound(space.low),
        "high": _bound(space.high),
    }


@describe_space.register
def _(space: spaces.Discrete) -> dict[str, Any]:
    return {"kind": "discrete", "n": int(space.n), "start": int(space.start)}


@describe_space.register
def _(space: spaces.MultiDiscrete) -> dict[str, Any]:
    return {
        "kind": "multi_discrete",
        "nvec": space.nvec.tolist(),
        "start": space.start.tolist(),
        "dtype": str(space.dtype),
    }


@describe_space.register
def _(space: spaces.MultiBinary) -> dict[str, Any]:
    shape = space.n if isinstance(space.n, int) else list(space.n)
    return {"kind": "multi_binary", "n": shape}


@describe_space.register
def _(space: spaces.Dict) -> dict[str, Any]:
    return {"kind": "dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}


@describe_space.register
def _(space: spaces.Tuple) -> dict[str, Any]:
    return {"kind": "tuple", "spaces": [describe_space(s) for s in space.spaces]}


@describe_space.register
def _(space: spaces.Text) -> dict[str, Any]:
    return {
        "kind": "text",
        "min_length": space.min_length,
        "max_length": space.max_length,
        "charset": "".join(sorted(space.character_set)),
    }


def to_action(space: spaces.Space[Any], value: Any) -> Any:
    """Convert a decoded action to the space's representation and check membership.

    Raises:
        InvalidAction: the value has the wrong type or shape, or is not in the space.
    """
    if type(value) is int and type(space) is spaces.Discrete:
        # The per-step common case, checked exactly as Discrete.contains does.
        if space.start <= value < space.start + space.n:
            return space.dtype.type(value)
        raise InvalidAction(f"action {value} is not in {space}")
    action = _convert(space, value)
    try:
        contained = space.contains(action)
    except Exception as error:  # a space implementation choking is still the action's fault
        raise InvalidAction(f"action {_short(value)} was rejected by {space}: {error}") from None
    if not contained:
        raise InvalidAction(f"action {_short(value)} is not in {space}")
    return action


@singledispatch
def _convert(space: spaces.Space[Any], value: Any) -> Any:
    return value


@_convert.register
def _(space: spaces.Discrete, value: Any) -> Any:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer | np.ndarray):
        raise InvalidAction(f"action {_short(value)} must be an integer for {space}")
    if isinstance(value, np.ndarray):
        if value.shape != () or value.dtype.kind not in "iu":
            raise InvalidAction(f"action {_short(value)} must be an integer for {space}")
        value = value[()]
    return np.int64(value) if -(2**63) <= int(value) < 2**63 else int(value)


@_convert.register
def _(space: spaces.Box, value: Any) -> Any:
    array = _numeric_array(space, value)
    if space.dtype.kind == "f" and array.dtype.kind in "biuf":
        array = _to_float(array, space)
    elif space.dtype.kind in "iu":
        array = _to_integers(array, space)
    if array.shape != space.shape and array.size == 1 == math.prod(space.shape):
        array = array.reshape(space.shape)
    if array.shape != space.shape:
        raise InvalidAction(f"action has shape {array.shape}; {space} needs {space.shape}")
    return array


@_convert.register(spaces.MultiDiscrete)
@_convert.register(spaces.MultiBinary)
def _(space: spaces.MultiDiscrete | spaces.MultiBinary, value: Any) -> Any:
    array = _to_integers(_numeric_array(space, value), space)
    if array.shape != space.shape:
        raise InvalidAction(f"action has shape {array.shape}; {space} needs {space.shape}")
    return array


def _to_float(array: np.ndarray, space: spaces.Box) -> np.ndarray:
    # Only the precision changes; a finite value that overflows the space's dtype is
    # refused rather than turned into an infinity.
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(space.dtype)
    if np.any(np.isinf(cast) & ~np.isinf(array)):
        raise InvalidAction(f"action {_short(array)} is not in {space}: it overflows {space.dtype}")
    return cast


def _to_integers(array: np.ndarray, space: spaces.Space[Any]) -> np.ndarray:
    # Integers move to the space's dtype only when every value fits: never wrapped.
    # Booleans count as integers only for MultiBinary.
    if array.dtype.kind not in ("biu" if isinstance(space, spaces.MultiBinary) else "iu"):
        raise InvalidAction(f"action of dtype {array.dtype} must be integers for {space}")
    dtype = np.dtype(space.dtype)
    if array.size and array.dtype.kind != "b":
        bounds = np.iinfo(dtype)
        low, high = int(array.min()), int(array.max())
        if low < bounds.min or high > bounds.max:
            raise InvalidAction(f"action values {low}..{high} do not fit {dtype} for {space}")
    return array.astype(dtype)


@_convert.register
def _(space: spaces.Dict, value: Any) -> Any:
    if not isinstance(value, dict) or set(value) != set(space.spaces):
        raise InvalidAction(f"action must be a dict with keys {sorted(space.spaces)}")
    return {key: _convert(sub, value[key]) for key, sub in space.spaces.items()}


@_convert.register
def _(space: spaces.Tuple, value: Any) -> Any:
    if not isinstance(value, list | tuple) or len(value) != len(space.spaces):
        raise InvalidAction(f"action must be a sequence of {len(space.spaces)} actions")
    return tuple(_convert(sub, item) for sub, item in zip(space.spaces, value, strict=True))


def _numeric_array(space: spaces.Space[Any], value: Any) -> np.ndarray:
    if isinstance(value, str | bytes | dict):
        raise InvalidAction(f"action {_short(value)} is not numeric for {space}")
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as error:
        raise InvalidAction(f"action is not a numeric array for {space}: {error}") from None
    if array.dtype.kind not in "biuf":
        raise InvalidAction(f"action {_short(value)} is not numeric for {space}")
    return array


def _short(value: Any, limit: int = 120) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. an int too long to print
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
