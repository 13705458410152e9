"""The configuration: the safe trust default, static peers, log settings, and the example that lists every field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from neverest.config import Config, ConfigError, _kind, config_warnings, load_config, log_file_path

EXAMPLE = Path(__file__).parent.parent / "docs" / "config.example.toml"


def test_the_example_lists_every_setting_with_its_default(tmp_path: Path) -> None:
    written = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert sorted(written) == sorted(Config._fields)
    assert load_config(tmp_path, {}, path=EXAMPLE) == Config()


def test_the_default_trust_is_the_safest_policy_and_any_warns(tmp_path: Path) -> None:
    config = load_config(tmp_path, {})
    assert config.trust == "earned" and config_warnings(config) == []
    (tmp_path / "config.toml").write_text('trust = "any"\n')
    chosen = load_config(tmp_path, {})
    assert chosen.trust == "any"  # an explicit choice is honoured...
    [warning] = config_warnings(chosen)  # ...and flagged
    assert 'trust = "any"' in warning and '"earned"' in warning
    assert config_warnings(load_config(tmp_path, {"NEVEREST_TRUST": "peers"})) == []


def test_earned_parameters_are_checked(tmp_path: Path) -> None:
    for bad in ("trust_damping = 0.0", "trust_damping = 1.0", "trust_steps = 0"):
        (tmp_path / "config.toml").write_text(bad + "\n")
        with pytest.raises(ConfigError, match=bad.split(" ")[0]):
            load_config(tmp_path, {})


def test_static_peers_from_toml_environment_and_flags(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('peers = ["http://192.0.2.7:7428", "198.51.100.4:7428", '
                                          '"https://[2001:db8::1]:7428/", "http://192.0.2.7:7428"]\n')
    assert load_config(tmp_path, {}).peers == ("http://192.0.2.7:7428", "http://198.51.100.4:7428",
                                               "https://[2001:db8::1]:7428")
    env = {"NEVEREST_PEERS": "http://a.example:7428, b.example:7428,"}
    assert load_config(tmp_path, env).peers == ("http://a.example:7428", "http://b.example:7428")
    assert load_config(tmp_path, env, peers=["http://c.example:1"]).peers == ("http://c.example:1",)
    assert load_config(tmp_path, {"NEVEREST_PEERS": ""}).peers == ()


@pytest.mark.parametrize("toml, message", [
    ('peers = "http://a:1"\n', None),  # a string in TOML is read like the environment's list
    ("peers = [1, 2]\n", "not a list of strings"),
    ('peers = ["ftp://a:1"]\n', "not an http"),
    ('peers = ["http://a:99999"]\n', "invalid port"),
    ('peers = ["http://a:1/gossip"]\n', "only scheme, host and port"),
    ("peers = {a = 1}\n", "not a list of strings"),
])
def test_bad_peers_are_refused_with_the_reason(tmp_path: Path, toml: str, message: str | None) -> None:
    (tmp_path / "config.toml").write_text(toml)
    if message is None:
        assert load_config(tmp_path, {}).peers == ("http://a:1",)
        return
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path, {})


def test_log_settings_are_checked_at_load(tmp_path: Path) -> None:
    assert load_config(tmp_path, {}).log_level == "info"
    assert load_config(tmp_path, {"NEVEREST_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    with pytest.raises(ConfigError, match=r"log_level: .*debug, info, warning, error"):
        load_config(tmp_path, {"NEVEREST_LOG_LEVEL": "loud"})
    config = load_config(tmp_path, {"NEVEREST_LOG_FILE": "neverestd.log"})
    assert log_file_path(config, tmp_path) == tmp_path / "neverestd.log"
    assert log_file_path(load_config(tmp_path, {"NEVEREST_LOG_FILE": "/var/log/n.log"}), tmp_path) == \
        Path("/var/log/n.log")
    assert log_file_path(Config(), tmp_path) is None


@pytest.mark.parametrize("env, message", [
    ({"NEVEREST_MDNS": "maybe"}, "mdns: 'maybe' is not true or false"),
    ({"NEVEREST_GOSSIP_EVERY_S": "nan"}, "gossip_every_s: 'nan' is not a number"),
    ({"NEVEREST_FANOUT": "3.5"}, "fanout: '3.5' is not a whole number"),
])
def test_values_that_would_be_misread_are_refused(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path, env)
    (tmp_path / "config.toml").write_text('listen = ["0.0.0.0:7428"]\n')
    with pytest.raises(ConfigError, match=r"listen: .* is not a string"):
        load_config(tmp_path, {})
    assert load_config(tmp_path, {"NEVEREST_MDNS": "off"}, listen="127.0.0.1:0").mdns is False


def test_the_agents_wired_come_from_the_file_or_the_environment_and_unknown_ones_are_refused(tmp_path: Path) -> None:
    assert load_config(tmp_path, {}).agents == ()  # nothing wired by default: no agent's file is touched
    (tmp_path / "config.toml").write_text('agents = ["codex", "claude-code", "codex"]\n')
    assert load_config(tmp_path, {}).agents == ("codex", "claude-code")
    assert load_config(tmp_path, {"NEVEREST_AGENTS": "claude-code"}).agents == ("claude-code",)
    assert load_config(tmp_path, {"NEVEREST_AGENTS": ""}).agents == ()
    with pytest.raises(ConfigError, match="'cursor' not one of claude-code, codex"):
        load_config(tmp_path, {"NEVEREST_AGENTS": "cursor"})


def _leaves(value: object) -> list[object]:
    """Every value a section holds, tuples opened."""
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_every_setting_is_read_through_exactly_the_sections() -> None:
    # Give every setting a value no other holds, then find each one in the sections: a setting added to
    # Config and forgotten in its section fails here.
    distinct: dict[str, object] = {}
    for i, name in enumerate(Config._fields):
        kind = _kind(name)
        if name == "profile" or kind is bool:
            continue
        distinct[name] = {float: 1000.5 + i, int: 2000 + i, str: f"value-{i}", tuple: (f"item-{i}",)}[kind]
    config = Config()._replace(**distinct)  # type: ignore[arg-type]
    held = [leaf for section in config.sections for leaf in _leaves(section)]
    for name, value in distinct.items():
        wanted = value[0] if isinstance(value, tuple) else value
        assert wanted in held, f"{name} is in no section"
    for flag in ("mdns", "log_json", "api_allow_remote"):
        flipped = Config()._replace(**{flag: not getattr(Config(), flag)})  # type: ignore[arg-type]
        assert flipped.sections != Config().sections, f"{flag} is in no section"


def test_a_profile_sets_defaults_that_the_file_environment_and_flags_still_override(tmp_path: Path) -> None:
    assert load_config(tmp_path, {}).sections.gossip.every_s == 900.0  # "lan": the documented defaults
    (tmp_path / "config.toml").write_text('profile = "local"\nexchange_timeout_s = 7.5\n')
    local = load_config(tmp_path, {})
    assert local.profile == "local"
    assert local.sections.gossip.listen == "127.0.0.1:7428" and local.sections.gossip.every_s == 10.0
    assert local.sections.discovery.mdns_interfaces == ("127.0.0.1",)  # zeroconf stays on loopback
    assert local.sections.gossip.exchange_timeout_s == 7.5  # the file's line wins over the profile
    assert load_config(tmp_path, {"NEVEREST_GOSSIP_EVERY_S": "3"}).sections.gossip.every_s == 3.0
    assert load_config(tmp_path, {}, listen="127.0.0.1:9").listen == "127.0.0.1:9"
    wan = load_config(tmp_path, {"NEVEREST_PROFILE": "WAN"})
    assert wan.profile == "wan" and not wan.sections.discovery.mdns and wan.sections.gossip.every_s == 1800.0
    (tmp_path / "config.toml").write_text('profile = "moon"\n')
    with pytest.raises(ConfigError, match="profile: 'moon' is not one of lan, wan, local"):
        load_config(tmp_path, {})


def test_a_config_is_read_only_and_copied_with_replace() -> None:
    config = Config()
    with pytest.raises(AttributeError, match="read-only"):
        config.fanout = 9  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read-only"):
        config.anything = 1
    wider = config._replace(fanout=9)
    assert (config.fanout, wider.fanout, wider.sections.gossip.fanout) == (3, 9, 9)
    assert config.sections.gossip.fanout == 3  # the copy's sections are its own
