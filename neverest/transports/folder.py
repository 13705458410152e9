"""The folder transport: memories that share a folder (a synced drive, a repository, a USB stick).

Each memory writes its own records to ``DIR/<origin>.jsonl`` and reads every other
``*.jsonl`` there through the one receive function.

- Writing is atomic: the file is written under a temporary name in the same folder,
  flushed to disk and renamed over the old one, so a reader sees the old file or the
  new one, never half of one.
- Reading trusts nothing: every line is verified, lines of any size are read with
  bounded memory, invalid lines are skipped and counted by file and reason, and a file
  that another program is still writing at worst ends in a line refused as not JSON,
  whose record is read on the next sync.
- Only files named like an origin (16 hex digits) are read; this memory's own file is
  not read back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from neverest.config import Config
from neverest.files import atomic_write
from neverest.identity import Identity
from neverest.lines import read_lines
from neverest.memory import holdings
from neverest.memory.receive import Receiver, ReceiveResult
from neverest.memory.store import Store
from neverest.records import MAX_RECORD_BYTES

_ORIGIN_FILE = re.compile(r"[0-9a-f]{16}\.jsonl")


@dataclass
class FolderResult:
    written: int = 0
    files: dict[str, ReceiveResult] = field(default_factory=dict)

    def total(self) -> ReceiveResult:
        out = ReceiveResult()
        for result in self.files.values():
            out.add(result)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"written": self.written, "files": {name: r.to_json() for name, r in self.files.items()},
                "total": self.total().to_json()}


def write_own(store: Store, identity: Identity, folder: Path) -> int:
    records = holdings.of_origin(store.db, identity.origin, current_only=True)
    # Signed records are meant to be read by the other memories: readable by all.
    atomic_write(folder / f"{identity.origin}.jsonl", b"".join(r.raw + b"\n" for r in records), mode=0o644)
    return len(records)


def read_others(store: Store, identity: Identity, folder: Path, config: Config, now: datetime
                ) -> dict[str, ReceiveResult]:
    results = {}
    with Receiver(store, own_origin=identity.origin, config=config, now=now) as receiver:
        for path in sorted(folder.iterdir()):
            if not _ORIGIN_FILE.fullmatch(path.name) or path.name == f"{identity.origin}.jsonl" or not path.is_file():
                continue
            try:
                with path.open("rb") as stream:
                    lines = (line for _, line in read_lines(stream, MAX_RECORD_BYTES) if line is None or line.strip())
                    results[path.name] = receiver.receive(lines, source=f"folder:{path.name}")
            except OSError:
                # Vanished or unreadable between listing and opening (a sync tool at work): next time.
                continue
    return results


def sync(store: Store, identity: Identity, folder: Path, config: Config, now: datetime) -> FolderResult:
    """Read every other memory's file, then write this memory's (so that what was just
    confirmed here goes out in the same sync)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = FolderResult()
    result.files = read_others(store, identity, folder, config, now)
    result.written = write_own(store, identity, folder)
    return result
