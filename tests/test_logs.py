"""Logging: levels by name, readable or JSON lines, a private log file that survives logrotate."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from neverest.logs import setup_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    quiet = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    yield
    for handler in root.handlers[:]:
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in quiet.items():
        logging.getLogger(name).setLevel(old)


def lines(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_bad_level_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        setup_logging(level="verbose")


def test_json_lines_to_a_private_file_at_the_chosen_level(tmp_path: Path) -> None:
    path = tmp_path / "neverestd.log"
    path.write_text('{"at": "before", "level": "INFO", "logger": "x", "message": "kept"}\n')
    os.chmod(path, 0o600)
    old = os.umask(0o022)
    try:
        setup_logging(level="WARNING", json=True, file=path)
    finally:
        os.umask(old)
    log = logging.getLogger("neverestd")
    log.info("not at this level")
    log.warning("peer %s refused: %s", "http://192.0.2.7:7428", 'a "quoted"\nreason')
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    got = lines(path)
    assert [g["message"] for g in got] == ["kept", 'peer http://192.0.2.7:7428 refused: a "quoted"\nreason', "failed"]
    assert got[1]["level"] == "WARNING" and got[1]["logger"] == "neverestd" and got[1]["at"].endswith("Z")
    assert "RuntimeError: boom" in got[2]["exc"]


def test_a_new_log_file_is_born_private_and_reopened_after_rotation(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "neverestd.log"
    path.parent.mkdir()
    old = os.umask(0o022)
    try:
        setup_logging(level="debug", file=path)
        logging.getLogger("neverestd").debug("first")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        path.rename(path.with_suffix(".log.1"))  # what logrotate does
        logging.getLogger("neverestd").info("second")
    finally:
        os.umask(old)
    assert "first" in path.with_suffix(".log.1").read_text()
    text = path.read_text()
    assert "second" in text and "first" not in text and " INFO neverestd: second" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_log_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot open the log file .*missing"):
        setup_logging(file=tmp_path / "missing" / "x.log")


def test_http_clients_stay_quiet_at_info(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(level="info")
    assert logging.getLogger().handlers[0].stream is sys.stderr  # type: ignore[attr-defined]
    logging.getLogger("httpx").info("HTTP Request: POST http://127.0.0.1:7428/gossip/v1/exchange 200")
    logging.getLogger("httpcore").info("connect_tcp.started")
    logging.getLogger("httpx").warning("a warning still shows")
    logging.getLogger("neverestd").info("ready")
    err = capsys.readouterr().err
    assert "HTTP Request" not in err and "connect_tcp" not in err
    assert "a warning still shows" in err and "INFO neverestd: ready" in err
