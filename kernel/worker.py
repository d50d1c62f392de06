"""The policy side of the worker protocol: load the program, call make_policy, answer act.

This code shares its process with the untrusted policy, so nothing it says is
trusted: the runner decodes every frame with limits and judges outcomes itself.
"""

from __future__ import annotations

import errno
import marshal
import os
import random
import sys
import traceback
import types
from typing import Any, NoReturn

import numpy

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
    program_dir = init["program_dir"]
    act = _start(init["context"], program_dir, init["code"], fd_out)
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


def _start(context: dict[str, Any], program_dir: str, code: bytes | None, fd_out: int) -> Any:
    # Paths stay relative to the episode folder (the cwd): tracebacks name
    # "program/policy.py", never a host path.
    sys.dont_write_bytecode = True
    sys.path.insert(0, program_dir)
    _seed_global_generators(context["policy_seed"])
    try:
        entry = f"{program_dir}/policy.py"
        module = types.ModuleType("policy")
        module.__file__ = entry
        sys.modules["policy"] = module
        if code is None:  # the runner could not compile it: compile here for the traceback
            with open(entry, "rb") as handle:
                compiled = compile(handle.read(), entry, "exec")
        else:
            compiled = marshal.loads(code)
        exec(compiled, module.__dict__)
        make_policy = getattr(module, "make_policy", None)
        if not callable(make_policy):
            _send_failure(fd_out, "exception", "policy.py defines no make_policy(context)", "")
        policy = make_policy(PolicyContext(**context))
        act = getattr(policy, "act", None)
        if not callable(act):
            _send_failure(
                fd_out,
                "exception",
                f"make_policy returned {type(policy).__name__!s:.80}, "
                "which has no act(observation)",
                "",
            )
        return act
    except BaseException as error:
        _fail(fd_out, error, program_dir)


def _seed_global_generators(policy_seed: int) -> None:
    # A policy that draws from `random` or `np.random` without seeding still gets
    # the same numbers for the same episode, whichever process runs it.
    random.seed(policy_seed)
    numpy.random.seed(policy_seed % 2**32)


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
    prefix = program_dir + "/"
    try:
        tb: types.TracebackType | None = error.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(prefix):
            tb = tb.tb_next
        lines = traceback.format_exception(type(error), error, tb or error.__traceback__)
        text = "".join(lines)
    except BaseException:
        return ""
    return text[-_TRACEBACK_CHARS:]


def _read_frame(fd: int, reader: protocol.FrameBuffer) -> tuple[int, bytes]:
    frame = reader.pop()
    while frame is None:
        data = os.read(fd, 1 << 16)
        if not data:
            os._exit(0)
        frame = reader.feed_and_pop(data)
    return frame


def _write(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]
