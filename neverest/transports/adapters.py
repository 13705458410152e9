"""The folder and the HTTP commons as transports the memory service syncs through.

Each adapter only moves records (write ours, read theirs through the receive
function); the service judges and renders after it (``Memory.sync``, ``Memory.night``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from neverest.config import Config
from neverest.identity import Identity
from neverest.memory.store import Store
from neverest.transports import folder

log = logging.getLogger("neverest.transports")


@dataclass
class FolderTransport:
    """A shared folder (a synced drive, a network share): one file per origin."""

    path: Path
    name: str = "folder"

    def exchange(self, store: Store, identity: Identity, config: Config, now: datetime) -> dict[str, Any]:
        try:
            return folder.sync(store, identity, self.path, config, now).to_json()
        except OSError as exc:  # the share is gone or not writable: this night goes on without it
            log.warning("folder %s: %s", self.path, exc)
            return {"error": f"folder {self.path}: {exc.strerror or exc}"}


@dataclass
class CommonsTransport:
    """An HTTP commons: push this memory's file, pull what changed, announce where peers reach us."""

    url: str
    token: str
    push: bool = True
    pull: bool = True
    announce: str = ""  # this daemon's URL for peers ("" = don't announce)
    name: str = "commons"

    def exchange(self, store: Store, identity: Identity, config: Config, now: datetime) -> dict[str, Any]:
        from neverest.transports import commons_client  # httpx: loaded only where a commons is configured

        out: dict[str, Any] = {}
        try:
            if self.push:
                out["push"] = commons_client.push(store, identity, self.url, self.token)
            if self.pull:
                out["pull"] = commons_client.pull(store, identity, self.url, self.token, config, now).to_json()
            if self.announce:
                out["announced"] = commons_client.announce(self.url, self.token, identity, self.announce, now)
        except commons_client.CommonsError as exc:
            log.warning("commons: %s", exc)
            out["error"] = str(exc)
        return out


def configured(config: Config) -> list[FolderTransport | CommonsTransport]:
    """The transports ``config`` names, synced after every sleep."""
    out: list[FolderTransport | CommonsTransport] = []
    if config.folder:
        out.append(FolderTransport(Path(config.folder)))
    if config.commons_url:
        from neverest.transports import commons_client

        try:
            token = commons_client.read_token(config.commons_token_file)
        except commons_client.CommonsError as exc:
            log.warning("commons: %s", exc)
        else:
            out.append(CommonsTransport(config.commons_url, token, announce=config.commons_announce))
    return out
