"""/metrics: the Prometheus 0.0.4 text format, escaped labels, bounded series."""

from __future__ import annotations

import re
from dataclasses import dataclass

from neverest.metrics import MAX_SERIES, MetricsSnapshot, Refusal, peer_health, render_metrics, snapshot_from_status

# The 0.0.4 grammar for the lines we write: comments (HELP, TYPE) and samples with escaped label values.
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(rf"({NAME})(?:\{{((?:[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE},?)*)\}})? (\S+)")
HELP = re.compile(rf"# HELP ({NAME}) (.*)")
TYPE = re.compile(rf"# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)")


def parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample by metric and labels; fails on any line the format does not allow, on a sample
    whose metric has no TYPE line before it, and on a repeated series."""
    assert text.endswith("\n")
    typed: set[str] = set()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for line in text[:-1].split("\n"):
        if m := TYPE.fullmatch(line):
            assert m[1] not in typed
            typed.add(m[1])
            samples[m[1]] = {}
            continue
        if HELP.fullmatch(line):
            continue
        m = SAMPLE.fullmatch(line)
        assert m is not None, line
        assert m[1] in typed, line
        labels = tuple((k, unescape(v)) for k, v in re.findall(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({LABEL_VALUE})",
                                                                 m[2] or ""))
        assert labels not in samples[m[1]], line
        samples[m[1]][labels] = float(m[3])
    return samples


def unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m[1], m[1]), quoted[1:-1])


SNAPSHOT = MetricsSnapshot(version="0.1.0", origin="34750f98bd59fcfc", uptime_s=12.5, records=7, episodes=3,
                           lessons=2, exchanges={"ok": 4, "failed": 1},
                           refusals=[Refusal("gossip", "bad-signature", 2), Refusal("folder", "oversize", 1)],
                           peers={"healthy": 2, "backoff": 1}, last_sleep_unix=1_772_334_000.0)


def test_every_metric_has_help_and_type_and_the_values() -> None:
    text = render_metrics(SNAPSHOT)
    got = parse(text)
    assert got["neverest_build_info"] == {(("version", "0.1.0"), ("origin", "34750f98bd59fcfc")): 1}
    assert got["neverest_uptime_seconds"] == {(): 12.5}
    assert got["neverest_records"] == {(): 7} and got["neverest_episodes"] == {(): 3}
    assert got["neverest_lessons"] == {(): 2}
    assert got["neverest_exchanges_total"] == {(("outcome", "failed"),): 1, (("outcome", "ok"),): 4}
    assert got["neverest_refusals_total"] == {(("source", "folder"), ("reason", "oversize")): 1,
                                              (("source", "gossip"), ("reason", "bad-signature")): 2}
    assert got["neverest_peers"] == {(("health", "backoff"),): 1, (("health", "healthy"),): 2}
    assert got["neverest_last_sleep_timestamp_seconds"] == {(): 1_772_334_000}
    assert "# TYPE neverest_refusals_total counter" in text and "# TYPE neverest_peers gauge" in text
    for name in got:
        assert f"# HELP {name} " in text


def test_a_hostile_label_cannot_forge_lines() -> None:
    hostile = 'bad"} 1\n# TYPE neverest_fake counter\nneverest_fake 99\\'
    snapshot = MetricsSnapshot(version="0", origin="o", uptime_s=0, records=0, episodes=0, lessons=0,
                               refusals=[Refusal(hostile, hostile, 3)])
    text = render_metrics(snapshot)
    got = parse(text)
    assert "neverest_fake" not in got
    assert got["neverest_refusals_total"] == {(("source", hostile), ("reason", hostile)): 3}
    assert '\\"} 1\\n# TYPE neverest_fake counter\\nneverest_fake 99\\\\"' in text


def test_series_are_capped_and_duplicates_summed() -> None:
    refusals = [Refusal("gossip", f"reason-{i}", 1) for i in range(3 * MAX_SERIES)]
    refusals += [Refusal("gossip", "reason-0", 5), Refusal("gossip", "big", 100)]
    snapshot = MetricsSnapshot(version="0", origin="o", uptime_s=0, records=0, episodes=0, lessons=0,
                               refusals=refusals)
    series = parse(render_metrics(snapshot))["neverest_refusals_total"]
    assert len(series) == MAX_SERIES
    assert series[(("source", "gossip"), ("reason", "big"))] == 100
    assert series[(("source", "gossip"), ("reason", "reason-0"))] == 6
    assert sum(series.values()) == 3 * MAX_SERIES + 105  # nothing is lost, the tail is summed into "other"
    assert series[(("source", "other"), ("reason", "other"))] > 0


def test_no_sleep_yet_means_no_sample_and_odd_floats_are_written_as_the_format_says() -> None:
    snapshot = MetricsSnapshot(version="0", origin="o", uptime_s=float("nan"), records=0, episodes=0, lessons=0)
    text = render_metrics(snapshot)
    got = parse(text)
    assert got["neverest_last_sleep_timestamp_seconds"] == {}
    assert "neverest_uptime_seconds NaN" in text


def test_a_snapshot_from_todays_status_answer() -> None:
    status = {"version": "0.1.0", "origin": "34750f98bd59fcfc", "uptime_s": 3.2, "episodes": 5, "lessons": 1,
              "records": 9, "last_sleep": "2026-03-01T03:00:00.000000Z",
              "refused": [{"source": "gossip", "reason": "fork", "count": 2}, "junk", {"count": True}]}
    snap = snapshot_from_status(status, exchanges={"ok": 1})
    assert (snap.records, snap.episodes, snap.lessons, snap.uptime_s) == (9, 5, 1, 3.2)
    assert snap.refusals[0] == Refusal("gossip", "fork", 2) and snap.refusals[1] == Refusal("", "", 0)
    assert snap.last_sleep_unix == 1_772_334_000.0
    assert snapshot_from_status({"last_sleep": "none yet"}).last_sleep_unix is None


@dataclass
class Addr:
    last_seen: str | None
    ignored_until: str | None


def test_peer_health() -> None:
    now = "2026-03-01T03:00:00.000000Z"
    addresses = [Addr(None, None), Addr("2026-03-01T02:00:00.000000Z", None),
                 Addr("2026-03-01T02:00:00.000000Z", "2026-03-01T04:00:00.000000Z"),
                 Addr("2026-02-01T02:00:00.000000Z", "2026-03-01T02:30:00.000000Z")]
    assert peer_health(addresses, now) == {"healthy": 2, "backoff": 1, "unseen": 1}
