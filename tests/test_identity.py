"""The memory's key: made on first use, private, refused when others can read it."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from neverest.identity import IdentityError, load_or_create
from neverest.paths import KEY_FILE, resolve_home
from neverest.records import origin_of


def test_key_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = load_or_create(home)
    path = home / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    second = load_or_create(home)
    assert first.origin == second.origin == origin_of(first.public_key)
    assert len(first.key) == 64 and len(first.origin) == 16


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_key_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    load_or_create(tmp_path)
    os.chmod(tmp_path / KEY_FILE, mode)
    with pytest.raises(IdentityError, match="chmod 600"):
        load_or_create(tmp_path)


def test_corrupt_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE
    path.write_text("not a key\n")
    os.chmod(path, 0o600)
    with pytest.raises(IdentityError, match="seed"):
        load_or_create(tmp_path)


def _origin_in_child(home: str) -> str:
    return load_or_create(Path(home)).origin


def test_processes_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        origins = pool.map(_origin_in_child, [str(tmp_path)] * 8)
    assert len(set(origins)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE]


def test_home_resolution_order(tmp_path: Path) -> None:
    env = {"NEVEREST_HOME": str(tmp_path / "env")}
    assert resolve_home(str(tmp_path / "flag"), env) == tmp_path / "flag"
    assert resolve_home(None, env) == tmp_path / "env"
    assert resolve_home(None, {"HOME": str(tmp_path)}) == Path("~/.neverest").expanduser()
