"""Program: an immutable, content-addressed snapshot of a policy source folder."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from evopolicy.kernel.errors import ProgramError

ENTRY_FILE = "policy.py"
_DIGEST_DOMAIN = b"evopolicy/program/v1\0"
_SKIPPED_DIRS = frozenset({".git", "__pycache__"})
_SKIPPED_SUFFIXES = (".pyc",)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramLimits:
    """Size limits a snapshot must respect."""

    max_files: int = 1_000
    max_total_bytes: int = 64 * 1024 * 1024
    max_file_bytes: int = 16 * 1024 * 1024


DEFAULT_PROGRAM_LIMITS = ProgramLimits()
_UNLIMITED = ProgramLimits(max_files=2**62, max_total_bytes=2**62, max_file_bytes=2**62)


class Program:
    """Immutable snapshot of a program: relative POSIX path -> bytes, plus its digest.

    Build one with `Program.from_directory` or `Program.from_files`. The digest is
    SHA-256 over a domain tag and the length-prefixed (path, bytes) pairs in sorted
    path order, so two copies of the same tree have the same digest wherever they live.
    """

    __slots__ = ("_digest", "_files", "_total_bytes")

    _files: Mapping[str, bytes]
    _digest: str
    _total_bytes: int

    def __init__(self) -> None:
        raise TypeError("build a Program with Program.from_directory or Program.from_files")

    @classmethod
    def _create(cls, files: dict[str, bytes], limits: ProgramLimits) -> Program:
        if len(files) > limits.max_files:
            raise ProgramError("too_many_files", f"program has more than {limits.max_files} files")
        total = 0
        for path, data in files.items():
            _check_path(path)
            if len(data) > limits.max_file_bytes:
                raise ProgramError(
                    "file_too_large",
                    f"{path} is {len(data)} bytes; the limit is {limits.max_file_bytes}",
                )
            total += len(data)
        if total > limits.max_total_bytes:
            raise ProgramError(
                "program_too_large",
                f"program is {total} bytes; the limit is {limits.max_total_bytes}",
            )
        if ENTRY_FILE not in files:
            raise ProgramError("missing_policy", f"program has no {ENTRY_FILE}")
        ordered = dict(sorted(files.items()))
        self = object.__new__(cls)
        object.__setattr__(self, "_files", MappingProxyType(ordered))
        object.__setattr__(self, "_digest", _digest(ordered))
        object.__setattr__(self, "_total_bytes", total)
        return self

    @classmethod
    def from_files(
        cls, files: Mapping[str, str | bytes], *, limits: ProgramLimits = DEFAULT_PROGRAM_LIMITS
    ) -> Program:
        """Snapshot an in-memory mapping of relative path -> text (UTF-8) or bytes.

        Raises:
            ProgramError: a path is not a clean relative path, a limit is exceeded, or
                there is no policy.py.
        """
        snapshot: dict[str, bytes] = {}
        for path, content in files.items():
            if not isinstance(path, str):
                raise ProgramError("invalid_path", f"path {path!r} is not a string")
            if _is_skipped(PurePosixPath(path).parts):
                continue
            if isinstance(content, str):
                snapshot[path] = content.encode("utf-8")
            elif isinstance(content, bytes | bytearray | memoryview):
                snapshot[path] = bytes(content)
            else:
                raise ProgramError(
                    "invalid_content", f"{path} holds {type(content).__name__}, not text or bytes"
                )
        return cls._create(snapshot, limits)

    @classmethod
    def from_directory(
        cls, root: str | os.PathLike[str], *, limits: ProgramLimits = DEFAULT_PROGRAM_LIMITS
    ) -> Program:
        """Snapshot a folder. Skips .git, __pycache__ and *.pyc.

        Raises:
            ProgramError: the folder is missing, holds a symlink or special file, a limit
                is exceeded, or there is no policy.py.
        """
        base = Path(root)
        if not base.is_dir():
            raise ProgramError("not_a_directory", f"{os.fspath(root)!r} is not a directory")
        files: dict[str, bytes] = {}
        total = 0
        pending = [PurePosixPath()]
        while pending:
            relative_dir = pending.pop()
            try:
                entries = sorted(os.scandir(base / relative_dir), key=lambda e: e.name)
            except OSError as error:
                raise ProgramError("unreadable", f"cannot list {relative_dir}: {error}") from None
            for entry in entries:
                relative = relative_dir / entry.name
                if _is_skipped(relative.parts):
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    raise ProgramError("symlink", f"{relative} is a symbolic link")
                if stat.S_ISDIR(mode):
                    pending.append(relative)
                    continue
                if not stat.S_ISREG(mode):
                    raise ProgramError("special_file", f"{relative} is not a regular file")
                if len(files) >= limits.max_files:
                    raise ProgramError(
                        "too_many_files", f"program has more than {limits.max_files} files"
                    )
                data = _read_bounded(Path(entry.path), relative, limits.max_file_bytes)
                total += len(data)
                if total > limits.max_total_bytes:
                    raise ProgramError(
                        "program_too_large",
                        f"program exceeds {limits.max_total_bytes} bytes",
                    )
                files[relative.as_posix()] = data
        return cls._create(files, limits)

    @property
    def digest(self) -> str:
        """Hex SHA-256 content address."""
        return self._digest

    @property
    def files(self) -> Mapping[str, bytes]:
        """Read-only mapping of relative path -> bytes, in sorted path order."""
        return self._files

    @property
    def total_bytes(self) -> int:
        return self._total_bytes

    def write_to(self, destination: Path) -> None:
        """Materialize the files below `destination` (which must not hold other files)."""
        for path, data in self._files.items():
            target = destination.joinpath(*PurePosixPath(path).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Program is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Program is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and other._digest == self._digest

    def __hash__(self) -> int:
        return hash(self._digest)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (dict(self._files),))

    def __repr__(self) -> str:
        return (
            f"Program(digest={self._digest[:12]}, files={len(self._files)}, "
            f"bytes={self._total_bytes})"
        )


def _restore(files: dict[str, bytes]) -> Program:
    # The limits were checked when the snapshot was first taken, perhaps looser ones.
    return Program._create(files, _UNLIMITED)


def _digest(files: Mapping[str, bytes]) -> str:
    hasher = hashlib.sha256(_DIGEST_DOMAIN)
    for path, data in files.items():
        encoded = path.encode("utf-8")
        hasher.update(len(encoded).to_bytes(8, "little"))
        hasher.update(encoded)
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
    return hasher.hexdigest()


def _is_skipped(parts: tuple[str, ...]) -> bool:
    if any(part in _SKIPPED_DIRS for part in parts[:-1]):
        return True
    return bool(parts) and (parts[-1] in _SKIPPED_DIRS or parts[-1].endswith(_SKIPPED_SUFFIXES))


def _check_path(path: str) -> None:
    pure = PurePosixPath(path)
    if (
        not path
        or pure.is_absolute()
        or "\\" in path
        or "\0" in path
        or pure.as_posix() != path
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        raise ProgramError("invalid_path", f"{path!r} is not a clean relative path")


def _read_bounded(path: Path, relative: PurePosixPath, limit: int) -> bytes:
    # Read one byte past the limit so a file that grows after stat() is still caught.
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise ProgramError("unreadable", f"cannot read {relative}: {error}") from None
    if len(data) > limit:
        raise ProgramError("file_too_large", f"{relative} is over {limit} bytes")
    return data
