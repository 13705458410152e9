"""The parsers of benchmarks/bench_serf.py: what it reads from /proc/net/dev, ss and py-spy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_serf import idle_noise, lo_tx_bytes, socket_states, top_frames

NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed
  eth0: 999999 10 0 0 0 0 0 0 888888 10 0 0 0 0 0 0
    lo: 1234567 890 0 0 0 0 0 0 7654321 891 0 0 0 0 0 0
"""


def test_lo_transmit_bytes_not_receive_nor_another_interface() -> None:
    assert lo_tx_bytes(NET_DEV) == 7654321
    with pytest.raises(ValueError):
        lo_tx_bytes(NET_DEV.replace("lo:", "l0:"))


def test_socket_states_count_every_line_by_its_first_column() -> None:
    out = ("ESTAB      0 0 127.0.0.1:7500 127.0.0.1:41234\nCLOSE-WAIT 1 0 127.0.0.1:7501 127.0.0.1:41236\n"
           "ESTAB      0 0 127.0.0.1:41234 127.0.0.1:7500\nLISTEN 0 128 127.0.0.1:7500 0.0.0.0:*\n\nshort line\n")
    assert socket_states(out) == {"CLOSE-WAIT": 1, "ESTAB": 2, "LISTEN": 1}


def test_top_frames_splits_self_from_total_and_counts_a_frame_once_per_stack() -> None:
    raw = ("main (d.py:1);round (g.py:5);new_client (h.py:9) 60\n"
           "main (d.py:1);serve (s.py:3);verify (v.py:2) 30\n"
           "main (d.py:1);round (g.py:5);round (g.py:5) 10\n"  # recursion: counted once in the total
           "garbage line without a count\n")
    own, total = top_frames(raw, n=3)
    assert own == [("new_client (h.py:9)", 60.0), ("verify (v.py:2)", 30.0), ("round (g.py:5)", 10.0)]
    assert total[:2] == [("main (d.py:1)", 100.0), ("round (g.py:5)", 70.0)]
    assert top_frames("") == ([], [])


def test_idle_noise_is_zero_for_a_steady_rate_and_grows_with_bursts() -> None:
    steady = [(t * 0.25, int(t * 250)) for t in range(41)]  # 1 000 B/s for 10 s
    assert idle_noise(steady, 1000.0, 2.0) == pytest.approx(0.0, abs=1.0)
    bursty = [(t, b + (5000 if t >= 5 else 0)) for t, b in steady]  # one 5 kB burst at 5 s
    assert idle_noise(bursty, 1000.0, 2.0) > 1000
    assert idle_noise(steady, 1000.0, 20.0) is None  # no idle window as long as that
