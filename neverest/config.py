"""The one configuration object.

Values come, in order of precedence, from command-line flags, then the
environment (``NEVEREST_<FIELD>`` in upper case), then ``config.toml`` in the
home, then the defaults below.  Every duration and size carries its unit in its
name.  Commands map their flags onto these fields; they never repeat defaults.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

from neverest.paths import CONFIG_FILE


class ConfigError(Exception):
    """config.toml or an environment variable holds something unusable."""


@dataclass(frozen=True)
class Config:
    # The store (DESIGN §6): how long a writer waits for another process's lock.
    busy_timeout_s: float = 5.0
    # Optional local models behind OpenAI-compatible URLs (e.g. http://127.0.0.1:11434/v1).
    # Unset: the deterministic hashed embedding and the template sentences.
    embed_url: str = ""
    embed_model: str = ""
    writer_url: str = ""
    writer_model: str = ""
    model_timeout_s: float = 30.0
    # Sleep thresholds, from the original architecture (seeds/001, DESIGN §6).
    decay_half_life_days: float = 45.0
    archive_below: float = 0.15
    prediction_window_days: float = 14.0
    predict_min_strength: float = 1.0
    # Strength steps chosen here (the seeds leave them open; PROTOCOL.md §7 records them).
    lesson_initial_strength: float = 1.0
    join_step: float = 0.5
    confirm_step: float = 0.5
    fail_step: float = 0.5
    strength_cap: float = 5.0
    # Sharing (DESIGN §5).  Records signed further ahead of this clock are refused until it catches up.
    future_tolerance_s: float = 600.0
    support_n: int = 3
    window_days: float = 90.0
    revoke_quorum: int = 3
    # Which origins count as support: "any" (the protocol's default), "peers" (origins in the peer table),
    # or "vouched" (origins whose claims this memory tested itself, none refuted: commons.vouched);
    # origins in trust_allow count under every policy.
    trust: str = "any"
    trust_allow: str = ""  # comma-separated origins
    vouch_min_verified: int = 2  # "vouched": lessons an origin supported that came true here
    vouch_min_resolved: int = 10  # "vouched": lessons this memory must have tested before it vouches for anyone
    # "vouched": days a lesson is held here before it can be common here: one prediction window, so that
    # every lesson has had a full window to come true, or fail, in this memory's own sessions first.
    vouch_quarantine_days: float = 14.0
    # Layers (PROTOCOL.md §9): lessons received from these origins (comma-separated) form the
    # "domain" layer (a language's, a tool's, a codebase's memory); all others the "common" one.
    domain_origins: str = ""
    # The daemon (neverestd).  Times of day are the machine's local time.
    sleep_at: str = "03:00"  # the nightly sleep, HH:MM
    inbox_every_s: float = 2.0  # how often the inbox file is drained
    folder: str = ""  # a shared folder synced after every sleep ("" = none)
    control_timeout_s: float = 10.0  # how long a control-socket client may take to send its request
    log_json: bool = False
    # Gossip (DESIGN §4).  The peer-facing listener serves only POST /gossip/v1/exchange.
    listen: str = "0.0.0.0:7428"  # HOST:PORT
    gossip_every_s: float = 900.0  # a round every 15 minutes, and one after every sleep
    fanout: int = 3  # peers per round
    gossip_budget_bytes: int = 1024 * 1024  # records per answer; a cut answer resumes next exchange
    exchange_timeout_s: float = 60.0  # one request and its whole answer
    # Discovery.  mdns_interfaces: comma-separated IPs to use for zeroconf, "" = all interfaces.
    mdns: bool = True
    mdns_interfaces: str = ""
    directory: str = ""  # a URL or a file listing peers ("" = none)
    directory_every_s: float = 300.0
    # The HTTP commons (PROTOCOL.md §14): pushed to and pulled from after every sleep when set.
    commons_url: str = ""
    commons_token_file: str = ""
    commons_announce: str = ""  # this daemon's URL for peers, announced to the commons' directory ("" = don't)


def _coerce(name: str, kind: type, value: Any) -> Any:
    try:
        if kind is float and not isinstance(value, bool):
            return float(value)
        if kind is int and not isinstance(value, bool):
            return int(value)
        if kind is str:
            return str(value)
        if kind is bool:
            if isinstance(value, bool):
                return value
            return str(value).lower() in ("1", "true", "yes", "on")
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"{name}: {value!r} is not a {kind.__name__}")


TRUST_POLICIES: Final = ("any", "peers", "vouched")


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
    types = {f.name: (str if f.type == "str" else float if f.type == "float" else int if f.type == "int"
                      else bool) for f in fields(Config)}
    unknown = set(values) - set(types)
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(sorted(unknown))}")
    for name in types:
        env_value = environ.get(f"NEVEREST_{name.upper()}")
        if env_value is not None:
            values[name] = env_value
    values.update({k: v for k, v in overrides.items() if v is not None})
    config = dataclasses.replace(Config(), **{k: _coerce(k, types[k], v) for k, v in values.items()})
    if config.trust not in TRUST_POLICIES:
        raise ConfigError(f"trust: {config.trust!r} is not one of {', '.join(TRUST_POLICIES)}")
    try:
        sleep_time(config)
    except ValueError:
        raise ConfigError(f"sleep_at: {config.sleep_at!r} is not a time of day like 03:00") from None
    return config


def sleep_time(config: Config) -> tuple[int, int]:
    """The nightly sleep's (hour, minute)."""
    hour, _, minute = config.sleep_at.partition(":")
    h, m = int(hour), int(minute)
    if not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(config.sleep_at)
    return h, m
