"""The two hash functions records are named with, BLAKE2b and SHA-256, without ``import hashlib``.

``hashlib`` loads OpenSSL's bindings (``_hashlib``) on import, about 4 ms of every read command's
process (docs/figures.md, start-up), for constructors Neverest does not use: BLAKE2b always comes from
CPython's own ``_blake2`` (hashlib takes it from there too), and SHA-256 of a 32-byte key is as quick
from CPython's built-in module as from OpenSSL.  Both give the same digests as hashlib's; where a
build lacks the built-in modules (or names them otherwise, as 3.12's ``_sha2``), hashlib's are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same functions, as typeshed knows them
    from hashlib import blake2b as blake2b
    from hashlib import sha256 as sha256
else:
    try:
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - CPython always builds _blake2
        from hashlib import blake2b
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:  # pragma: no cover - depends on the interpreter
        try:
            from _sha2 import sha256  # CPython 3.12 and later
        except ImportError:
            from hashlib import sha256

__all__ = ["blake2b", "sha256"]
