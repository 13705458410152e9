"""Benchmark: what the model proxy adds to a call on loopback, against the same upstream called directly.

Target (issue 25): the proxy adds at most 5 ms at p50 to a non-streamed request, and at most 5 ms to
the first byte of a streamed one, measured against the same upstream called directly in the same run.

Three processes, as in use: a fake model server (``tests/fake_upstream.py`` under hypercorn), the proxy
(``neverestctl proxy``, a real process with its own home), and this one, the client (httpx, one
kept-alive connection to each, as an SDK holds).  The fake model streams its events ``--token-delay-ms``
apart, as a model's tokens come: a stream whose every event is there at once would measure the proxy
forwarding the rest while the first byte is on its way, which no model gives it.  Direct and proxied
calls are interleaved so that a noisy neighbour weighs on both alike; the first ``--warmup`` of each are
left out.  Also reported: the proxy's CPU time per call (from /proc, less sensitive to the machine's
load than the latencies), the load average, and, measured after the target and apart from it, calls
with ``x-neverest-project`` (the project log read and written, the lessons looked up: no target).

    python benchmarks/bench_proxy.py [--runs 300] [--warmup 30] [--token-delay-ms 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 5.0

_UPSTREAM = """
import sys, trio, functools
sys.path.insert(0, {tests!r})
from fake_upstream import FakeUpstream
from neverest.serving import serve_asgi
app = FakeUpstream(reply="The build needs the --no-build-isolation flag when the package has a pyproject.",
                   record=False, token_delay_s={token_delay_s!r})
async def main():
    async with trio.open_nursery() as n:
        (bound,) = await n.start(functools.partial(serve_asgi, app, "127.0.0.1:{port}", logger="upstream",
                                                   server_headers=False))
        print(bound, flush=True)
