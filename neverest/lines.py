"""Reading record lines from untrusted files with bounded memory.

Every transport that carries records as lines (standard input, the folder, the
HTTP commons) reads them through ``read_lines``: a line is never held beyond
``limit`` bytes, so a 50 MB line costs a 64 KiB buffer, not 50 MB, and reading
goes on with the next line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

_SKIP_CHUNK = 64 * 1024


def read_lines(stream: BinaryIO, limit: int) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(line_number, line)`` for every line, numbered from 1.

    ``line`` is the bytes without the line ending (``\\n`` or ``\\r\\n``), or None when
    the line is longer than ``limit`` bytes: such a line is skipped without being held.
    Blank lines are yielded too, so that numbers match what an editor shows.
    """
    number = 0
    while True:
        line = stream.readline(limit + 2)  # room for "\r\n" after a line of exactly `limit`
        if not line:
            return
        number += 1
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
            yield number, (line if len(line) <= limit else None)
            continue
        if len(line) <= limit:  # the last line, without a line ending
            yield number, line
            continue
        while True:  # an oversize line: drain it in bounded chunks
            rest = stream.readline(_SKIP_CHUNK)
            if not rest or rest.endswith(b"\n"):
                break
        yield number, None
