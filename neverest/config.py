"""The one configuration object.

Values come, in order of precedence, from command-line flags, then the
environment (``NEVEREST_<FIELD>`` in upper case; a list like ``peers`` is
comma-separated there), then ``config.toml`` in the home, then the chosen
``profile``'s defaults (``PROFILES``: ``lan``, the default, ``wan`` or ``local``, after
memberlist's DefaultLANConfig/DefaultWANConfig/DefaultLocalConfig), then the defaults
below.

The keys are flat (``gossip_every_s``), as the person writes them; the code reads them in
sections (``config.sections.gossip.every_s``): each part of Neverest is handed the section it
needs (the store, the models, sleep, trust, the received-records budget, gossip, discovery,
the agents' doors, the API for other programs, the daemon) and cannot reach the others'.

Every duration and size carries its unit in its name.  Commands map their
flags onto these fields; they never repeat defaults.  ``docs/config.example.toml``
lists every field with its default (a test keeps the two equal).
"""

# No `from __future__ import annotations` here: typing.NamedTuple makes a ForwardRef of every annotation
# spelled as a string, compiling each (about 5 ms for the 73 settings, at every command's start).
import functools
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple, cast, get_origin

from neverest.paths import CONFIG_FILE

# urllib.parse and ipaddress are imported by the checks that use them, and the log levels are spelled here
# rather than imported with the logging set-up (tests/test_ctl_startup.py keeps them equal to logs.LEVELS):
# every command that opens the memory loads the configuration, and most configurations name no peer, route or
# listen address (docs/figures.md, start-up).
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """config.toml or an environment variable holds something unusable."""


class _Settings(NamedTuple):
    """Every setting, flat, as the person writes it (``Config`` adds the sections).

    A named tuple rather than a frozen dataclass: every command that opens the memory imports this module,
    and ``dataclasses`` compiles the methods of a class of 73 fields at each import (5–6 ms on a quiet
    machine, against under 1 ms; docs/figures.md, start-up).  Change a copy with ``config._replace(...)``."""

    # Which defaults the settings below start from (PROFILES): "lan", "wan" or "local".
    profile: str = "lan"
    # The store: how long a writer waits for another process's lock.
    busy_timeout_s: float = 5.0
    # Optional local models behind OpenAI-compatible URLs (e.g. http://127.0.0.1:11434/v1).
    # Unset: the deterministic hashed embedding and the template sentences.
    embed_url: str = ""
    embed_model: str = ""
    writer_url: str = ""
    writer_model: str = ""
    model_timeout_s: float = 30.0
    # Sleep thresholds (docs/reference.md, "Sleep: episodes become lessons").
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
    # the one the sweep in docs/simulations.md measures against adaptive adversaries), "vouched" (origins
    # whose claims this memory tested itself, none refuted: commons.vouched), "peers" (origins in the peer
    # table), or "any" (every origin: the simulations in docs/simulations.md show it making every false
    # lesson common, so it is never the default and config_warnings flags it); named origins (trust_allow,
    # and those `neverestctl trust add` keeps in the store) count under every policy.
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
    # One untrusted origin.  Keys are free, so one identity nobody vouched for gets 2 MB, as an origin
    # and (received_stranger_peer_budget_bytes) as the gossip peer that delivers records.
    received_origin_budget_bytes: int = 2_000_000
    received_peer_budget_bytes: int = 16 * 1024 * 1024  # untrusted origins' records delivered by one peer or source
    received_stranger_peer_budget_bytes: int = 2_000_000  # ... by one gossip peer this memory does not trust
    received_exchange_budget_bytes: int = 2 * 1024 * 1024  # untrusted records taken from one exchange or sync
    # Every untrusted origin's records together: however many keys a flood makes, it fills this at most.
    received_untrusted_budget_bytes: int = 32_000_000
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
    gossip_cutoff_after: int = 16  # invalid requests signed by one origin within gossip_cutoff_s ...
    gossip_cutoff_s: float = 60.0  # ... and it is answered 429, unread, for this long
    # Unsigned or unverified requests (and those of origins new to it) from one address (IPv6: its /64)
    # within gossip_cutoff_s before the address is cut off; origins that exchanged from it are still heard.
    gossip_cutoff_address_after: int = 64
    # Discovery.  mdns_interfaces: comma-separated IPs to use for zeroconf, "" = all interfaces.
    mdns: bool = True
    mdns_interfaces: str = ""
    peers: tuple[str, ...] = ()  # static peer URLs, always known: ["http://192.0.2.7:7428", ...]
    directory: str = ""  # a URL or a file listing peers ("" = none)
    directory_every_s: float = 300.0
    # The HTTP commons (PROTOCOL.md §13): pushed to and pulled from after every sleep when set.
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
    # The proxy (PROTOCOL.md, "The proxy"): a front door for the models on loopback.  proxy_listen: where the
    # daemon serves it, a loopback HOST:PORT ("" = the daemon does not; `neverestctl proxy` runs it alone).
    # routes: "prefix=url" pairs; the longest prefix of a request's model picks the upstream, "*=url" takes
    # every other model (NEVEREST_ROUTES="gpt=https://api.openai.com,claude=https://api.anthropic.com").
    proxy_listen: str = ""
    routes: tuple[str, ...] = ()
    proxy_timeout_s: float = 600.0  # one model call, from its request to its answer's last byte
    proxy_connect_timeout_s: float = 10.0  # reaching the upstream
    proxy_max_body_bytes: int = 32 * 1024 * 1024  # a request's body (images travel inside it)
    # The loopback JSON API for other programs (POST /v1/<operation>, a bearer token in <home>/api-token):
    # the daemon serves it on api_listen, HOST:PORT ("" = not served).  An address that is not loopback is
    # refused unless api_allow_remote is true.
    api_listen: str = ""
    api_allow_remote: bool = False