trio.run(main)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_line(proc: subprocess.Popen[str], timeout_s: float = 30.0) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = proc.stdout.readline()
    if not line or time.monotonic() > deadline:
        raise RuntimeError(f"the process did not start (exit {proc.poll()})")
    return line.strip()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_call(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> float:
    """Milliseconds from sending the request to the whole answer."""
    started = time.perf_counter()
    answer = client.post(url, content=body, headers=headers)
    answer.read()
    assert answer.status_code == 200, answer.text
    return (time.perf_counter() - started) * 1000


def first_byte(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> float:
    """Milliseconds from sending a streamed request to its answer's first body byte (the rest is read too)."""
    started = time.perf_counter()
    with client.stream("POST", url, content=body, headers=headers) as answer:
        assert answer.status_code == 200
        chunks = answer.iter_raw()
        next(chunks)
        took = (time.perf_counter() - started) * 1000
        for _ in chunks:
            pass
    return took


def measure(runs: int, warmup: int, token_delay_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        home = Path(tmp) / "home"
        env = dict(os.environ, NEVEREST_HOME=str(home), PYTHONPATH=str(ROOT))
        env.pop("NEVEREST_ROUTES", None)
        subprocess.run([sys.executable, "-m", "neverest.ctl", "init"], env=env, check=True, capture_output=True)
        up_port, proxy_port = free_port(), free_port()
        upstream = subprocess.Popen([sys.executable, "-c", _UPSTREAM.format(tests=str(ROOT / "tests"), port=up_port,
                                                                      token_delay_s=token_delay_s)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        proxy = subprocess.Popen([sys.executable, "-m", "neverest.ctl", "proxy", "--listen", f"127.0.0.1:{proxy_port}",
                                  "--route", f"*=http://127.0.0.1:{up_port}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            direct_base, _ = wait_line(upstream), wait_line(proxy)
            proxied_base = f"http://127.0.0.1:{proxy_port}"
            return _run(direct_base, proxied_base, runs, warmup, proxy.pid)
        finally:
            for proc in (proxy, upstream):
                proc.terminate()
            for proc in (proxy, upstream):
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def cpu_s(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` used so far, from /proc (0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(direct_base: str, proxied_base: str, runs: int, warmup: int, proxy_pid: int) -> dict[str, Any]:
    messages = [{"role": "system", "content": "You are a careful coding agent."},
                {"role": "user", "content": "Why does pip install -e . fail here? " + "Context line. " * 40}]
    plain = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
    streamed = json.dumps({"model": "claude-sonnet", "messages": messages[1:], "max_tokens": 200,
                           "stream": True}).encode()
    auth = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    project = auth | {"x-neverest-project": "/bench/project"}
    cases = {
        "json": lambda c, base, h: one_call(c, base + "/v1/chat/completions", plain, h),
        "stream_first_byte": lambda c, base, h: first_byte(c, base + "/v1/messages", streamed, h),
    }
    samples: dict[str, dict[str, list[float]]] = {
        case: {"direct": [], "proxied": [], "proxied_project": []} for case in cases}
    cpu = {case: 0.0 for case in cases}  # the proxy's CPU time over the measured pass-through calls
    limits = httpx.Limits(max_keepalive_connections=1, max_connections=1)
    with httpx.Client(limits=limits, timeout=30) as direct, httpx.Client(limits=limits, timeout=30) as proxied:
        # The target first: direct and pass-through calls interleaved.  The calls with a project come after,
        # on their own: each leaves work behind it (the memory's events are stored once the answer is out)
        # that would weigh on the calls measured next.
        for phase in (("direct", "proxied"), ("proxied_project",)):
            for i in range(runs + warmup):
                for case, call in cases.items():
                    for name in phase:
                        client, base, headers = {"direct": (direct, direct_base, auth),
                                                 "proxied": (proxied, proxied_base, auth),
                                                 "proxied_project": (proxied, proxied_base, project)}[name]
                        before = cpu_s(proxy_pid) if name == "proxied" else 0.0
                        took = call(client, base, headers)
                        if i >= warmup:
                            samples[case][name].append(took)
                            if name == "proxied":
                                cpu[case] += cpu_s(proxy_pid) - before
                        if name == "proxied_project":
                            time.sleep(0.02)  # let the events of the call be stored before the next one
    out: dict[str, Any] = {"runs": runs, "target_ms": TARGET_MS, "load_average": os.getloadavg()[0]}
    for case, by in samples.items():
        row: dict[str, Any] = {}
        for name, values in by.items():
            row[name] = {"p50_ms": round(statistics.median(values), 3), "p95_ms": round(percentile(values, 0.95), 3)}
        added = row["proxied"]["p50_ms"] - row["direct"]["p50_ms"]
        row["added_p50_ms"] = round(added, 3)
        row["ratio_p50"] = round(row["proxied"]["p50_ms"] / row["direct"]["p50_ms"], 2)
        row["added_p50_with_project_ms"] = round(row["proxied_project"]["p50_ms"] - row["direct"]["p50_ms"], 3)
        row["proxy_cpu_ms_per_call"] = round(cpu[case] / len(by["proxied"]) * 1000, 2)
        row["met"] = added <= TARGET_MS
        out[case] = row
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--token-delay-ms", type=float, default=5.0,
                        help="the fake model's time between two events of a stream (default 5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs, args.warmup, args.token_delay_ms / 1000)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0 if all(result[c]["met"] for c in ("json", "stream_first_byte")) else 1
    print(f"proxy on loopback, {args.runs} runs each (after {args.warmup} warm-up), target: adds <= {TARGET_MS} ms "
          f"at p50; load average {result['load_average']:.2f}")
    print(f"{'case':<20}{'direct p50':>12}{'proxied p50':>13}{'added':>9}{'ratio':>7}{'p95 d/p':>16}"
          f"{'proxy cpu':>11}{'with project':>15}  target")
    for case in ("json", "stream_first_byte"):
        r = result[case]
        print(f"{case:<20}{r['direct']['p50_ms']:>10.2f}ms{r['proxied']['p50_ms']:>11.2f}ms"
              f"{r['added_p50_ms']:>7.2f}ms{r['ratio_p50']:>7.2f}"
              f"{r['direct']['p95_ms']:>8.2f}/{r['proxied']['p95_ms']:.2f}"
              f"{r['proxy_cpu_ms_per_call']:>9.2f}ms{r['proxied_project']['p50_ms']:>13.2f}ms  "
              f"{'met' if r['met'] else 'NOT met'}")
    return 0 if all(result[c]["met"] for c in ("json", "stream_first_byte")) else 1


if __name__ == "__main__":
    sys.exit(main())
