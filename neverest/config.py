"""The one configuration object.

Values come, in order of precedence, from command-line flags, then the
environment (``NEVEREST_<FIELD>`` in upper case; a list like ``peers`` is
comma-separated there), then ``config.toml`` in the home, then the defaults
below.  Every duration and size carries its unit in its name.  Commands map their
flags onto these fields; they never repeat defaults.  ``docs/config.example.toml``
lists every field with its default (a test keeps the two equal).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from neverest.logs import parse_level
from neverest.paths import CONFIG_FILE


class ConfigError(Exception):
    """config.toml or an environment variable holds something unusable."""


@dataclass(frozen=True)
class Config:
    # The store: how long a writer waits for another process's lock.
    busy_timeout_s: float = 5.0
    # Optional local models behind OpenAI-compatible URLs (e.g. http://127.0.0.1:11434/v1).
    # Unset: the deterministic hashed embedding and the template sentences.
    embed_url: str = ""
    embed_model: str = ""
    writer_url: str = ""
    writer_model: str = ""
    model_timeout_s: float = 30.0
    # Sleep thresholds (README, "How a memory sleeps").
    decay_half_life_days: float = 45.0
    archive_below: float = 0.15
    prediction_window_days: float = 14.0
    predict_min_strength: float = 1.0
    # Strength steps (PROTOCOL.md §7 records them).
    lesson_initial_strength: float = 1.0
    join_step: float = 0.5
    confirm_step: float = 0.5
    fail_step: float = 0.5
    strength_cap: float = 5.0
    # Sharing.  Records signed further ahead of this clock are refused until it catches up.
    future_tolerance_s: float = 600.0
    # Worker processes that verify received records (batches of at least 32 lines to verify;
    # smaller ones are verified in the receiving process): -1 one per CPU, 0 none.
    verify_processes: int = -1
    support_n: int = 3
    window_days: float = 90.0
    revoke_quorum: int = 3
    # Which origins count as support: "earned" (trust earned from verified history and passed along, after
    # EigenTrust, with this memory and the named origins as pre-trusted peers: commons.earned; the default,
    # the one the README's sweep measures against adaptive adversaries), "vouched" (origins whose claims this memory
    # tested itself, none refuted: commons.vouched), "peers" (origins in the peer table), or "any" (every
    # origin: the simulations in the README show it making every false lesson common, so it is never the
    # default and config_warnings flags it); named origins (trust_allow, and those `neverestctl trust add`
    # keeps in the store) count under every policy.
    trust: str = "earned"
    trust_allow: str = ""  # comma-separated origins
    trust_damping: float = 0.15  # "earned": share of trust that returns to this memory at each hop
    trust_steps: int = 6  # "earned": hops trust travels from this memory
    vouch_min_verified: int = 2  # "vouched": lessons an origin supported that came true here
    vouch_min_resolved: int = 10  # "vouched": lessons this memory must have tested before it vouches for anyone
    # "vouched" and "earned": days a lesson is held here before it can be common here: one prediction
    # window, so that every lesson has had a full window to come true, or fail, in this memory's own
    # sessions, or in those of the memories it trusts, first.
    vouch_quarantine_days: float = 14.0
    # Layers (PROTOCOL.md §9): lessons received from these origins (comma-separated) form the
    # "domain" layer (a language's, a tool's, a codebase's memory); all others the "common" one.
    domain_origins: str = ""
    # Storage taken from peers (memory/budget.py): bytes of received records held, 0 = no bound.  Records of
    # origins this memory trusts (trust_allow, domain_origins, peers added by hand or in the config, origins
    # whose lessons came true here) are never refused or evicted for it; strangers' fill only what is left.
    received_budget_bytes: int = 256 * 1024 * 1024  # everything received, trusted origins included
    received_origin_budget_bytes: int = 4 * 1024 * 1024  # one untrusted origin
    received_peer_budget_bytes: int = 16 * 1024 * 1024  # untrusted origins' records delivered by one peer or source
    received_exchange_budget_bytes: int = 2 * 1024 * 1024  # untrusted records taken from one exchange or sync
    declined_remember_s: float = 86400.0  # how long an origin refused or evicted for the budget stays refused
    # Refutations (PROTOCOL.md §1, "Refutations"): at most this many are held per origin, the first received;
    # later ones are refused as refute-flood, and this memory signs no more than this itself.  0 = no bound.
    refute_origin_max: int = 256
    # The daemon (neverestd).  Times of day are the machine's local time.
    sleep_at: str = "03:00"  # the nightly sleep, HH:MM
    inbox_every_s: float = 2.0  # how often the inbox file is drained
    folder: str = ""  # a shared folder synced after every sleep ("" = none)
    control_timeout_s: float = 10.0  # how long a control-socket client may take to send its request
    log_json: bool = False  # log JSON lines instead of readable ones
    log_level: str = "info"  # debug, info, warning or error
    log_file: str = ""  # append the log here (relative: to the home; reopened after logrotate); "" = stderr
    # Gossip.  The peer-facing listener serves only POST /gossip/v1/exchange.
    listen: str = "0.0.0.0:7428"  # HOST:PORT
    gossip_every_s: float = 900.0  # a round every 15 minutes, and one after every sleep
    gossip_quiet_every_s: float = 60.0  # rounds finding all in sync space out up to this; news: back to every_s
    fanout: int = 3  # peers per round
    gossip_budget_bytes: int = 1024 * 1024  # records per answer; a cut answer resumes next exchange
    exchange_timeout_s: float = 60.0  # one request and its whole answer
    gossip_cutoff_after: int = 16  # invalid requests from one address (or origin) within gossip_cutoff_s ...
    gossip_cutoff_s: float = 60.0  # ... and it is answered 429, unread, for this long
    # Discovery.  mdns_interfaces: comma-separated IPs to use for zeroconf, "" = all interfaces.
    mdns: bool = True
    mdns_interfaces: str = ""
    peers: tuple[str, ...] = ()  # static peer URLs, always known: ["http://192.0.2.7:7428", ...]
    directory: str = ""  # a URL or a file listing peers ("" = none)
    directory_every_s: float = 300.0
    # The HTTP commons (PROTOCOL.md §14): pushed to and pulled from after every sleep when set.
    commons_url: str = ""
    commons_token_file: str = ""
    commons_announce: str = ""  # this daemon's URL for peers, announced to the commons' directory ("" = don't)
    # The agents' doors.  agents: the agents the owner wired (``neverestctl setup`` writes it, ``--undo`` takes it
    # back): only their session files are read and only their memory files written ("claude-code", "codex").
    # Session files are read every ingest_every_s and before each sleep ("" = the agent's default folder:
    # ~/.claude/projects, and $CODEX_HOME/sessions or ~/.codex/sessions).
    agents: tuple[str, ...] = ()
    ingest_every_s: float = 60.0
    claude_dir: str = ""
    codex_dir: str = ""
    # The share of agent sessions the hooks inject nothing into, to measure what injecting changes.
    holdout: float = 0.5


_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off", "")
_KINDS: Final[dict[str, type]] = {"str": str, "float": float, "int": int, "bool": bool, "tuple[str, ...]": tuple}
_WHAT: Final[dict[type, str]] = {str: "a string", float: "a number", int: "a whole number", bool: "true or false"}


def _kind(name: str) -> type:
    field_type = next(f.type for f in fields(Config) if f.name == name)
    return _KINDS[str(field_type)]


def _coerce(name: str, kind: type, value: Any) -> Any:
    if kind is tuple:
        return _coerce_list(name, value)
    try:
        if kind is float and not isinstance(value, bool):
            number = float(value)
            if number == number and number not in (float("inf"), float("-inf")):
                return number
        elif kind is int and not isinstance(value, bool) and not isinstance(value, float):
            return int(value)
        elif kind is str and isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        elif kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"{name}: {value!r} is not {_WHAT[kind]}")


def _coerce_list(name: str, value: Any) -> tuple[str, ...]:
    """A list of strings from TOML (``["a", "b"]``), or a comma-separated string (environment, flags)."""
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ConfigError(f"{name}: {value!r} is not a list of strings")
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{name}: {value!r} is not a list of strings")
    return tuple(item.strip() for item in items if item.strip())


def _peer_url(url: str) -> str:
    """``http://host:port`` from a peer address as written in the config (``host:port`` means http)."""
    text = url if "://" in url else f"http://{url}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ConfigError(f"peers: {url!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"peers: {url!r} is not an http:// or https:// address with a host")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"peers: {url!r}: give only scheme, host and port, like http://192.0.2.7:7428")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


