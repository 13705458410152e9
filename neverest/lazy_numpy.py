"""numpy, imported on first use.

``import numpy`` costs an idle ``neverestd`` about 12 MB of resident memory and a tenth of a second
of its start (measured, benchmarks/bench_idle_rss.py and bench_daemon_start.py), yet the daemon only
needs it when a pass embeds or ranks: receiving a lesson, a sleep, a recall.  Modules the daemon
imports at start-up write::

    if TYPE_CHECKING:
        import numpy as np
    else:
        from neverest.lazy_numpy import np

and keep using ``np.`` as before (type checkers see the real module).  The first attribute read
imports numpy; it must not be used in a default argument or at module level, which would defeat it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyNumpy:
    __slots__ = ("_module",)

    def __init__(self) -> None:
        self._module: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module("numpy")
        return getattr(module, name)


np: Any = _LazyNumpy()
