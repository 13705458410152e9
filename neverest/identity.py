"""This memory's Ed25519 identity, made on first use and kept private.

The key file holds the 32-byte seed as hex on one line.  It is created with mode
0600 and published into place with ``link`` so that two processes starting at
once agree on one key.  Like ssh with a private key, we refuse to use a key file
that group or others can read: a leaked key lets anyone sign lessons and
revocations in this memory's name.

PyNaCl is imported when a key is first used to sign or to derive its public key: a command that only
reads the memory gives the public key its store already holds for this seed (``with_public``,
``seed_tag``), so `neverestctl lessons` and `status` load no crypto (docs/figures.md, start-up).
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from neverest.hashes import blake2b
from neverest.paths import KEY_FILE, ensure_home
from neverest.records import origin_of

if TYPE_CHECKING:
    import nacl.signing


class IdentityError(Exception):
    """The key file exists but cannot be used; the message says what the owner should fix."""


class Identity:
    """A seed and the key file it came from.  Read-only, as a frozen dataclass would be; a plain class
    because the read commands import this module, and ``dataclasses`` (with ``inspect``) costs them
    about 9 ms a process."""

    seed: bytes
    path: Path
    # The public key of ``seed`` when the caller already knows it (``with_public``); else derived on first use.
    known_public: bytes | None

    def __init__(self, seed: bytes, path: Path, known_public: bytes | None = None) -> None:
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "known_public", known_public)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Identity is read-only (tried to set {name})")

    def __eq__(self, other: object) -> bool:  # the known public key is a cache, not part of the identity
        if not isinstance(other, Identity):
            return NotImplemented
        return (self.seed, self.path) == (other.seed, other.path)

    def __hash__(self) -> int:
        return hash((self.seed, self.path))

    def __repr__(self) -> str:  # never the seed
        return f"Identity(path={self.path!r})"

    @functools.cached_property
    def signing_key(self) -> nacl.signing.SigningKey:
        import nacl.signing

        return nacl.signing.SigningKey(self.seed)

    @functools.cached_property
    def public_key(self) -> bytes:
        if self.known_public is not None:
            return self.known_public
        return bytes(self.signing_key.verify_key)

    @property
    def seed_tag(self) -> str:
        """What a cached public key is filed under: a keyed hash of the seed (the seed cannot be read back
        from it), so that a cache written for another key file is never taken for this one."""
        return blake2b(self.seed, digest_size=16, person=b"neverest-pubkey").hexdigest()

    def with_public(self, public_key: bytes) -> Identity:
        """This identity, its public key given (read from a cache filed under ``seed_tag``)."""
        return Identity(self.seed, self.path, public_key)

    @property
    def key(self) -> str:
        return self.public_key.hex()

    @property
    def origin(self) -> str:
        return origin_of(self.public_key)

    @classmethod
    def from_seed(cls, seed: bytes, path: Path | None = None) -> Identity:
        if len(seed) != 32:  # what SigningKey(seed) refused when it was made here
            raise ValueError("an Ed25519 seed is 32 bytes")
        return cls(seed, path or Path(os.devnull))


def _read_key(path: Path) -> Identity:
    st = path.stat()
    if st.st_mode & 0o077:
        raise IdentityError(
            f"key file {path} is accessible by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"it must be private to its owner: run `chmod 600 {path}`"
        )
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise IdentityError(f"key file {path} belongs to uid {st.st_uid}, not to this user")
    text = path.read_text(encoding="ascii", errors="replace").strip()
    try:
        seed = bytes.fromhex(text)
    except ValueError:
        seed = b""
    if len(seed) != 32:
        raise IdentityError(f"key file {path} does not hold a 64-hex-digit Ed25519 seed")
    return Identity(seed, path)


def load_or_create(home: Path) -> Identity:
    """This memory's identity, creating the key on first use."""
    path = ensure_home(home) / KEY_FILE
    if path.exists():
        return _read_key(path)
    import nacl.signing

    seed = nacl.signing.SigningKey.generate().encode()
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, seed.hex().encode("ascii") + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process made the key first
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return _read_key(path)
