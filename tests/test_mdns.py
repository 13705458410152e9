"""Zeroconf discovery: validation offline, two memories on loopback, three in network namespaces.

Network rule: nothing here may send outside loopback or the namespaces a test
creates.  In the root namespace every Zeroconf (ours and the raw ones playing
hostile peers) uses interfaces=["127.0.0.1"]; the namespace test runs zeroconf
only inside its own namespaces, joined by a bridge that lives in a namespace of
its own, so the root namespace's interfaces are never touched.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from zeroconf import ServiceInfo, Zeroconf

from neverest.peers import mdns
from neverest.peers.mdns import (
    MAX_ADDRESSES,
    PROTOCOL_VERSION,
    SERVICE_TYPE,
    Discovery,
    Sighting,
    SightingError,
    instance_name,
    parse_sighting,
    sighting_from_info,
)
from tests.netns import Lan
from tests.netns import namespace_lan as namespace_lan  # a fixture

LOOPBACK = ["127.0.0.1"]
REPO = Path(__file__).resolve().parent.parent
WAIT = 10.0  # seconds any one network event may take on loopback


def new_origin() -> str:
    return secrets.token_hex(8)


def new_port() -> int:
    return 20000 + secrets.randbelow(40000)


# --- validation, offline -------------------------------------------------------------------------


def props(origin: str, v: str = PROTOCOL_VERSION) -> dict[bytes, bytes | None]:
    return {b"origin": origin.encode(), b"v": v.encode()}


def test_a_valid_service_becomes_a_sighting() -> None:
    origin = new_origin()
    s = parse_sighting(instance_name(origin), props(origin), ["127.0.0.1", "::1"], 4242)
    assert s == Sighting(origin, ("127.0.0.1", "::1"), 4242, "1", f"neverest-{origin}.{SERVICE_TYPE}")
    assert s.compatible


def test_other_versions_are_reported_but_flagged() -> None:
    origin = new_origin()
    s = parse_sighting(instance_name(origin), props(origin, "2"), ["10.0.0.1"], 1)
    assert s.version == "2" and not s.compatible


@pytest.mark.parametrize(
    ("name_origin", "txt", "addresses", "port", "reason"),
    [
        ("0123456789abcdef", {b"origin": b"NOT-HEX!", b"v": b"1"}, ["10.0.0.1"], 1, "16 lower-case hex"),
        ("0123456789abcdef", {b"origin": b"0123456789ABCDEF", b"v": b"1"}, ["10.0.0.1"], 1, "16 lower-case hex"),
        ("0123456789abcdef", {b"origin": b"0123456789abcde", b"v": b"1"}, ["10.0.0.1"], 1, "16 lower-case hex"),
        ("0123456789abcdef", {b"origin": b"fedcba9876543210", b"v": b"1"}, ["10.0.0.1"], 1, "does not match"),
        ("0123456789abcdef", {b"origin": b"\xff" * 16, b"v": b"1"}, ["10.0.0.1"], 1, "ASCII"),
        ("0123456789abcdef", {b"origin": None, b"v": b"1"}, ["10.0.0.1"], 1, "no origin"),
        ("0123456789abcdef", {b"v": b"1"}, ["10.0.0.1"], 1, "no origin"),
        ("0123456789abcdef", {b"origin": b"0123456789abcdef"}, ["10.0.0.1"], 1, "no v"),
        ("0123456789abcdef", {b"origin": b"0123456789abcdef", b"v": b"1 2"}, ["10.0.0.1"], 1, "version"),
        ("0123456789abcdef", {b"origin": b"0123456789abcdef", b"v": b"9" * 17}, ["10.0.0.1"], 1, "version"),
        ("0123456789abcdef", props("0123456789abcdef"), ["10.0.0.1"], 0, "port"),
        ("0123456789abcdef", props("0123456789abcdef"), ["10.0.0.1"], 65536, "port"),
        ("0123456789abcdef", props("0123456789abcdef"), ["10.0.0.1"], None, "no port"),
        ("0123456789abcdef", props("0123456789abcdef"), [], 1, "no usable address"),
        ("0123456789abcdef", props("0123456789abcdef"), ["0.0.0.0", "224.0.0.251", "nope"], 1, "no usable"),
    ],
)
def test_hostile_services_are_refused(
    name_origin: str, txt: dict[bytes, bytes | None], addresses: list[str], port: int | None, reason: str
) -> None:
    with pytest.raises(SightingError, match=reason):
        parse_sighting(instance_name(name_origin), txt, addresses, port)


@pytest.mark.parametrize(
    "name",
    [
        f"evil.{SERVICE_TYPE}",
        f"neverest-0123456789ABCDEF.{SERVICE_TYPE}",
        f"neverest-0123456789abcdef0.{SERVICE_TYPE}",
        f"xneverest-0123456789abcdef.{SERVICE_TYPE}",
        "neverest-0123456789abcdef._other._tcp.local.",
    ],
)
def test_names_that_are_not_ours_are_refused(name: str) -> None:
    with pytest.raises(SightingError):
        parse_sighting(name, props("0123456789abcdef"), ["10.0.0.1"], 1)


def test_oversized_txt_is_refused() -> None:
    origin = new_origin()
    info = ServiceInfo(
        SERVICE_TYPE,
        instance_name(origin),
        port=1,
        properties={"origin": origin, "v": "1", "pad1": "x" * 200, "pad2": "x" * 200, "pad3": "x" * 200},
        parsed_addresses=["10.0.0.1"],
    )
    with pytest.raises(SightingError, match="TXT record larger"):
        sighting_from_info(info)


def test_addresses_are_cleaned_and_bounded() -> None:
    origin = new_origin()
    many = [f"10.0.0.{i}" for i in range(1, 20)]
    raw = ["fe80::1", "bogus", "10.0.0.1", "224.0.0.251", "0.0.0.0", *many]
    s = parse_sighting(instance_name(origin), props(origin), raw, 1)
    assert len(s.addresses) == MAX_ADDRESSES
    assert s.addresses[0] == "10.0.0.1" and "fe80::1" not in s.addresses  # IPv4 first, no duplicates
    assert s.addresses == tuple(f"10.0.0.{i}" for i in range(1, MAX_ADDRESSES + 1))


def test_sighting_validates_itself() -> None:
    origin = new_origin()
    with pytest.raises(SightingError):
        Sighting("nothex", ("10.0.0.1",), 1, "1", instance_name(origin))
    with pytest.raises(SightingError):
        Sighting(origin, (), 1, "1", instance_name(origin))
    with pytest.raises(SightingError):
        Sighting(origin, ("10.0.0.1",), True, "1", instance_name(origin))
    with pytest.raises(SightingError):
        Sighting(origin, ("10.0.0.1",), 1, "1", instance_name(new_origin()))


def test_a_service_info_round_trips() -> None:
    origin = new_origin()
    info = ServiceInfo(
        SERVICE_TYPE,
        instance_name(origin),
        port=9,
        properties={"origin": origin, "v": "1", "future": "ok"},
        parsed_addresses=["192.0.2.7"],
    )
    assert sighting_from_info(info) == Sighting(origin, ("192.0.2.7",), 9, "1", instance_name(origin))


@pytest.mark.parametrize("interfaces", [[], "eth0", ["eth0"], ["not an ip"]])
def test_interfaces_must_be_addresses_or_all(interfaces: list[str] | str) -> None:
    with pytest.raises(ValueError):
        Discovery(interfaces=interfaces, on_sighting=lambda s: None, on_gone=lambda o: None)


def test_start_refuses_bad_origin_and_port_before_opening_sockets() -> None:
    d = Discovery(interfaces=LOOPBACK, on_sighting=lambda s: None, on_gone=lambda o: None)
    with pytest.raises(ValueError, match="origin"):
        d.start("NOTHEX", 1)
    with pytest.raises(ValueError, match="port"):
        d.start(new_origin(), 0)
    d.close()
    d.close()


def test_cli_refuses_bad_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        mdns.main(["--origin", new_origin(), "--port", "1", "--interface", "127.0.0.1", "--seconds", "0"])
    assert exc.value.code == 2
    assert "--seconds" in capsys.readouterr().err


# --- two memories on loopback --------------------------------------------------------------------


@dataclass
class Recorder:
    """Collects callback events from zeroconf threads; waits on them with a deadline."""

    events: list[tuple[str, Sighting | str]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def on_sighting(self, s: Sighting) -> None:
        with self.cond:
            self.events.append(("sighting", s))
            self.cond.notify_all()

    def on_gone(self, origin: str) -> None:
        with self.cond:
            self.events.append(("gone", origin))
            self.cond.notify_all()

    def wait(self, predicate: Callable[[list[tuple[str, Sighting | str]]], bool], timeout: float = WAIT) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.events), timeout)

    def sightings(self, origin: str) -> list[Sighting]:
        with self.cond:
            return [e for k, e in self.events if k == "sighting" and isinstance(e, Sighting) and e.origin == origin]

    def sightings_all(self) -> list[Sighting]:
        with self.cond:
            return [e for _, e in self.events if isinstance(e, Sighting)]

    def origins_seen(self) -> set[str]:
        with self.cond:
            return {e.origin for k, e in self.events if isinstance(e, Sighting)}


class LogRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.messages.append(record.getMessage())
            self.cond.notify_all()

    def wait_ignored(self, name: str, timeout: float = WAIT) -> str | None:
        prefix = f"mdns: ignoring {name!r}: "
        with self.cond:
            self.cond.wait_for(lambda: any(m.startswith(prefix) for m in self.messages), timeout)
            return next((m[len(prefix) :] for m in self.messages if m.startswith(prefix)), None)


@pytest.fixture
def mdns_log() -> Iterator[LogRecorder]:
    handler = LogRecorder()
    logger = logging.getLogger("neverest.peers.mdns")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


@pytest.fixture
def raw_zeroconf() -> Iterator[Zeroconf]:
    """A bare Zeroconf on loopback only, to play peers that do not use Discovery."""
    zc = Zeroconf(interfaces=LOOPBACK)
    try:
        yield zc
    finally:
        zc.close()


def raw_info(instance: str, port: int, properties: dict[str, str]) -> ServiceInfo:
    return ServiceInfo(
        SERVICE_TYPE,
        f"{instance}.{SERVICE_TYPE}",
        port=port,
        properties=properties,
        server=f"{instance}.local.",
        parsed_addresses=["127.0.0.1"],
    )


def test_two_memories_see_each_other_on_loopback_and_hostile_services_are_ignored(
    mdns_log: LogRecorder, raw_zeroconf: Zeroconf
) -> None:
    t0 = time.monotonic()
    a_origin, b_origin, v2_origin = new_origin(), new_origin(), new_origin()
    a_port, b_port = new_port(), new_port()
    a_rec, b_rec = Recorder(), Recorder()
    a = Discovery(interfaces=LOOPBACK, on_sighting=a_rec.on_sighting, on_gone=a_rec.on_gone)
    b = Discovery(interfaces=LOOPBACK, on_sighting=b_rec.on_sighting, on_gone=b_rec.on_gone)
    tag = secrets.token_hex(3)
    malformed, upper, mismatched, big = new_origin(), new_origin(), new_origin(), new_origin()
    hostile = {
        f"neverest-{malformed}": {"origin": "NOT-HEX!", "v": "1"},
        f"neverest-{upper}": {"origin": upper.upper(), "v": "1"},
        f"neverest-{mismatched}": {"origin": new_origin(), "v": "1"},
        f"neverest-{big}": {"origin": big, "v": "1", "a": "x" * 250, "b": "x" * 250},
        f"neverest-{new_origin()}-{tag}": {"origin": new_origin(), "v": "1"},  # name not ours
        f"evil-{tag}": {"origin": new_origin(), "v": "1"},
    }
    hostile_infos = [raw_info(name, new_port(), txt) for name, txt in hostile.items()]
    v2_port = new_port()
    v2 = raw_info(f"neverest-{v2_origin}", v2_port, {"origin": v2_origin, "v": "2"})
    try:
        with ThreadPoolExecutor(8) as pool:  # registration probes for ~2 s each: do them side by side
            jobs = [pool.submit(raw_zeroconf.register_service, info) for info in [*hostile_infos, v2]]
            jobs += [pool.submit(a.start, a_origin, a_port), pool.submit(b.start, b_origin, b_port)]
            for job in jobs:
                job.result(timeout=WAIT)
        t_started = time.monotonic() - t0

        assert a_rec.wait(lambda _: bool(a_rec.sightings(b_origin))), "a never saw b"
        assert b_rec.wait(lambda _: bool(b_rec.sightings(a_origin))), "b never saw a"
        t_seen = time.monotonic() - t0
        (b_seen,) = a_rec.sightings(b_origin)
        assert (b_seen.port, b_seen.version, b_seen.addresses, b_seen.compatible) == (b_port, "1", ("127.0.0.1",), True)
        assert b_rec.sightings(a_origin)[0].port == a_port
        assert a.peers()[b_origin] == b_seen

        # The hostile ones were looked at and refused, each for its own reason.
        reasons = {name: mdns_log.wait_ignored(f"{name}.{SERVICE_TYPE}") for name in hostile}
        assert all(reasons.values()), reasons
        assert "16 lower-case hex" in str(reasons[f"neverest-{malformed}"])
        assert "16 lower-case hex" in str(reasons[f"neverest-{upper}"])
        assert "does not match" in str(reasons[f"neverest-{mismatched}"])
        assert "TXT record larger" in str(reasons[f"neverest-{big}"])
        # A v2 peer is reported, flagged incompatible; an update reaches us as a new sighting.
        assert a_rec.wait(lambda _: bool(a_rec.sightings(v2_origin))), "a never saw the v2 peer"
        assert a_rec.sightings(v2_origin)[0].compatible is False
        v2_moved = raw_info(f"neverest-{v2_origin}", v2_port + 1, {"origin": v2_origin, "v": "2"})
        raw_zeroconf.update_service(v2_moved)
        assert a_rec.wait(lambda _: any(s.port == v2_port + 1 for s in a_rec.sightings(v2_origin)))
        raw_zeroconf.unregister_service(v2_moved)
        assert a_rec.wait(lambda ev: ("gone", v2_origin) in ev), "the v2 peer's goodbye never arrived"

        # Nobody saw itself, nor anything hostile.
        for rec, own in ((a_rec, a_origin), (b_rec, b_origin)):
            seen = rec.origins_seen()
            assert own not in seen
            assert seen.isdisjoint({malformed, upper, mismatched, big})
            assert not any(s.name.split(".")[0] in hostile for s in rec.sightings_all())

        # b leaves: a hears the goodbye and drops it.
        b.close()
        assert a_rec.wait(lambda ev: ("gone", b_origin) in ev), "a never heard b leave"
        assert b_origin not in a.peers()
        t_gone = time.monotonic() - t0
    finally:
        a.close()
        b.close()
    print(f"started {t_started:.1f}s, saw each other {t_seen:.1f}s, gone {t_gone:.1f}s")


def test_the_documented_trio_bridge_works() -> None:
    """The module docstring's pattern: callbacks forwarded into a trio memory channel."""
    me, other = new_origin(), new_origin()
    other_rec = Recorder()
    peer = Discovery(interfaces=LOOPBACK, on_sighting=other_rec.on_sighting, on_gone=other_rec.on_gone)

    async def run() -> list[Sighting | str]:
        token = trio.lowlevel.current_trio_token()
        send, receive = trio.open_memory_channel[Sighting | str](256)

        def forward(event: Sighting | str) -> None:
            trio.from_thread.run_sync(send.send_nowait, event, trio_token=token)

        discovery = Discovery(interfaces=LOOPBACK, on_sighting=forward, on_gone=forward)
        got: list[Sighting | str] = []

        async def start_peer() -> None:
            await trio.to_thread.run_sync(peer.start, other, new_port())

        with trio.fail_after(3 * WAIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(start_peer)
                await trio.to_thread.run_sync(discovery.start, me, new_port())
            try:
                async for event in receive:
                    got.append(event)
                    if isinstance(event, Sighting) and event.origin == other:
                        await trio.to_thread.run_sync(peer.close)
                    if event == other:
                        break
            finally:
                await trio.to_thread.run_sync(discovery.close)
        return got

    try:
        got = trio.run(run)
    finally:
        peer.close()
    about_other = [e.origin if isinstance(e, Sighting) else f"gone {e}" for e in got if other in str(e)]
    assert about_other == [other, f"gone {other}"]
    assert not any(isinstance(e, Sighting) and e.origin == me for e in got)


# --- three memories in network namespaces --------------------------------------------------------

def test_three_daemons_in_namespaces_find_exactly_each_other(namespace_lan: Lan) -> None:
    lan = namespace_lan
    seconds = 8
    t0 = time.monotonic()
    origins = {ns: new_origin() for ns in lan.nodes}
    ports = {ns: new_port() for ns in lan.nodes}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for ns, address in lan.nodes.items():
        cmd = [
            "ip", "netns", "exec", ns, sys.executable, "-m", "neverest.peers.mdns",
            "--origin", origins[ns], "--port", str(ports[ns]), "--interface", address, "--seconds", str(seconds),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        lan.processes.append(proc)
    outputs: dict[str, str] = {}
    for ns, proc in zip(lan.nodes, lan.processes, strict=True):
        out, err = proc.communicate(timeout=seconds + 20)
        assert proc.returncode == 0, f"{ns} exited {proc.returncode}: {err}"
        outputs[ns] = out
    elapsed = time.monotonic() - t0

    for ns, out in outputs.items():
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        seen = {e["origin"]: e for e in events if e["event"] == "sighting"}
        others = {other: origins[other] for other in lan.nodes if other != ns}
        assert set(seen) == set(others.values()), f"{ns} saw {sorted(seen)}, expected {sorted(others.values())}"
        for other, origin in others.items():
            assert seen[origin]["addresses"] == [lan.nodes[other]]
            assert seen[origin]["port"] == ports[other]
            assert seen[origin]["version"] == PROTOCOL_VERSION and seen[origin]["compatible"] is True
    print(f"three namespace daemons ran {elapsed:.1f}s")