class Config(_Settings):
    """The configuration: the settings, and the sections each part of Neverest is handed."""

    def __setattr__(self, name: str, value: object) -> None:
        # Read-only as the frozen dataclass was (the sections' cache is written into __dict__ directly).
        raise AttributeError(f"a Config is read-only; make a copy with config._replace({name}=...)")

    @functools.cached_property
    def sections(self) -> "Sections":
        """The settings grouped by the part of Neverest that reads them."""
        return Sections(
            store=StoreSection(busy_timeout_s=self.busy_timeout_s),
            models=ModelSection(embed_url=self.embed_url, embed_model=self.embed_model, writer_url=self.writer_url,
                                writer_model=self.writer_model, timeout_s=self.model_timeout_s),
            sleep=SleepSection(at=self.sleep_at, decay_half_life_days=self.decay_half_life_days,
                               archive_below=self.archive_below, prediction_window_days=self.prediction_window_days,
                               predict_min_strength=self.predict_min_strength,
                               lesson_initial_strength=self.lesson_initial_strength, join_step=self.join_step,
                               confirm_step=self.confirm_step, fail_step=self.fail_step,
                               strength_cap=self.strength_cap),
            trust=TrustSection(policy=self.trust, allow=_names(self.trust_allow), damping=self.trust_damping,
                               steps=self.trust_steps, vouch_min_verified=self.vouch_min_verified,
                               vouch_min_resolved=self.vouch_min_resolved,
                               quarantine_days=self.vouch_quarantine_days, domain_origins=_names(self.domain_origins),
                               support_n=self.support_n, window_days=self.window_days,
                               revoke_quorum=self.revoke_quorum, future_tolerance_s=self.future_tolerance_s),
            budget=BudgetSection(received_bytes=self.received_budget_bytes,
                                 origin_bytes=self.received_origin_budget_bytes,
                                 peer_bytes=self.received_peer_budget_bytes,
                                 exchange_bytes=self.received_exchange_budget_bytes,
                                 untrusted_bytes=self.received_untrusted_budget_bytes,
                                 stranger_peer_bytes=self.received_stranger_peer_budget_bytes,
                                 declined_remember_s=self.declined_remember_s,
                                 refute_origin_max=self.refute_origin_max, verify_processes=self.verify_processes),
            gossip=GossipSection(listen=self.listen, every_s=self.gossip_every_s,
                                 quiet_every_s=self.gossip_quiet_every_s, fanout=self.fanout,
                                 budget_bytes=self.gossip_budget_bytes, exchange_timeout_s=self.exchange_timeout_s,
                                 cutoff_after=self.gossip_cutoff_after, cutoff_s=self.gossip_cutoff_s,
                                 cutoff_address_after=self.gossip_cutoff_address_after,
                                 future_tolerance_s=self.future_tolerance_s),
            discovery=DiscoverySection(mdns=self.mdns, mdns_interfaces=_names(self.mdns_interfaces),
                                       peers=self.peers, directory=self.directory,
                                       directory_every_s=self.directory_every_s, commons_url=self.commons_url,
                                       commons_token_file=self.commons_token_file,
                                       commons_announce=self.commons_announce),
            agents=AgentsSection(wired=self.agents, ingest_every_s=self.ingest_every_s, claude_dir=self.claude_dir,
                                 codex_dir=self.codex_dir, holdout=self.holdout),
            api=ApiSection(listen=self.api_listen, allow_remote=self.api_allow_remote),
            daemon=DaemonSection(inbox_every_s=self.inbox_every_s, folder=self.folder,
                                 control_timeout_s=self.control_timeout_s, log_json=self.log_json,
                                 log_level=self.log_level, log_file=self.log_file),
            proxy=ProxySection(listen=self.proxy_listen, routes=self.routes, timeout_s=self.proxy_timeout_s,
                               connect_timeout_s=self.proxy_connect_timeout_s,
                               max_body_bytes=self.proxy_max_body_bytes),
        )


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated setting (``trust_allow``, ``domain_origins``, ``mdns_interfaces``) as its items."""
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


# -- The sections.  Field names drop the section's prefix; each line says which key it comes from when
# that is not "<section>_<field>" or "<field>".  They are named tuples, not dataclasses: every command that
# opens the memory imports this module, and `dataclasses` compiles each class's methods at import (11 ms
# for these eleven on a quiet machine, against 1 ms; docs/figures.md, start-up).


class StoreSection(NamedTuple):
    busy_timeout_s: float


class ModelSection(NamedTuple):
    embed_url: str
    embed_model: str
    writer_url: str
    writer_model: str
    timeout_s: float  # model_timeout_s


class SleepSection(NamedTuple):
    at: str  # sleep_at
    decay_half_life_days: float
    archive_below: float
    prediction_window_days: float
    predict_min_strength: float
    lesson_initial_strength: float
    join_step: float
    confirm_step: float
    fail_step: float
    strength_cap: float


class TrustSection(NamedTuple):
    policy: str  # trust
    allow: tuple[str, ...]  # trust_allow
    damping: float  # trust_damping
    steps: int  # trust_steps
    vouch_min_verified: int
    vouch_min_resolved: int
    quarantine_days: float  # vouch_quarantine_days
    domain_origins: tuple[str, ...]
    support_n: int
    window_days: float
    revoke_quorum: int
    future_tolerance_s: float


class BudgetSection(NamedTuple):
    received_bytes: int  # received_budget_bytes
    origin_bytes: int  # received_origin_budget_bytes
    peer_bytes: int  # received_peer_budget_bytes
    exchange_bytes: int  # received_exchange_budget_bytes
    untrusted_bytes: int  # received_untrusted_budget_bytes
    stranger_peer_bytes: int  # received_stranger_peer_budget_bytes
    declined_remember_s: float
    refute_origin_max: int
    verify_processes: int


class GossipSection(NamedTuple):
    listen: str
    every_s: float  # gossip_every_s
    quiet_every_s: float  # gossip_quiet_every_s
    fanout: int
    budget_bytes: int  # gossip_budget_bytes
    exchange_timeout_s: float
    cutoff_after: int  # gossip_cutoff_after
    cutoff_s: float  # gossip_cutoff_s
    cutoff_address_after: int  # gossip_cutoff_address_after
    future_tolerance_s: float


class DiscoverySection(NamedTuple):
    mdns: bool
    mdns_interfaces: tuple[str, ...]  # () = every interface
    peers: tuple[str, ...]
    directory: str
    directory_every_s: float
    commons_url: str
    commons_token_file: str
    commons_announce: str


class AgentsSection(NamedTuple):
    wired: tuple[str, ...]  # agents
    ingest_every_s: float
    claude_dir: str
    codex_dir: str
    holdout: float


class ApiSection(NamedTuple):
    listen: str  # api_listen
    allow_remote: bool  # api_allow_remote


class DaemonSection(NamedTuple):
    inbox_every_s: float
    folder: str
    control_timeout_s: float
    log_json: bool
    log_level: str
    log_file: str


class ProxySection(NamedTuple):
    listen: str  # proxy_listen
    routes: tuple[str, ...]
    timeout_s: float  # proxy_timeout_s
    connect_timeout_s: float  # proxy_connect_timeout_s
    max_body_bytes: int  # proxy_max_body_bytes


class Sections(NamedTuple):
    store: StoreSection
    models: ModelSection
    sleep: SleepSection
    trust: TrustSection
    budget: BudgetSection
    gossip: GossipSection
    discovery: DiscoverySection
    agents: AgentsSection
    api: ApiSection
    daemon: DaemonSection
    proxy: ProxySection


# Profiles, after memberlist's LAN/WAN/local configurations: the defaults a setting takes when config.toml,
# the environment and the flags leave it unset.
PROFILES: Final[dict[str, dict[str, Any]]] = {
    # Memories on one local network: zeroconf finds peers, a round every 15 minutes (the defaults above).
    "lan": {},
    # Memories across the internet: no multicast to find peers (a directory, a commons or peers added by
    # hand), longer exchanges over slow links, rarer rounds, and an address cut off for longer.
    "wan": {"mdns": False, "exchange_timeout_s": 120.0, "gossip_every_s": 1800.0, "gossip_quiet_every_s": 1800.0,
            "directory_every_s": 900.0, "gossip_cutoff_s": 300.0},
    # Several memories on one machine (trying Neverest out, a demo): loopback only, zeroconf on loopback,
    # quick rounds and short timeouts.
    "local": {"listen": "127.0.0.1:7428", "mdns_interfaces": "127.0.0.1", "gossip_every_s": 10.0,
              "gossip_quiet_every_s": 300.0, "exchange_timeout_s": 10.0, "directory_every_s": 30.0},
}


_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off", "")
_WHAT: Final[dict[type, str]] = {str: "a string", float: "a number", int: "a whole number", bool: "true or false"}


def _kind(name: str) -> type:
    annotation = _Settings.__annotations__[name]  # str, float, int, bool or tuple[str, ...]
    return cast(type, get_origin(annotation) or annotation)


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


def parse_route(text: str) -> tuple[str, str]:
    """A route ``prefix=url`` as (prefix, url): the model-name prefix ("*" for every other model) and an
    http(s) URL with a host (the base the request's path is added to).  Raises ConfigError."""
    prefix, sep, url = text.partition("=")
    prefix, url = prefix.strip(), url.strip()
    if not sep or not prefix or not url:
        raise ConfigError(f"routes: {text!r} is not prefix=url, like gpt=https://api.openai.com or *=http://127.0.0.1:11434")
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (an invalid port raises here)
    except ValueError:
        raise ConfigError(f"routes: {text!r}: {url!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(f"routes: {text!r}: give an http:// or https:// URL with a host and no query")
    return prefix, url.rstrip("/")


def is_loopback_listen(text: str) -> bool:
    """Whether ``HOST:PORT`` names a loopback address (localhost, 127.0.0.0/8, ::1)."""
    host = text.strip().rpartition(":")[0].strip("[]").lower()
    if host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _peer_url(url: str) -> str:
    """``http://host:port`` from a peer address as written in the config (``host:port`` means http)."""
    from urllib.parse import urlsplit

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
    if isinstance(values.get("routes"), dict):
        # A [routes] table (prefix = "url", '"*"' for every other model) reads as the list form.
        table = values["routes"]
        bad = [k for k, v in table.items() if not isinstance(v, str)]
        if bad:
            raise ConfigError(f"{path}: [routes] {bad[0]!r}: give the upstream as a string URL")
        values["routes"] = [f"{prefix}={url}" for prefix, url in table.items()]
    names = Config._fields
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
    profile = str(values.get("profile", "lan")).strip().lower()
    if profile not in PROFILES:
        raise ConfigError(f"profile: {profile!r} is not one of {', '.join(PROFILES)}")
    values = {**PROFILES[profile], **values, "profile": profile}
    config = Config()._replace(**{k: _coerce(k, _kind(k), v) for k, v in values.items()})
    if config.trust not in TRUST_POLICIES:
        raise ConfigError(f"trust: {config.trust!r} is not one of {', '.join(TRUST_POLICIES)}")
    if not 0.0 < config.trust_damping < 1.0:
        raise ConfigError(f"trust_damping: {config.trust_damping!r} is not between 0 and 1 (exclusive)")
    if config.trust_steps < 1:
        raise ConfigError(f"trust_steps: {config.trust_steps!r} is not a positive number of hops")
    for name in ("received_budget_bytes", "received_origin_budget_bytes", "received_peer_budget_bytes",
                 "received_exchange_budget_bytes", "received_untrusted_budget_bytes",
                 "received_stranger_peer_budget_bytes", "declined_remember_s", "refute_origin_max"):
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
    if config.log_level.strip().lower() not in LOG_LEVELS:  # the words of logs.parse_level, without logging
        raise ConfigError(f"log_level: log level {config.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    if not config.gossip_quiet_every_s > 0:
        raise ConfigError(f"gossip_quiet_every_s: {config.gossip_quiet_every_s!r} must be above 0")
    if config.gossip_cutoff_after < 1 or config.gossip_cutoff_address_after < 1 or config.gossip_cutoff_s <= 0:
        raise ConfigError("gossip_cutoff_after and gossip_cutoff_address_after must be at least 1 and "
                          "gossip_cutoff_s above 0")
    if len(config.peers) > MAX_PEERS:
        raise ConfigError(f"peers: {len(config.peers)} addresses; at most {MAX_PEERS}")
    for route in config.routes:
        parse_route(route)
    if config.proxy_listen and not is_loopback_listen(config.proxy_listen):
        raise ConfigError(f"proxy_listen: {config.proxy_listen!r} is not a loopback address: the proxy reads and "
                          "writes this memory for whoever reaches it, so it listens on 127.0.0.1 or [::1] only")
    for name in ("proxy_timeout_s", "proxy_connect_timeout_s", "proxy_max_body_bytes"):
        if not getattr(config, name) > 0:
            raise ConfigError(f"{name}: {getattr(config, name)!r} must be above 0")
    peers = tuple(dict.fromkeys(_peer_url(url) for url in config.peers))
    return config._replace(log_level=config.log_level.strip().lower(), peers=peers,
                            agents=tuple(dict.fromkeys(config.agents)))


def config_warnings(config: Config) -> list[str]:
    """What the owner should know about a configuration that loads but is unsafe; the daemon logs these at
    start, and ``status`` and ``doctor`` show them."""
    warnings = []
    if config.trust == "any":
        warnings.append('trust = "any": every origin counts as support, so a few keys made for the purpose can '
                        'make a false lesson common here (docs/simulations.md: every false lesson became '
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
