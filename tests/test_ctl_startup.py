"""neverestctl's start-up: the grammar imports no command, the read commands ask a running daemon
(and print what they print without one), every command's "module:function" resolves."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from neverest import config, ctl, logs, relay
from neverest.agents import hook
from neverest.client import running
from neverest.clock import FixedClock
from neverest.commands import memory as memory_commands
from neverest.commands import relay as relay_commands
from neverest.config import Config
from neverest.identity import Identity
from neverest.memory import events
from neverest.memory.service import PUBLIC_KEY_META, Memory
from neverest.paths import KEY_FILE
from neverest.records import KINDS

# What no `--help`, and no read command answered by a daemon, may load in the neverestctl process.
HEAVY = ("numpy", "trio", "httpx", "nacl", "sqlite3", "neverest.memory.service", "neverest.verify_pool")


def test_the_grammar_spells_the_choices_of_the_modules_it_does_not_import() -> None:
    assert ctl.LESSON_KINDS == KINDS
    assert ctl.EVENT_KINDS == events.EVENT_KINDS
    assert ctl.EVENT_FIELDS == memory_commands.EVENT_FIELDS
    assert (ctl.HOLDOUT_ENV, ctl.DEFAULT_HOLDOUT, ctl.EXPLAIN_ENV) == (
        hook.HOLDOUT_ENV, hook.DEFAULT_HOLDOUT, hook.EXPLAIN_ENV)
    assert (ctl.RELAY_NOTE_KINDS, ctl.RELAY_LIMIT, ctl.PROXY_LISTEN) == (
        relay_commands.NOTE_KINDS, relay.DEFAULT_LIMIT, relay_commands.DEFAULT_PROXY_LISTEN)


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from _commands(sub)


def test_every_command_names_a_function_that_exists() -> None:
    named = [p.get_default("func") for p in _commands(ctl.build_parser()) if p.get_default("func")]
    assert len(named) >= 30
    for func in named:
        assert callable(ctl.runner(func)), func


def _grammar(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """What a parser accepts, nested commands included: every action's options, destination, choices and
    default, and every command's function."""
    return [(tuple(a.option_strings), a.dest, a.nargs, a.required,
             tuple(a.choices) if a.choices is not None and not isinstance(a, argparse._SubParsersAction) else None,
             a.default) for a in parser._actions] + [
        (p.prog, p.get_default("func"), tuple(_grammar(p))) for p in _commands(parser)]


def test_a_command_line_naming_a_command_builds_that_command_alone_and_the_same() -> None:
    full = ctl.build_parser()
    top = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert len(top.choices) >= 30
    for name, whole in top.choices.items():
        one = ctl.build_parser(only=name)
        only = next(a for a in one._actions if isinstance(a, argparse._SubParsersAction))
        assert list(only.choices) == [name]  # the others were not built
        assert _grammar(only.choices[name]) == _grammar(whole), name
    # A word that is no command builds them all, so that the error lists the choices.
    unknown = ctl.build_parser(only="no-such-command")
    assert list(next(a for a in unknown._actions if isinstance(a, argparse._SubParsersAction)).choices) == list(
        top.choices)


def test_an_unknown_command_is_refused_with_every_choice_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl.main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in err and "'lessons'" in err and "'trust'" in err


# What `lessons` and `status` need not load without a daemon either: the passes, the crypto, the safety rule's
# and the project logs' modules (the memory service imports them on use).
PASSES = ("numpy", "trio", "httpx", "nacl", "neverest.safety", "neverest.relay")
# Nor what costs 2-9 ms a process for nothing they use (docs/figures.md, start-up): dataclasses (with inspect),
# hashlib (OpenSSL's bindings; the digests come from neverest.hashes), shutil (argparse's default width), and
# socket while no daemon's socket file exists.
LEAN = ("dataclasses", "inspect", "hashlib", "shutil", "socket")


