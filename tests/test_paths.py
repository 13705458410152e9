"""Which folders may be a memory's home, and that everything in one is private to its owner."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from neverest.paths import HomeError, find_home, init_home, open_home, private_umask, secure_home


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_missing_home_is_refused_and_not_created(tmp_path: Path) -> None:
    typo = tmp_path / "neverst"
    with pytest.raises(HomeError) as caught:
        open_home(typo, create=False)
    assert str(typo) in str(caught.value)
    assert f"neverestctl init --home {typo}" in str(caught.value)
    assert not typo.exists()


def test_init_creates_a_private_home(tmp_path: Path) -> None:
    home = init_home(tmp_path / "a" / "home")
    assert home.is_dir() and mode(home) == 0o700
    assert open_home(home, create=False) == home  # an empty folder is a home waiting for first use


def test_a_home_naming_a_file_is_a_clear_error(tmp_path: Path) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("hello")
    for create in (False, True):
        with pytest.raises(HomeError, match="is a file, not a folder"):
            open_home(afile, create=create)
    with pytest.raises(HomeError, match="inside a file"):
        open_home(afile / "home", create=True)
    assert afile.read_text() == "hello"


def test_a_folder_of_other_things_is_not_taken_for_a_home(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    os.chmod(project, 0o755)  # whatever the umask of this process (neverestctl's main sets 077)
    (project / "setup.py").write_text("")
    os.chmod(project / "setup.py", 0o644)
    for create in (False, True):
        with pytest.raises(HomeError, match="no Neverest memory"):
            open_home(project, create=create)
    assert mode(project) == 0o755 and mode(project / "setup.py") == 0o644  # nothing of theirs was touched
    (project / "config.toml").write_text("")  # a folder configured for a memory is one
    assert open_home(project, create=False) == project


def test_only_the_default_location_is_created_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert find_home(None, {}) == tmp_path / ".neverest"
    assert mode(tmp_path / ".neverest") == 0o700
    with pytest.raises(HomeError, match="does not exist"):
        find_home(None, {"NEVEREST_HOME": str(tmp_path / "env-home")})
    with pytest.raises(HomeError, match="does not exist"):
        find_home(str(tmp_path / "flag-home"), {})
    assert not (tmp_path / "env-home").exists() and not (tmp_path / "flag-home").exists()
    assert find_home(str(tmp_path / "flag-home"), {}, init=True).is_dir()
    assert find_home(None, {"NEVEREST_HOME": str(tmp_path / "env-home")}, init=True).is_dir()


@pytest.mark.parametrize("named", ["{home}/.neverest", "~/.neverest", "{home}/.neverest/", "{home}/./.neverest"])
def test_the_default_location_named_by_neverest_home_is_created_as_the_default_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], named: str) -> None:
    from neverest.ctl import main

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NEVEREST_HOME", named.format(home=tmp_path))
    assert main(["status", "--json"]) == 0, capsys.readouterr().err
    assert (tmp_path / ".neverest").is_dir() and mode(tmp_path / ".neverest") == 0o700
    shutil.rmtree(tmp_path / ".neverest")  # and named by --home
    assert find_home(named.format(home=tmp_path), {}) == Path(named.format(home=tmp_path)).expanduser()
    assert (tmp_path / ".neverest").is_dir()


def test_an_open_home_is_private_whatever_its_mode_before(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o755)
    with sqlite3.connect(home / "memory.db") as db:
        db.execute("CREATE TABLE episodes (said TEXT)")
        db.execute("INSERT INTO episodes VALUES ('a raw session')")
    db.close()
    for name in ("memory.db", "inbox.jsonl", "lessons.md"):
        (home / name).touch()
        os.chmod(home / name, 0o644)
    (home / "sub").mkdir(mode=0o755)
    (home / "sub" / "f").touch()
    os.chmod(home / "sub" / "f", 0o664)
    outside = tmp_path / "shared.txt"
    outside.touch()
    os.chmod(outside, 0o644)
    (home / "link").symlink_to(outside)
    (home / "identity.key").touch()
    os.chmod(home / "identity.key", 0o644)
    assert open_home(home, create=False) == home
    assert mode(home / "identity.key") == 0o644  # left for identity to refuse: the owner must hear of it
    assert mode(home) == 0o700 and mode(home / "sub") == 0o700
    for name in ("memory.db", "inbox.jsonl", "lessons.md", "sub/f"):
        assert mode(home / name) == 0o600, name
    assert mode(outside) == 0o644  # a link is not followed
    assert secure_home(home) == []  # nothing left to change


def test_files_sqlite_creates_later_are_born_private(tmp_path: Path) -> None:
    home = init_home(tmp_path / "home")
    with private_umask():
        db = sqlite3.connect(home / "memory.db")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
        db.commit()
        for name in ("memory.db", "memory.db-wal", "memory.db-shm"):
            assert mode(home / name) == 0o600, name
        db.close()


def test_private_umask_restores_the_previous_one(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with private_umask():
            (tmp_path / "inside").touch()
        (tmp_path / "after").touch()
        assert mode(tmp_path / "inside") == 0o600 and mode(tmp_path / "after") == 0o644
    finally:
        os.umask(old)


def test_a_secured_store_keeps_its_wal_private_under_a_lax_umask(tmp_path: Path) -> None:
    """Why securing memory.db is enough for the files SQLite makes beside it: SQLite gives the -wal and
    -shm files the database file's mode, whatever the umask."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    old = os.umask(0o022)
    try:
        sqlite3.connect(home / "memory.db").close()
        (home / "memory.db").write_bytes(b"")
        assert mode(home / "memory.db") == 0o644
        open_home(home, create=False)
        db = sqlite3.connect(home / "memory.db")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (x)")
        db.commit()
        assert mode(home / "memory.db-wal") == 0o600 and mode(home / "memory.db-shm") == 0o600
        db.close()
    finally:
        os.umask(old)
