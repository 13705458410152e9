"""The listen address (``HOST:PORT``) checked before anything binds, so a typo gets one clear line."""

from __future__ import annotations

import ipaddress
from typing import TypeVar

E = TypeVar("E", bound=BaseException)


class ListenError(ValueError):
    """The listen address is not usable; the message says what to give instead."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as (host, port); raises ListenError."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host:
        raise ListenError(f"--listen {text!r}: give HOST:PORT, like 0.0.0.0:7428 or 127.0.0.1:7428")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ListenError(f"--listen {text!r}: the port must be a number from 0 to 65535 (0: any free port)")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in bare and not host.startswith("["):
        raise ListenError(f"--listen {text!r}: write an IPv6 address in brackets, like [::1]:7428")
    if ":" in bare:
        try:
            ipaddress.IPv6Address(bare)
        except ValueError:
            raise ListenError(f"--listen {text!r}: {bare} is not an IPv6 address") from None
    return bare, int(port_text)


def first_of(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of ``kind`` in ``exc``, looking inside exception groups (trio's
    nurseries and hypercorn's wrap what their tasks raise)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = first_of(inner, kind)
            if found is not None:
                return found
    return None
