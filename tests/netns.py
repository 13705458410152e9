"""A test LAN: three network namespaces joined by a bridge in a fourth, all made and removed by the test.

Nothing is created in the root namespace, so no traffic can leave this machine's
loopback or the test's own namespaces.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def _must(*args: str) -> None:
    done = _ip(*args)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Lan:
    subnet: str
    nodes: dict[str, str]  # namespace -> its address on the bridge
    processes: list[subprocess.Popen[str]] = field(default_factory=list)


@pytest.fixture
def namespace_lan() -> Iterator[Lan]:
    """Three namespaces with one veth each, joined by a bridge that lives in a fourth namespace.

    Every link is created inside a test namespace (the veth's far end is created
    directly in the bridge namespace), so the root namespace gets no interface.
    Teardown kills the processes, then deletes the namespaces, which destroys
    the veths and the bridge with them.
    """
    if shutil.which("ip") is None:
        pytest.skip("network-namespace test skipped: no `ip` binary (iproute2) on PATH")
    if os.geteuid() != 0:
        pytest.skip("network-namespace test skipped: needs root (CAP_NET_ADMIN) for `ip netns add`")
    tag = secrets.token_hex(3)
    bridge_ns = f"nvtest-br-{tag}"
    probe = _ip("netns", "add", bridge_ns)
    if probe.returncode != 0:
        pytest.skip(f"network-namespace test skipped: `ip netns add` failed: {probe.stderr.strip()}")
    made = [bridge_ns]
    octet = 1 + secrets.randbelow(254)
    lan = Lan(subnet=f"10.77.{octet}.0/24", nodes={})
    try:
        exec_probe = _ip("netns", "exec", bridge_ns, "true")
        if exec_probe.returncode != 0:
            pytest.skip(f"network-namespace test skipped: `ip netns exec` failed: {exec_probe.stderr.strip()}")
        _must("-n", bridge_ns, "link", "add", "br0", "type", "bridge")
        _must("-n", bridge_ns, "link", "set", "br0", "up")
        for i, letter in enumerate("abc", start=1):
            ns = f"nvtest-{letter}-{tag}"
            _must("netns", "add", ns)
            made.append(ns)
            address = f"10.77.{octet}.{i}"
            _must("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{letter}", "netns", bridge_ns)
            _must("-n", bridge_ns, "link", "set", f"p{letter}", "master", "br0")
            _must("-n", bridge_ns, "link", "set", f"p{letter}", "up")
            _must("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _must("-n", ns, "link", "set", "lo", "up")
            _must("-n", ns, "link", "set", "eth0", "up")
            _must("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
            lan.nodes[ns] = address
        yield lan
    finally:
        for proc in lan.processes:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.communicate(timeout=5)
            except (subprocess.TimeoutExpired, ValueError):
                pass
        for ns in reversed(made):
            _ip("netns", "del", ns)
        left = [line for line in _ip("netns", "list").stdout.splitlines() if tag in line]
        assert not left, f"namespaces left behind: {left}"


