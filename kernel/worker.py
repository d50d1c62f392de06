"""The policy side of the worker protocol: load the program, call make_policy, answer act.

This code shares its process with the untrusted policy, so nothing it says is
trusted: the runner decodes every frame with limits and judges outcomes itself.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import sys
import traceback
from types import TracebackType
from typing import Any, NoReturn

from evopolicy.kernel import protocol
from evopolicy.kernel.policy import PolicyContext

_TRACEBACK_CHARS = 8_000


def serve(fd_in: int, fd_out: int) -> NoReturn:
    """Run the episode's protocol on the two descriptors, then exit the process."""
    reader = protocol.FrameBuffer(max_frame=1 << 31)
    kind, payload = _read_frame(fd_in, reader)
    if kind != protocol.INIT:
        os._exit(3)
    init = protocol.decode(payload)
    program_dir = os.path.abspath(init["program_dir"])
    act = _start(init["context"], program_dir, fd_out)
    _write(fd_out, protocol.frame(protocol.READY))
    encode, decode, frame, OBS, ACT = (
        protocol.encode,
        protocol.decode,
        protocol.frame,
        protocol.OBS,
        protocol.ACT,
    )
    while True:
        kind, payload = _read_frame(fd_in, reader)
        if kind != OBS:
            os._exit(0)
        observation = decode(payload)
        try:
            action = act(observation)
        except BaseException as error:
            _fail(fd_out, error, program_dir)
        try:
            encoded = encode(action)
        except BaseException as error:
            _fail_encode(fd_out, action, error)
        _write(fd_out, frame(ACT, encoded))


def _start(context: dict[str, Any], program_dir: str, fd_out: int) -> Any:
    sys.dont_write_bytecode = True
    sys.path.insert(0, program_dir)
    try:
        entry = os.path.join(program_dir, "policy.py")
        spec = importlib.util.spec_from_file_location("policy", entry)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["policy"] = module
        spec.loader.exec_module(module)
        make_policy = getattr(module, "make_policy", None)
        if not callable(make_policy):
            _send_failure(fd_out, "exception", "policy.py defines no make_policy(context)", "")
        policy = make_policy(PolicyContext(**context))
        act = getattr(policy, "act", None)
        if not callable(act):
            _send_failure(
                fd_out,
                "exception",
                f"make_policy returned {type(policy).__name__!s:.80}, which has no act(observation)",
                "",
            )
        return act
    except BaseException as error:
        _fail(fd_out, error, program_dir)


def _fail(fd_out: int, error: BaseException, program_dir: str) -> NoReturn:
    outcome = "exception"
    if isinstance(error, MemoryError) or (
        isinstance(error, OSError) and error.errno in (errno.EFBIG, errno.ENOSPC)
    ):
        outcome = "resource_limit"
    message = f"{type(error).__name__}: {error}"
    _send_failure(fd_out, outcome, message, _program_traceback(error, program_dir))


def _fail_encode(fd_out: int, action: object, error: BaseException) -> NoReturn:
    try:
        kind = type(action).__name__
    except BaseException:
        kind = "object"
    _send_failure(
        fd_out,
        "protocol_error",
        f"act returned a value that cannot be sent ({kind!s:.80}): {error!s:.300}",
        "",
    )


def _send_failure(fd_out: int, outcome: str, message: str, trace: str) -> NoReturn:
    try:
        body = protocol.encode(
            {"outcome": outcome, "message": str(message)[:2_000], "traceback": trace}
        )
        _write(fd_out, protocol.frame(protocol.FAIL, body))
    finally:
        os._exit(1)


def _program_traceback(error: BaseException, program_dir: str) -> str:
    # Keep the frames of the program: the worker's own frames tell the agent nothing.
    try:
        tb: TracebackType | None = error.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(program_dir):
            tb = tb.tb_next
        lines = traceback.format_exception(type(error), error, tb or error.__traceback__)
        text = "".join(lines).replace(program_dir + os.sep, "")
    except BaseException:
        return ""
    return text[-_TRACEBACK_CHARS:]


def _read_frame(fd: int, reader: protocol.FrameBuffer) -> tuple[int, bytes]:
    while True:
        frame = reader.pop()
        if frame is not None:
            return frame
        data = os.read(fd, 1 << 16)
        if not data:
            os._exit(0)
        reader.feed(data)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
