"""Zeroconf (mDNS / DNS-SD) discovery of other memories on the LAN.

The service
-----------
Every daemon registers one DNS-SD service of type ``_neverest._tcp.local.``::

    instance name   neverest-<origin>._neverest._tcp.local.
    host name       neverest-<origin>.local.
    SRV port        the port the daemon's transport listens on
    A / AAAA        the addresses peers should dial (at most MAX_ADDRESSES)
    TXT             origin=<origin>   16 lower-case hex digits (records.origin_of)
                    v=<version>       the wire protocol version, "1" today

and browses the same type for the others.  Unknown TXT keys are allowed (a later
version may add some), but the whole TXT record is bounded (MAX_TXT_BYTES).

Validation (the LAN is hostile input)
-------------------------------------
A service becomes a ``Sighting`` only when all of these hold; anything else is
ignored with a DEBUG log line and never reaches the callbacks:

- the instance label is exactly ``neverest-<origin>`` with 16 lower-case hex
  digits, and the TXT ``origin`` equals that origin (one name per origin, so
  mDNS's own name-conflict rules keep one live service per origin);
- the TXT record is at most MAX_TXT_BYTES; ``v`` is 1..16 characters of
  ``[0-9A-Za-z._-]``;
- the SRV port is 1..65535;
- at least one address parses with ``ipaddress`` and is neither unspecified nor
  multicast; at most MAX_ADDRESSES distinct addresses are kept (IPv4 first).

Names that do not look like ours are dropped before any resolution query is
sent, a resolution waits at most RESOLVE_TIMEOUT_S, and at most MAX_PEERS
services are tracked at once.  Our own origin is never reported.  A known peer
whose update no longer validates is reported gone.

Other protocol versions are *reported, flagged*: a ``Sighting`` whose ``version``
is not PROTOCOL_VERSION has ``compatible == False``.  The daemon must not open
a transport to an incompatible peer, but it can tell the user "peer X speaks
v2, this memory speaks v1", which a silent drop could not.

A sighting is a hint, not a proof: nothing in mDNS is authenticated, so the
origin a service claims is only trusted once the peer signs something with the
key that origin is the fingerprint of (records.py).

Interfaces: the rule for development and CI machines
----------------------------------------------------
``Discovery(interfaces=...)`` takes either a list of IP address strings (the
addresses of the interfaces to join the mDNS group on and send from) or the
string ``"all"`` (zeroconf's ``InterfaceChoice.All``, IPv4).  There is no
default on purpose: ``"all"`` is the daemon's configured default on a user's
machine, but on development and CI machines nothing may leave loopback, so
tests and experiments in the root network namespace must pass
``interfaces=["127.0.0.1"]`` (``--mdns-interface 127.0.0.1`` for the daemon,
``--interface 127.0.0.1`` for this module's command line).  Tests that need a
real LAN create their own network namespaces and use only their addresses.

How the daemon uses it
----------------------
The API is synchronous and thread-based: zeroconf runs its own event-loop thread
and the browser runs a thread that calls ``on_sighting(Sighting)`` (new service,
or a changed one) and ``on_gone(origin)`` (goodbye or expiry), one call at a
time.  Callbacks must return quickly; an exception they raise is logged and
swallowed.  ``start`` (probing, ~2 s) and ``close`` (goodbyes) block, so a trio
daemon calls them with ``trio.to_thread.run_sync`` and bridges the callbacks
into a memory channel, for example::

    token = trio.lowlevel.current_trio_token()
    send, receive = trio.open_memory_channel[Sighting | str](256)

    def forward(event: Sighting | str) -> None:
        trio.from_thread.run_sync(send.send_nowait, event, trio_token=token)

    discovery = Discovery(interfaces=config.mdns_interfaces, on_sighting=forward, on_gone=forward)
    await trio.to_thread.run_sync(discovery.start, identity.origin, port)
    try:
        async for event in receive: ...
    finally:
        await trio.to_thread.run_sync(discovery.close)

(``close`` joins the browser thread, which may be waiting in ``from_thread``;
calling it from a worker thread, as above, keeps the trio loop free to answer.)

For tests, ``python -m neverest.peers.mdns --origin O --port P --interface IP
--seconds S`` registers, browses for S seconds and prints one JSON line per
event (``{"event": "sighting", ...}`` or ``{"event": "gone", "origin": ...}``).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, TypeVar

import zeroconf
from zeroconf import InterfaceChoice, ServiceBrowser, ServiceInfo, ServiceListener, Zeroconf

log = logging.getLogger(__name__)

SERVICE_TYPE: Final = "_neverest._tcp.local."
PROTOCOL_VERSION: Final = "1"
INSTANCE_PREFIX: Final = "neverest-"
MAX_ADDRESSES: Final = 8
MAX_TXT_BYTES: Final = 512
MAX_PEERS: Final = 256
RESOLVE_TIMEOUT_S: Final = 3.0

_HEX16 = re.compile(r"[0-9a-f]{16}")
_VERSION = re.compile(r"[0-9A-Za-z._-]{1,16}")
_INSTANCE = re.compile(re.escape(INSTANCE_PREFIX) + r"([0-9a-f]{16})")

Interfaces: TypeAlias = Sequence[str] | Literal["all"]
_T = TypeVar("_T")


class SightingError(ValueError):
    """A service on our type that is not a valid neverest peer; the message says why."""


@dataclass(frozen=True)
class Sighting:
    """A valid neverest service seen on the LAN (validated on construction)."""

    origin: str
    addresses: tuple[str, ...]
    port: int
    version: str
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not _HEX16.fullmatch(self.origin):
            raise SightingError("origin is not 16 lower-case hex digits")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise SightingError("port is not in 1..65535")
        if not isinstance(self.version, str) or not _VERSION.fullmatch(self.version):
            raise SightingError("version is not 1..16 characters of [0-9A-Za-z._-]")
        if not isinstance(self.addresses, tuple) or not 1 <= len(self.addresses) <= MAX_ADDRESSES:
            raise SightingError(f"not 1..{MAX_ADDRESSES} addresses")
        for address in self.addresses:
            if not isinstance(address, str) or not _usable(address):
                raise SightingError(f"unusable address {address!r}")
        if self.name != instance_name(self.origin):
            raise SightingError("instance name does not match origin")

    @property
    def compatible(self) -> bool:
        """Whether this peer speaks our protocol version (only then may the daemon connect)."""
        return self.version == PROTOCOL_VERSION


def instance_name(origin: str) -> str:
    """The one DNS-SD instance name a memory with this origin registers."""
    return f"{INSTANCE_PREFIX}{origin}.{SERVICE_TYPE}"


def origin_from_name(name: str) -> str:
    """The origin in a service name of our type; SightingError if it is not one of ours."""
    suffix = "." + SERVICE_TYPE
    if not name.lower().endswith(suffix):
        raise SightingError("not of type " + SERVICE_TYPE)
    match = _INSTANCE.fullmatch(name[: -len(suffix)])
    if match is None:
        raise SightingError("instance name is not neverest-<16 lower-case hex>")
    return match.group(1)


def _usable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not (ip.is_unspecified or ip.is_multicast)


def _clean_addresses(raw: Sequence[str]) -> tuple[str, ...]:
    """Distinct usable addresses, IPv4 first, at most MAX_ADDRESSES."""
    parsed: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for text in raw:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        if ip.is_unspecified or ip.is_multicast or ip in parsed:
            continue
        parsed.append(ip)
    parsed.sort(key=lambda ip: ip.version)  # stable: keeps the announced order within a family
    return tuple(str(ip) for ip in parsed[:MAX_ADDRESSES])


def _txt_value(properties: Mapping[bytes, bytes | None], key: bytes) -> str:
    value = properties.get(key)
    if value is None:
        raise SightingError(f"TXT has no {key.decode()} value")
    try:
        return value.decode("ascii")
    except UnicodeDecodeError:
        raise SightingError(f"TXT {key.decode()} is not ASCII") from None


def parse_sighting(
    name: str,
    properties: Mapping[bytes, bytes | None],
    addresses: Sequence[str],
    port: int | None,
    txt_size: int = 0,
) -> Sighting:
    """Validate what a service announced; SightingError (a reason) if it is not a usable peer."""
    origin = origin_from_name(name)
    if txt_size > MAX_TXT_BYTES:
        raise SightingError(f"TXT record larger than {MAX_TXT_BYTES} bytes")
    txt_origin = _txt_value(properties, b"origin")
    if not _HEX16.fullmatch(txt_origin):
        raise SightingError("TXT origin is not 16 lower-case hex digits")
    if txt_origin != origin:
        raise SightingError("TXT origin does not match the instance name")
    version = _txt_value(properties, b"v")
    if port is None:
        raise SightingError("no port")
    clean = _clean_addresses(addresses)
    if not clean:
        raise SightingError("no usable address")
    return Sighting(origin=origin, addresses=clean, port=port, version=version, name=instance_name(origin))


def sighting_from_info(info: ServiceInfo) -> Sighting:
    """Validate a resolved zeroconf ServiceInfo; SightingError if it is not a usable peer."""
    return parse_sighting(info.name, info.properties, info.parsed_addresses(), info.port, len(info.text))


def _host_ipv4_addresses() -> list[str]:
    # zeroconf re-exports this "for backwards compat" but leaves it out of __all__.
    found: list[str] = zeroconf.get_all_addresses()  # type: ignore[attr-defined]
    return found


def _zeroconf_interfaces(interfaces: Interfaces) -> list[str] | InterfaceChoice:
    if interfaces == "all":
        return InterfaceChoice.All
    if isinstance(interfaces, str):
        raise ValueError('interfaces must be a list of IP addresses or "all"')
    chosen = list(interfaces)
    if not chosen:
        raise ValueError("interfaces is empty: give at least one IP address (127.0.0.1 on dev/CI machines)")
    for address in chosen:
        ipaddress.ip_address(address)  # ValueError names the bad one
    return chosen


class Discovery:
    """Register this memory and browse for others; see the module docstring.

    ``interfaces`` is a list of interface IP addresses or ``"all"``; on
    development and CI machines it must be ``["127.0.0.1"]``.  ``on_sighting``
    and ``on_gone`` are called from a zeroconf thread, one at a time.
    """

    def __init__(
        self,
        *,
        interfaces: Interfaces,
        on_sighting: Callable[[Sighting], None],
        on_gone: Callable[[str], None],
        resolve_timeout: float = RESOLVE_TIMEOUT_S,
    ) -> None:
        self._interfaces = _zeroconf_interfaces(interfaces)
        self._on_sighting = on_sighting
        self._on_gone = on_gone
        self._resolve_ms = max(1, int(resolve_timeout * 1000))
        self._lock = threading.Lock()
        self._peers: dict[str, Sighting] = {}  # by instance name
        self._origin: str | None = None
        self._zc: Zeroconf | None = None
        self._info: ServiceInfo | None = None
        self._browser: ServiceBrowser | None = None
        self._closed = False

    @property
    def origin(self) -> str | None:
        return self._origin

    def peers(self) -> dict[str, Sighting]:
        """A snapshot of the peers seen and not gone, by origin."""
        with self._lock:
            return {s.origin: s for s in self._peers.values()}

    def start(self, origin: str, port: int, addresses: Sequence[str] | None = None) -> None:
        """Register ``neverest-<origin>`` on ``port`` and start browsing (blocks ~2 s while probing).

        ``addresses`` are the ones advertised; by default the interface
        addresses given, or for ``"all"`` this host's non-loopback IPv4 ones.
        """
        if not _HEX16.fullmatch(origin):
            raise ValueError("origin must be 16 lower-case hex digits")
        if isinstance(port, bool) or not 1 <= port <= 65535:
            raise ValueError("port must be in 1..65535")
        with self._lock:
            if self._closed or self._zc is not None:
                raise RuntimeError("Discovery can be started once")
            self._origin = origin
        if addresses is None:
            if isinstance(self._interfaces, list):
                addresses = self._interfaces
            else:
                found = _host_ipv4_addresses()
                addresses = [a for a in found if not ipaddress.ip_address(a).is_loopback] or found
        advertised = _clean_addresses(addresses)
        if not advertised:
            raise ValueError("no usable address to advertise")
        info = ServiceInfo(
            SERVICE_TYPE,
            instance_name(origin),
            port=port,
            properties={"origin": origin, "v": PROTOCOL_VERSION},
            server=f"{INSTANCE_PREFIX}{origin}.local.",
            parsed_addresses=list(advertised),
        )
        zc = Zeroconf(interfaces=self._interfaces)
        # ``close`` may run in another thread while this one probes (the daemon does not wait for
        # the ~2 s probe when it stops): whichever comes second must leave nothing running.
        with self._lock:
            closed = self._closed
            if not closed:
                self._zc = zc
        if closed:
            zc.close()
            return
        try:
            zc.register_service(info)
            self._info = info
            with self._lock:
                if self._closed:  # closed while probing: no browser on a closed Zeroconf
                    return
                self._browser = ServiceBrowser(zc, SERVICE_TYPE, listener=_Listener(self))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Say goodbye, stop browsing and close the sockets; idempotent.  No callbacks after it returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        zc, info, browser = self._zc, self._info, self._browser
        if browser is not None:
            browser.cancel()
        if zc is not None:
            try:
                if info is not None:
                    zc.unregister_service(info)
            except Exception:
                log.warning("mdns: unregistering %s failed", info.name if info else "?", exc_info=True)
            finally:
                zc.close()
        with self._lock:
            self._peers.clear()

    def __enter__(self) -> Discovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Called from the browser thread, serially.

    def _seen(self, zc: Zeroconf, name: str) -> None:
        try:
            origin = origin_from_name(name)
        except SightingError as e:
            log.debug("mdns: ignoring %r: %s", name, e)
            return
        if origin == self._origin:
            return
        with self._lock:
            if self._closed:
                return
            if name not in self._peers and len(self._peers) >= MAX_PEERS:
                log.debug("mdns: ignoring %r: already tracking %d peers", name, MAX_PEERS)
                return
        info = zc.get_service_info(SERVICE_TYPE, name, timeout=self._resolve_ms)
        if info is None:
            log.debug("mdns: ignoring %r: did not resolve", name)
            return
        try:
            sighting = sighting_from_info(info)
        except SightingError as e:
            log.debug("mdns: ignoring %r: %s", name, e)
            self._lost(name)  # an update that made a known peer invalid
            return
        with self._lock:
            if self._closed or self._peers.get(name) == sighting:
                return
            self._peers[name] = sighting
        self._call(self._on_sighting, sighting)

    def _lost(self, name: str) -> None:
        with self._lock:
            if self._closed:
                return
            sighting = self._peers.pop(name, None)
        if sighting is not None:
            self._call(self._on_gone, sighting.origin)

    @staticmethod
    def _call(callback: Callable[[_T], None], arg: _T) -> None:
        try:
            callback(arg)
        except Exception:
            log.exception("mdns: callback %r failed", callback)


class _Listener(ServiceListener):
    def __init__(self, discovery: Discovery) -> None:
        self._discovery = discovery

    def add_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self._guard(self._discovery._seen, zc, name)

    def update_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self._guard(self._discovery._seen, zc, name)

    def remove_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self._guard(lambda _zc, n: self._discovery._lost(n), zc, name)

    @staticmethod
    def _guard(handler: Callable[[Zeroconf, str], None], zc: Zeroconf, name: str) -> None:
        # A raise here would kill the browser thread; a closing Zeroconf raises, so does bad input.
        try:
            handler(zc, name)
        except Exception:
            log.debug("mdns: handling %r failed", name, exc_info=True)


def _event_json(event: Sighting | str) -> str:
    if isinstance(event, Sighting):
        return json.dumps(
            {
                "event": "sighting",
                "origin": event.origin,
                "addresses": list(event.addresses),
                "port": event.port,
                "version": event.version,
                "compatible": event.compatible,
                "name": event.name,
            },
            sort_keys=True,
        )
    return json.dumps({"event": "gone", "origin": event}, sort_keys=True)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # this module's own command line only: the daemon that imports it has parsed its own

    parser = argparse.ArgumentParser(
        prog="python -m neverest.peers.mdns",
        description="Register a neverest service, browse for S seconds, print one JSON line per event.",
    )
    parser.add_argument("--origin", required=True, help="16 lower-case hex digits")
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument(
        "--interface",
        required=True,
        action="append",
        help='interface IP address (repeatable), or "all"; use 127.0.0.1 on dev/CI machines',
    )
    parser.add_argument("--address", action="append", help="address to advertise (default: the interfaces)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to browse (0 < S <= 3600)")
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 3600:
        parser.error("--seconds must be in (0, 3600]")
    interfaces: Interfaces = "all" if args.interface == ["all"] else args.interface
    print_lock = threading.Lock()

    def emit(event: Sighting | str) -> None:
        with print_lock:
            print(_event_json(event), flush=True)

    try:
        discovery = Discovery(interfaces=interfaces, on_sighting=emit, on_gone=emit)
    except ValueError as e:
        parser.error(str(e))
    try:
        discovery.start(args.origin, args.port, args.address)
        time.sleep(args.seconds)
    except ValueError as e:
        parser.error(str(e))
    except OSError as e:
        print(f"mdns: {e}", file=sys.stderr)
        return 1
    finally:
        discovery.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
