"""Rules of kernel/program.py: content-addressed, validated, immutable program snapshots."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from evopolicy.kernel.errors import ProgramError
from evopolicy.kernel.program import Program, ProgramLimits

TREE: dict[str, bytes] = {
    "policy.py": b"def make_policy(context):\n    return lambda observation: 0\n",
    "helpers/__init__.py": b"",
    "helpers/math_utils.py": b"def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n",
    "helpers/deep/nested/table.bin": bytes(range(256)),
    "README.md": "notes \N{GREEK SMALL LETTER ALPHA}\n".encode(),
}


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for relative, data in files.items():
        target = root.joinpath(*relative.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def rejection(action, *args, **kwargs) -> ProgramError:
    with pytest.raises(ProgramError) as caught:
        action(*args, **kwargs)
    assert caught.value.code == "program_invalid"
    return caught.value


# Digest: the same content has the same address wherever it lives.


def test_two_copies_of_a_tree_in_different_folders_have_the_same_digest(tmp_path):
    first = Program.from_directory(write_tree(tmp_path / "first", TREE))
    second = Program.from_directory(write_tree(tmp_path / "elsewhere" / "second", TREE))
    assert first.digest == second.digest
    assert first == second
    assert hash(first) == hash(second)


def test_directory_and_mapping_of_the_same_content_have_the_same_digest(tmp_path):
    from_disk = Program.from_directory(write_tree(tmp_path / "program", TREE))
    from_memory = Program.from_files(TREE)
    assert from_disk.digest == from_memory.digest
    assert dict(from_disk.files) == TREE


def test_text_and_utf8_bytes_give_the_same_digest():
    as_text = {path: data.decode("utf-8") for path, data in TREE.items() if path.endswith(".py")}
    as_bytes = {path: data for path, data in TREE.items() if path.endswith(".py")}
    assert Program.from_files(as_text).digest == Program.from_files(as_bytes).digest


def test_mapping_order_does_not_change_the_digest():
    forward = Program.from_files(TREE)
    backward = Program.from_files(dict(reversed(list(TREE.items()))))
    assert forward.digest == backward.digest
    assert list(forward.files) == sorted(TREE)


def test_digest_is_a_hex_sha256():
    digest = Program.from_files(TREE).digest
    assert len(digest) == 64
    assert int(digest, 16) >= 0


def _flip_one_byte(files: dict[str, bytes]) -> dict[str, bytes]:
    table = bytearray(files["helpers/deep/nested/table.bin"])
    table[100] ^= 0x01
    return {**files, "helpers/deep/nested/table.bin": bytes(table)}


def _rename_one_file(files: dict[str, bytes]) -> dict[str, bytes]:
    changed = dict(files)
    changed["helpers/math_util.py"] = changed.pop("helpers/math_utils.py")
    return changed


def _move_one_file(files: dict[str, bytes]) -> dict[str, bytes]:
    changed = dict(files)
    changed["math_utils.py"] = changed.pop("helpers/math_utils.py")
    return changed


def _append_one_byte(files: dict[str, bytes]) -> dict[str, bytes]:
    return {**files, "policy.py": files["policy.py"] + b"\n"}


def _add_empty_file(files: dict[str, bytes]) -> dict[str, bytes]:
    return {**files, "empty.txt": b""}


def _drop_one_file(files: dict[str, bytes]) -> dict[str, bytes]:
    return {path: data for path, data in files.items() if path != "README.md"}


EDITS = [
    _flip_one_byte,
    _rename_one_file,
    _move_one_file,
    _append_one_byte,
    _add_empty_file,
    _drop_one_file,
]


@pytest.mark.parametrize("edit", EDITS, ids=lambda edit: edit.__name__.strip("_"))
def test_any_change_of_bytes_or_paths_changes_the_digest(edit, tmp_path):
    original = Program.from_files(TREE)
    edited_files = edit(TREE)
    assert edited_files != TREE
    edited = Program.from_files(edited_files)
    assert edited.digest != original.digest
    on_disk = Program.from_directory(write_tree(tmp_path / "edited", edited_files))
    assert on_disk.digest == edited.digest


def test_moving_bytes_between_path_and_content_changes_the_digest():
    # Length prefixes keep ("ab", "c") and ("a", "bc") apart.
    first = Program.from_files({"policy.py": b"", "ab": b"c"})
    second = Program.from_files({"policy.py": b"", "a": b"bc"})
    assert first.digest != second.digest


# Required entry point.


def test_directory_without_policy_py_is_rejected(tmp_path):
    files = {path: data for path, data in TREE.items() if path != "policy.py"}
    error = rejection(Program.from_directory, write_tree(tmp_path / "program", files))
    assert error.problem == "missing_policy"


def test_mapping_without_policy_py_is_rejected():
    error = rejection(Program.from_files, {"main.py": "print(1)"})
    assert error.problem == "missing_policy"


def test_policy_py_only_in_a_subfolder_does_not_count():
    error = rejection(Program.from_files, {"sub/policy.py": "x = 1"})
    assert error.problem == "missing_policy"


def test_missing_folder_is_not_a_directory(tmp_path):
    error = rejection(Program.from_directory, tmp_path / "absent")
    assert error.problem == "not_a_directory"


def test_regular_file_is_not_a_directory(tmp_path):
    path = tmp_path / "policy.py"
    path.write_text("x = 1")
    error = rejection(Program.from_directory, path)
    assert error.problem == "not_a_directory"


# Only regular files and folders may be snapshotted.


def test_symlink_to_a_file_in_program_is_rejected(tmp_path):
    root = write_tree(tmp_path / "program", TREE)
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "helpers" / "link.txt").symlink_to(outside)
    error = rejection(Program.from_directory, root)
    assert error.problem == "symlink"
    assert "link.txt" in str(error)


def test_symlink_to_a_directory_in_program_is_rejected(tmp_path):
    root = write_tree(tmp_path / "program", TREE)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.py").write_text("x = 1")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    error = rejection(Program.from_directory, root)
    assert error.problem == "symlink"
    assert "linked" in str(error)


def test_dangling_symlink_in_program_is_rejected(tmp_path):
    root = write_tree(tmp_path / "program", TREE)
    (root / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    error = rejection(Program.from_directory, root)
    assert error.problem == "symlink"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_in_program_is_rejected(tmp_path):
    root = write_tree(tmp_path / "program", TREE)
    os.mkfifo(root / "helpers" / "pipe")
    error = rejection(Program.from_directory, root)
    assert error.problem == "special_file"
    assert "pipe" in str(error)


# Caches and version control are not part of a program.

SKIPPED = {
    ".git/HEAD": b"ref: refs/heads/main\n",
    ".git/objects/ab/cdef": b"\x78\x9c",
    "__pycache__/policy.cpython-311.pyc": b"\x00\x01",
    "helpers/__pycache__/math_utils.cpython-311.pyc": b"\x00\x02",
    "helpers/stale.pyc": b"\x00\x03",
    "compiled.pyc": b"\x00\x04",
}


def test_skipped_entries_do_not_change_the_directory_digest(tmp_path):
    clean = Program.from_directory(write_tree(tmp_path / "clean", TREE))
    cluttered = Program.from_directory(write_tree(tmp_path / "cluttered", {**TREE, **SKIPPED}))
    assert cluttered.digest == clean.digest
    assert set(cluttered.files) == set(TREE)


def test_skipped_entries_do_not_change_the_mapping_digest():
    clean = Program.from_files(TREE)
    cluttered = Program.from_files({**TREE, **SKIPPED})
    assert cluttered.digest == clean.digest
    assert set(cluttered.files) == set(TREE)


def test_symlink_inside_a_skipped_folder_is_ignored(tmp_path):
    root = write_tree(tmp_path / "program", TREE)
    (root / ".git").mkdir()
    (root / ".git" / "link").symlink_to(tmp_path)
    assert Program.from_directory(root).digest == Program.from_files(TREE).digest


# Size limits.


def test_too_many_files_in_directory_is_rejected(tmp_path):
    files = {"policy.py": b"", "a.py": b"", "b.py": b""}
    root = write_tree(tmp_path / "program", files)
    assert set(Program.from_directory(root, limits=ProgramLimits(max_files=3)).files) == set(files)
    error = rejection(Program.from_directory, root, limits=ProgramLimits(max_files=2))
    assert error.problem == "too_many_files"


def test_too_many_files_in_mapping_is_rejected():
    files = {"policy.py": b"", "a.py": b"", "b.py": b""}
    assert len(Program.from_files(files, limits=ProgramLimits(max_files=3)).files) == 3
    error = rejection(Program.from_files, files, limits=ProgramLimits(max_files=2))
    assert error.problem == "too_many_files"


def test_file_over_the_file_limit_in_directory_is_rejected(tmp_path):
    limits = ProgramLimits(max_file_bytes=10)
    exact = write_tree(tmp_path / "exact", {"policy.py": b"x" * 10})
    assert Program.from_directory(exact, limits=limits).total_bytes == 10
    over = write_tree(tmp_path / "over", {"policy.py": b"x", "data.bin": b"x" * 11})
    error = rejection(Program.from_directory, over, limits=limits)
    assert error.problem == "file_too_large"
    assert "data.bin" in str(error)


def test_file_over_the_file_limit_in_mapping_is_rejected():
    limits = ProgramLimits(max_file_bytes=10)
    assert Program.from_files({"policy.py": b"x" * 10}, limits=limits).total_bytes == 10
    error = rejection(Program.from_files, {"policy.py": b"x" * 11}, limits=limits)
    assert error.problem == "file_too_large"


def test_program_over_the_total_limit_in_directory_is_rejected(tmp_path):
    limits = ProgramLimits(max_total_bytes=20, max_file_bytes=10)
    exact = write_tree(tmp_path / "exact", {"policy.py": b"x" * 10, "b.py": b"y" * 10})
    assert Program.from_directory(exact, limits=limits).total_bytes == 20
    over = write_tree(tmp_path / "over", {"policy.py": b"x" * 10, "b.py": b"y" * 10, "c.py": b"z"})
    error = rejection(Program.from_directory, over, limits=limits)
    assert error.problem == "program_too_large"


def test_program_over_the_total_limit_in_mapping_is_rejected():
    limits = ProgramLimits(max_total_bytes=20, max_file_bytes=10)
    files = {"policy.py": b"x" * 10, "b.py": b"y" * 10}
    assert Program.from_files(files, limits=limits).total_bytes == 20
    error = rejection(Program.from_files, {**files, "c.py": b"z"}, limits=limits)
    assert error.problem == "program_too_large"


# Paths in a mapping must be clean relative POSIX paths.

INVALID_PATHS = ["../x.py", "/abs.py", "a//b.py", "./a.py", "a\\b.py", "", "a/../b.py", "a/"]


@pytest.mark.parametrize("path", INVALID_PATHS)
def test_unclean_path_in_mapping_is_rejected(path):
    error = rejection(Program.from_files, {"policy.py": "x = 1", path: "y = 2"})
    assert error.problem == "invalid_path"


def test_non_string_path_in_mapping_is_rejected():
    error = rejection(Program.from_files, {"policy.py": "x = 1", 3: "y = 2"})
    assert error.problem == "invalid_path"


# Immutability and identity.


def test_program_cannot_be_built_by_calling_the_class():
    with pytest.raises(TypeError):
        Program()


@pytest.mark.parametrize("name", ["_digest", "_files", "digest", "new_attribute"])
def test_program_attributes_cannot_be_set(name):
    program = Program.from_files(TREE)
    digest = program.digest
    with pytest.raises(AttributeError):
        setattr(program, name, "tampered")
    assert program.digest == digest


def test_program_attributes_cannot_be_deleted():
    program = Program.from_files(TREE)
    digest = program.digest
    with pytest.raises(AttributeError):
        del program._digest
    assert program.digest == digest


def test_program_files_mapping_is_read_only():
    program = Program.from_files(TREE)
    with pytest.raises(TypeError):
        program.files["policy.py"] = b"tampered"  # type: ignore[index]
    assert program.files["policy.py"] == TREE["policy.py"]


def test_program_does_not_follow_later_changes_to_its_source_mapping():
    source = dict(TREE)
    program = Program.from_files(source)
    digest = program.digest
    source["policy.py"] = b"changed"
    assert program.files["policy.py"] == TREE["policy.py"]
    assert program.digest == digest


def test_pickling_round_trips_with_the_same_digest():
    program = Program.from_files(TREE)
    restored = pickle.loads(pickle.dumps(program))
    assert isinstance(restored, Program)
    assert restored.digest == program.digest
    assert dict(restored.files) == dict(program.files)
    assert restored == program


def test_repr_shows_the_digest_prefix_and_not_contents():
    secret = b"TOP_SECRET_TOKEN = 'hunter2'\n"
    program = Program.from_files({"policy.py": secret})
    text = repr(program)
    assert program.digest[:12] in text
    assert "hunter2" not in text
    assert "TOP_SECRET" not in text
    assert "policy.py" not in text


# Writing back out.


def test_write_to_materializes_a_tree_that_snapshots_to_the_same_digest(tmp_path):
    program = Program.from_files(TREE)
    destination = tmp_path / "out"
    program.write_to(destination)
    assert (destination / "helpers" / "deep" / "nested" / "table.bin").read_bytes() == bytes(
        range(256)
    )
    assert Program.from_directory(destination).digest == program.digest


def test_write_to_then_copy_keeps_the_digest(tmp_path):
    program = Program.from_directory(write_tree(tmp_path / "source", TREE))
    program.write_to(tmp_path / "written")
    shutil.copytree(tmp_path / "written", tmp_path / "copied")
    assert Program.from_directory(tmp_path / "copied").digest == program.digest


def test_pickling_round_trips_a_program_built_under_larger_limits():
    files = {"policy.py": b""} | {f"data/{index:04d}.txt": b"" for index in range(1_000)}
    program = Program.from_files(files, limits=ProgramLimits(max_files=2_000))
    restored = pickle.loads(pickle.dumps(program))
    assert restored.digest == program.digest