TRUST_POLICIES: Final = ("any", "peers", "vouched", "earned")
AGENTS: Final = ("claude-code", "codex")  # the agents whose files the doors read and write (config ``agents``)
MAX_PEERS: Final = 1000  # a static list longer than this is a mistake, not a network


def load_config(home: Path, env: Mapping[str, str] | None = None, *, path: Path | None = None,
                **overrides: Any) -> Config:
    """Defaults < config.toml (``path``, else the home's) < NEVEREST_* environment < ``overrides``
    (flags; None means unset)."""
    environ = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = path or home / CONFIG_FILE
    if path.exists():
        try:
            values.update(tomllib.loads(path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    names = [f.name for f in fields(Config)]
    unknown = set(values) - set(names)
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(sorted(unknown))}")
    for name in names:
        env_value = environ.get(f"NEVEREST_{name.upper()}")
        if env_value is not None:
            values[name] = env_value
    unknown = {k for k, v in overrides.items() if v is not None} - set(names)
    if unknown:
        raise TypeError(f"load_config: no setting(s) {', '.join(sorted(unknown))}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    config = dataclasses.replace(Config(), **{k: _coerce(k, _kind(k), v) for k, v in values.items()})
    if config.trust not in TRUST_POLICIES:
        raise ConfigError(f"trust: {config.trust!r} is not one of {', '.join(TRUST_POLICIES)}")
    if not 0.0 < config.trust_damping < 1.0:
        raise ConfigError(f"trust_damping: {config.trust_damping!r} is not between 0 and 1 (exclusive)")
    if config.trust_steps < 1:
        raise ConfigError(f"trust_steps: {config.trust_steps!r} is not a positive number of hops")
    for name in ("received_budget_bytes", "received_origin_budget_bytes", "received_peer_budget_bytes",
                 "received_exchange_budget_bytes", "declined_remember_s", "refute_origin_max"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name}: {getattr(config, name)!r} is negative (0 turns the bound off)")
    unknown_agents = [a for a in config.agents if a not in AGENTS]
    if unknown_agents:
        raise ConfigError(f"agents: {', '.join(map(repr, unknown_agents))} not one of {', '.join(AGENTS)}")
    if not 0.0 <= config.holdout <= 1.0:
        raise ConfigError(f"holdout: {config.holdout!r} is not a share between 0 and 1")
    try:
        sleep_time(config)
    except ValueError:
        raise ConfigError(f"sleep_at: {config.sleep_at!r} is not a time of day like 03:00") from None
    try:
        parse_level(config.log_level)
    except ValueError as exc:
        raise ConfigError(f"log_level: {exc}") from None
    if not config.gossip_quiet_every_s > 0:
        raise ConfigError(f"gossip_quiet_every_s: {config.gossip_quiet_every_s!r} must be above 0")
    if config.gossip_cutoff_after < 1 or config.gossip_cutoff_s <= 0:
        raise ConfigError("gossip_cutoff_after must be at least 1 and gossip_cutoff_s above 0")
    if len(config.peers) > MAX_PEERS:
        raise ConfigError(f"peers: {len(config.peers)} addresses; at most {MAX_PEERS}")
    peers = tuple(dict.fromkeys(_peer_url(url) for url in config.peers))
    return dataclasses.replace(config, log_level=config.log_level.strip().lower(), peers=peers,
                               agents=tuple(dict.fromkeys(config.agents)))


def config_warnings(config: Config) -> list[str]:
    """What the owner should know about a configuration that loads but is unsafe; the daemon logs these at
    start, and ``status`` and ``doctor`` show them."""
    warnings = []
    if config.trust == "any":
        warnings.append('trust = "any": every origin counts as support, so a few keys made for the purpose can '
                        'make a false lesson common here (the README\'s simulations: every false lesson became '
                        'common); the default, "earned", counts only origins that earned trust from what came '
                        'true here or at the memories this one trusts')
    return warnings


def log_file_path(config: Config, home: Path) -> Path | None:
    """The log file, a relative ``log_file`` being relative to the home; None for stderr."""
    if not config.log_file:
        return None
    return home / Path(config.log_file).expanduser()


def sleep_time(config: Config) -> tuple[int, int]:
    """The nightly sleep's (hour, minute)."""
    hour, _, minute = config.sleep_at.partition(":")
    h, m = int(hour), int(minute)
    if not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(config.sleep_at)
    return h, m
