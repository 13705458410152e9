"""The defects a new user met at the command line: each is one clear line and the documented exit status.

Exit statuses (README): 0 success, 1 the command ran and failed, 2 a usage error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from neverest.ctl import main

NOW = "2026-03-01T03:00:00Z"


def _daemon(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--no-mdns", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    return home


@pytest.mark.parametrize("listen, said", [
    ("7428", "give HOST:PORT"),
    ("127.0.0.1:70000", "from 0 to 65535"),
    ("127.0.0.1:http", "from 0 to 65535"),
    ("::1:7428", "IPv6 address in brackets"),
])
def test_a_bad_listen_address_is_a_usage_error(home: Path, listen: str, said: str) -> None:
    done = _daemon(home, "--listen", listen)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_port_in_use_is_one_line(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _daemon(home, "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert "the port is in use" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_output_closed_early_is_quiet_not_a_traceback(home: Path, tmp_path: Path) -> None:
    records = (Path(__file__).parent / "vectors" / "records.jsonl").read_bytes().splitlines()
    many = tmp_path / "many.jsonl"
    many.write_bytes(b"\n".join(records * 400) + b"\n")
    done = subprocess.run(f"{sys.executable} -m neverest.ctl verify {many} | head -n 1; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
    assert done.stdout.count("\n") == 1
    assert done.stderr == ""  # as `yes | head`: the reader went away, nothing to say
    assert done.returncode == 141  # 128 + SIGPIPE, what the shell reports for a Unix tool


def test_home_is_accepted_after_the_command(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json", "--home", str(home)]) == 0
    assert json.loads(capsys.readouterr().out)["home"] == str(home)
    # After the command it wins over the one before it.
    assert main(["--home", str(home / "elsewhere"), "status", "--home", str(home), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["home"] == str(home)


def test_revoke_and_unpublish_speak_json(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    error = ["--kind", "error", "--title", "make", "--happened", "fails without GNU make 4", "--cwd", str(project)]
    for session in ("a", "b"):
        assert main(["--home", str(home), "remember", *error, "--session", session]) == 0
    assert main(["--home", str(home), "sleep", "--json"]) == 0
    assert main(["--home", str(home), "publish", "--project", str(project), "--json"]) == 0
    lesson = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert lesson["signed"] == 1
    assert main(["--home", str(home), "lessons", "--json"]) == 0
    target = json.loads(capsys.readouterr().out)["hash"]
    assert main(["--home", str(home), "revoke", target[:8], "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"hash": target, "seq": 2}
    assert main(["--home", str(home), "unpublish", "--project", str(project), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"project": str(project.resolve()), "removed": True}


def test_publish_refuses_a_project_that_does_not_exist(home: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "publish", "--project", str(tmp_path / "typo")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["--home", str(home), "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["published_projects"] == []


def test_empty_lists_say_so(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "lessons"]) == 0
    assert "no lessons yet" in capsys.readouterr().out
    assert main(["--home", str(home), "peer", "list"]) == 0
    assert "no peers yet" in capsys.readouterr().out
    assert main(["--home", str(home), "lessons", "--json"]) == 0
    assert capsys.readouterr().out == ""  # JSON Lines stay empty for scripts


def test_status_says_the_last_sleep_once(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "sleep"]) == 0
    capsys.readouterr()
    assert main(["--home", str(home), "status"]) == 0
    out = capsys.readouterr().out
    assert "none yet" not in out and out.count("last sleep") == 1 and "2026-03-01T03:00" in out


def test_sleep_reports_when_it_finished(home: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEVEREST_NOW")
    assert main(["--home", str(home), "sleep", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["finished"] > report["started"]


def test_exit_statuses_follow_one_rule(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "recall", "x", "-k", "0"]) == 2  # usage
    assert main(["--home", str(home), "no-such-command"]) == 2  # usage (argparse)
    assert main(["--home", str(home), "revoke", "00"]) == 2  # usage: too short a hash
    assert main(["--home", str(home), "gossip", "--peer", "http://127.0.0.1:9"]) == 1  # ran, and failed
    capsys.readouterr()
    assert os.environ["NEVEREST_NOW"] == NOW
