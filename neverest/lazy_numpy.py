"""numpy, imported on first use.

``import numpy`` costs an idle ``neverestd`` about 12 MB of resident memory and a tenth of a second
of its start (measured, benchmarks/bench_idle_rss.py and bench_daemon_start.py), yet the daemon only
needs it when a pass embeds or ranks: receiving a lesson, a sleep, a recall.  Modules the daemon
imports at start-up write::

    if TYPE_CHECKING:
        import numpy as np
    else:
        from neverest.lazy_numpy import numpy_for

        np = numpy_for(__name__)

and keep using ``np.`` as before (type checkers see the real module).  The first attribute read
imports numpy and puts it in place of the stand-in in the holding module, so later calls pay nothing;
``np`` must not be used in a default argument or at module level, which would defeat it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


class _LazyNumpy:
    __slots__ = ("_holder",)

    def __init__(self, holder: str) -> None:
        self._holder = holder

    def __getattr__(self, name: str) -> Any:
        numpy = importlib.import_module("numpy")
        module = sys.modules.get(self._holder)
        if module is not None and getattr(module, "np", None) is self:
            module.np = numpy  # type: ignore[attr-defined]  # the module's functions now find numpy itself
        return getattr(numpy, name)


def numpy_for(holder: str) -> Any:
    """A stand-in for numpy in the module named ``holder`` (pass ``__name__``), bound there as ``np``."""
    return _LazyNumpy(holder)