def _loaded(argv: list[str], env: dict[str, str]) -> set[str]:
    watched = set(HEAVY) | set(PASSES) | set(LEAN) | {"neverest.memory.publish"}
    code = ("import sys; from neverest.ctl import main; status = main(sys.argv[1:]); "
            f"print(sorted(set(sys.modules) & {watched!r}), file=sys.stderr); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, check=True)
    return set(eval(done.stderr.strip().splitlines()[-1]))


def test_the_config_spells_the_log_levels_of_the_logging_set_up() -> None:
    assert config.LOG_LEVELS == tuple(logs.LEVELS)


def test_the_public_key_is_read_from_the_store_only_for_the_seed_it_was_filed_for(tmp_path: Path) -> None:
    home = tmp_path / "home"
    clock = FixedClock(datetime(2026, 3, 1, tzinfo=UTC))
    with Memory.open(home, Config(), clock) as memory:  # first open: derived with PyNaCl, then filed
        derived = memory.identity
        filed = memory.store.get_meta(PUBLIC_KEY_META)
    assert filed == f"{derived.seed_tag}:{bytes(derived.signing_key.verify_key).hex()}"
    with Memory.open(home, Config(), clock) as memory:
        assert memory.identity.known_public == derived.public_key
        assert memory.identity.origin == derived.origin and memory.identity == derived
    # Another key file in the same home (a restored backup): the filed key is not its own, so it is derived.
    other = Identity.from_seed(bytes(range(32)))
    (home / KEY_FILE).unlink()
    (home / KEY_FILE).write_text(other.seed.hex() + "\n")
    (home / KEY_FILE).chmod(0o600)
    with Memory.open(home, Config(), clock) as memory:
        assert memory.identity.known_public is None
        assert memory.identity.origin == other.origin != derived.origin
        assert memory.store.get_meta(PUBLIC_KEY_META) == f"{other.seed_tag}:{other.public_key.hex()}"


def test_help_loads_no_command(tmp_path: Path) -> None:
    assert _loaded(["--help"], dict(os.environ, NEVEREST_HOME=str(tmp_path / "home"))) == set()


@pytest.fixture
def daemon_home(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("gossip_every_s = 3600.0\n")
    env = dict(os.environ, NEVEREST_HOME=str(home), NEVEREST_NOW="2026-03-01T03:00:00Z")
    ctl_argv = [sys.executable, "-m", "neverest.ctl"]
    for i in range(6):
        subprocess.run([*ctl_argv, "remember", "--kind", "error", "--title", f"make run {i % 2}", "--happened",
                        "fails with missing target", "--session", f"s{i}"], env=env, check=True, capture_output=True)
    subprocess.run([*ctl_argv, "sleep"], env=env, check=True, capture_output=True)
    yield home, env


def _out(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "neverest.ctl", *argv], env=env, capture_output=True, text=True)
    return done.returncode, done.stdout


def test_read_commands_print_the_same_with_a_daemon_and_load_no_memory(daemon_home: tuple[Path, dict[str, str]]
                                                                       ) -> None:
    home, env = daemon_home
    asked = (["lessons"], ["lessons", "--json"], ["lessons", "--kind", "correction"], ["recall", "make run"],
             ["recall", "make run", "--json", "-k", "2"], ["recall", ""])
    # recall touches the episodes it returns (a later recall scores them otherwise): the same reads,
    # in the same order, on a copy of the home with no daemon give what the daemon must give.
    # Without a daemon the read commands open the memory here, but not its passes: no numpy, trio or httpx,
    # no crypto (the public key is read from the store) and none of the safety rule's or project logs' modules.
    assert not _loaded(["status"], env) & {*PASSES, *LEAN}
    assert not _loaded(["lessons"], env) & {*PASSES, *LEAN, "neverest.memory.publish"}
    assert not _loaded(["recall", "make run"], env) & {*PASSES, *LEAN}  # the hashed space without numpy
    shutil.copytree(home, home.parent / "copy")
    alone = [_out(argv, env | {"NEVEREST_HOME": str(home.parent / "copy")}) for argv in asked]
    assert alone[0][1].startswith("hash") and "make run" in alone[3][1]
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--listen", "127.0.0.1:0", "--no-mdns"],
                            env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not running(home):
            assert proc.poll() is None and time.monotonic() < deadline, "neverestd did not start"
            time.sleep(0.05)
        for argv, expected in zip(asked, alone, strict=True):
            assert _out(argv, env) == expected, argv
        for argv in (["lessons"], ["recall", "make run"], ["status"]):
            assert _loaded(argv, env) <= {"socket"}, argv  # the daemon is asked through it
        assert _out(["recall", "x", "-k", "0"], env)[0] == 2
    finally:
        proc.terminate()
        proc.wait(30)
