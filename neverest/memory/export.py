"""Export: the owner's data as JSON Lines, one object per line, each with a ``type``.

Types, in this order: ``store`` (one line: the schema version), ``episode``, ``lesson``
(with ``origins`` and ``sources`` as lists), ``prediction``, ``project``, ``peer`` (one
per address, with its origin and score), and, given the home, ``relay``: every line of the
project logs (``neverest.relay``), project by project, oldest first.  Vectors are left out (they
are recomputed from the text) and so is the private key, which is not in the store and never read
here.  The store is read in one read transaction, one consistent snapshot; the logs are read after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neverest import relay
from neverest.memory.queries import episodes, lessons, predictions, projects
from neverest.memory.store import Store, schema_version
from neverest.peers import table as peer_table


def export(store: Store, home: Path | None = None) -> Iterator[dict[str, Any]]:
    with store.read() as db:
        yield {"type": "store", "schema_version": schema_version(db)}
        for row in episodes.export_rows(db):
            yield {"type": "episode"} | row
        for row in lessons.export_rows(db):
            yield {"type": "lesson"} | row
        for row in predictions.export_rows(db):
            yield {"type": "prediction"} | row
        for project in projects.listing(db):
            yield {"type": "project"} | project._asdict()
        for address in peer_table.listing(db):
            yield {"type": "peer"} | dataclasses.asdict(address)
    if home is not None:
        for line in relay.all_entries(home):
            yield {"type": "relay"} | line.to_json()
