"""Length-prefixed pickled messages between the host and its runner processes.

Both ends are trusted evopolicy code; the untrusted policy never touches this
channel (its process has neither descriptor).
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

_LENGTH = struct.Struct("<Q")


class ChannelClosed(EOFError):
    """The other end closed the channel or died."""


def send(fd: int, message: Any) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> Any:
    (length,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size))
    return pickle.loads(_read_exact(fd, length))


def _read_exact(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    while count:
        data = os.read(fd, min(count, 1 << 20))
        if not data:
            raise ChannelClosed("the other end of the channel closed")
        chunks.append(data)
        count -= len(data)
    return b"".join(chunks)
