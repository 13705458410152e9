"""Benchmarks of the HTTP commons server: the real server process on 127.0.0.1.

1. PUT/s of 100-record files, several concurrent clients, one origin each at a time:

   - *new files*: the first push of each origin, every record verified (Ed25519 and all);
   - *updates*: each origin's next push, its stored 100 records shifted by one (99 lines
     repeated byte for byte, 1 new): what a memory sends after learning one lesson.  The
     server verifies only the new line; the rest were verified when stored.
   - *floor*: the same number of ``GET`` of an origin that has no file (404): what the
     server costs per request before any file work (authentication, rate limit, routing).

   Target (docs/figures.md): ≥ 200 PUT/s of new files.  The server runs with its default rate limits (100/s,
   burst 1 100 per token) and every client has its own token, so the limiter's ceiling
   (clients × 100/s) is far above what is measured: the run reports the 429s it saw, which
   must be 0 for the figures to mean anything.  The PUT clients are a minimal HTTP/1.1
   keep-alive client on trio sockets, so that what is measured is the server: httpx costs
   2–7 ms of client CPU a request, which on a 2-CPU machine halves what the server gets.
   The run reports the CPU the server used, its verifying processes included (100 % is one CPU).

2. New files, the server's two ways of verifying, in the same run, alternated over
   ``--rounds`` rounds (medians reported): signatures checked in worker processes (the
   default) against the same server checking them in its own threads (``--verify-processes
   0``, how every release before this one worked), each on a fresh server with the same
   files; and beside them the raw verification rate of the same lines
   (``commons_protocol.first_bad_line``: the full check of every record) in one process and
   in one process per CPU, which bounds what any server could do (records/s ÷ 100 = PUT/s).
   This VM is shared and its speed varies by 2–3 × within minutes: the ratio to the raw rate
   measured in the same round is the figure that travels, and so is CPU time: the server's
   CPU per PUT (its worker processes counted) against the raw check's CPU per file; with the
   cores to itself a server does at most cores ÷ CPU per PUT.

3. A pull by a client already up to date with 1 000 origins: the requests the protocol
   needs, counted by a minimal httpx client that follows the rule of the real one (fetch
   the index with ``If-None-Match``; fetch a file only when its ETag in the index differs
   from the one remembered).  Target: 1 index request and 0 file requests.  Also shown:
   the first (cold) pull, and a pull after one origin changed.  This part runs on a server
   of its own, so that it sees exactly 1 000 files.

    python benchmarks/bench_commons.py [--origins 200] [--clients 16] [--rounds 5] [--pull-origins 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nacl.signing
import trio

from neverest.records import origin_of, sign_lesson
from neverest.transports.commons_protocol import file_lines, first_bad_line
from neverest.transports.commons_server import etag_of

AT = "2026-04-01T12:00:00.000000Z"
PER_FILE = 100
UPDATES = 2  # versions pushed after the first, per origin


def signed(seed: int, seqs: range) -> list[bytes]:
    key = nacl.signing.SigningKey(seed.to_bytes(32, "big"))
    return [sign_lesson(key, kind="error", text=f"Tool {seed} fails in case {s} on the runner", seen=1, strength=1.0,
                        updated=AT, seq=s).raw for s in seqs]


def origin(seed: int) -> str:
    return origin_of(bytes(nacl.signing.SigningKey(seed.to_bytes(32, "big")).verify_key))


def start_server(folder: Path, tokens: list[str], *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m neverest.transports.commons_server`` on 127.0.0.1 (default limits unless ``extra``); its URL."""
    folder.mkdir(parents=True, exist_ok=True)
    token_file = folder / "tokens"
    token_file.write_text("\n".join(tokens) + "\n")
    token_file.chmod(0o600)
    log = folder / "server.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "neverest.transports.commons_server", "--listen",
                                 "127.0.0.1:0", "--data", str(folder / "data"), "--tokens", str(token_file),
                                 *extra],
                                stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ))
    marker = "commons server listening on "
    deadline = time.monotonic() + 60
    while marker not in (text := log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start:\n{text}")
        time.sleep(0.05)
    return proc, text[text.index(marker) + len(marker):].split()[0]


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def _own_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _family(pid: int) -> list[int]:
    """``pid`` and its live descendants (Linux /proc)."""
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
                out += _family(int(child))
    except FileNotFoundError:
        pass
    return out


def cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU time so far of a process and of each of its live descendants (its
    verifying processes): subtract two readings with ``cpu_used``."""
    return {p: _own_cpu_seconds(p) for p in _family(pid)}


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(t - before.get(p, 0.0) for p, t in after.items())  # a process born since counts from 0


class RawClient:
    """HTTP/1.1 with keep-alive on one trio socket: a few µs of client CPU a request."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n".encode()
        self.stream: trio.SocketStream | None = None
        self.buffer = b""

    async def _fill(self, stream: trio.SocketStream) -> None:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    async def request(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> int:
        """Send one request and read its whole answer; the status."""
        if self.stream is None:
            self.stream = await trio.open_tcp_stream("127.0.0.1", self.port)
            self.buffer = b""
        stream = self.stream
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()).encode()
        await stream.send_all(f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n".encode()
                              + self.auth + extra + b"\r\n" + body)
        while b"\r\n\r\n" not in self.buffer:
            await self._fill(stream)
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if status == 304 or method == "HEAD":
            length = 0
        while len(self.buffer) < length:
            await self._fill(stream)
        self.buffer = self.buffer[length:]
        return status

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()


@dataclass
class Run:
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    server_cpu_s: float = 0.0

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def add(self, other: Run) -> None:
        self.requests += other.requests
        self.seconds += other.seconds
        self.server_cpu_s += other.server_cpu_s
        for status, n in other.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + n

    def describe(self) -> dict[str, Any]:
        return {"requests": self.requests, "seconds": round(self.seconds, 3), "per_s": round(self.per_s, 1),
                "server_cpu_percent": round(100 * self.server_cpu_s / self.seconds) if self.seconds else 0,
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())}}


Job = tuple[str, str, bytes, dict[str, str]]  # method, path, body, headers


async def run_jobs(port: int, server_pid: int, tokens: list[str], jobs: list[Job]) -> Run:
    """Run ``jobs`` on ``len(tokens)`` concurrent clients, each with its own token and connection."""
    run = Run()
    send, receive = trio.open_memory_channel[Job](len(jobs))
    for job in jobs:
        send.send_nowait(job)
    send.close()

    async def worker(token: str) -> None:
        client = RawClient(port, token)
        try:
            async for method, path, data, headers in receive.clone():
                status = await client.request(method, path, data, headers)
                run.statuses[status] = run.statuses.get(status, 0) + 1
                run.requests += 1
        finally:
            await client.aclose()

    cpu_before = cpu_seconds(server_pid)
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for token in tokens:
            nursery.start_soon(worker, token)
    run.seconds = time.perf_counter() - started
    run.server_cpu_s = cpu_used(cpu_before, cpu_seconds(server_pid))
    return run


async def bench_puts(port: int, server_pid: int, tokens: list[str], origins: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    pools = {seed: signed(seed, range(1, PER_FILE + UPDATES + 1)) for seed in range(1, origins + 1)}
    signing_s = time.perf_counter() - t0

    def version(seed: int, v: int) -> bytes:
        return b"".join(line + b"\n" for line in pools[seed][v:v + PER_FILE])

    def path(seed: int) -> str:
        return f"/commons/{origin(seed)}.jsonl"

    # Start the verifying processes first (on demand, at the first PUTs with many lines to verify).
    await run_jobs(port, server_pid, tokens[:8], new_file_jobs(range(40_001, 40_009)))
    new = await run_jobs(port, server_pid, tokens,
                         [("PUT", path(s), version(s, 0), {"if-none-match": "*"}) for s in pools])
    updates = Run()
    for v in range(1, UPDATES + 1):
        updates.add(await run_jobs(port, server_pid, tokens, [
            ("PUT", path(s), version(s, v), {"if-match": etag_of(version(s, v - 1))}) for s in pools]))
    floor = await run_jobs(port, server_pid, tokens,
                           [("GET", f"/commons/{'0' * 16}.jsonl", b"", {})] * (origins * (1 + UPDATES)))
    return {"cpus": os.cpu_count(), "clients": len(tokens), "records_per_file": PER_FILE,
            "bytes_per_file": len(version(1, 0)), "signing_s": round(signing_s, 1),
            "put_new_files": new.describe(), "put_updates": updates.describe(), "floor_get_404": floor.describe(),
            "target_put_per_s": 200,
            "rate_limited_429": sum(r.statuses.get(429, 0) for r in (new, updates, floor))}


def new_file_jobs(seeds: range) -> list[Job]:
    return [("PUT", f"/commons/{origin(s)}.jsonl", b"".join(line + b"\n" for line in signed(s, range(1, PER_FILE + 1))),
             {"if-none-match": "*"}) for s in seeds]


def _verify_file(job: Job) -> int:
    _, path, data, _ = job
    lines = file_lines(data)
    assert first_bad_line(path[9:25], lines) is None
    return len(lines)


def raw_verify_cpu_ms(jobs: list[Job]) -> float:
    """CPU time of the full check of one file of ``jobs``, in this process: unlike a rate, it
    hardly depends on what else the machine runs."""
    started = time.process_time()
    for job in jobs:
        _verify_file(job)
    return 1000 * (time.process_time() - started) / len(jobs)


def raw_verify_rate(jobs: list[Job], processes: int) -> float:
    """Records/s of the full check of every line of ``jobs``' bodies: in this process
    (``processes`` 0), or spread over that many worker processes (started before timing)."""
    if processes == 0:
        started = time.perf_counter()
        records = sum(_verify_file(job) for job in jobs)
        return records / (time.perf_counter() - started)
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_verify_file, jobs[:processes * 2]))  # start and warm every worker
        started = time.perf_counter()
        records = sum(pool.map(_verify_file, jobs))
        return records / (time.perf_counter() - started)


def compare_new_files(folder: Path, tokens: list[str], origins: int, rounds: int) -> dict[str, Any]:
    """New-file PUT/s with verification in processes against threads, and the raw verify rate,
    alternated over ``rounds`` rounds on fresh servers: the medians."""
    jobs = new_file_jobs(range(20_001, 20_001 + origins))
    # Concurrent first PUTs start every verifying process before timing (they start on demand).
    warm = new_file_jobs(range(30_001, 30_009))
    modes = {"processes": (), "threads": ("--verify-processes", "0")}
    seen: dict[str, list[Run]] = {mode: [] for mode in modes}
    raw: dict[str, list[float]] = {"one_process": [], "per_cpu_processes": []}
    raw_cpu_ms: list[float] = []
    for round_ in range(rounds):
        order = list(modes) if round_ % 2 == 0 else list(reversed(modes))
        for mode in order:
            proc, url = start_server(folder / f"{mode}-{round_}", tokens, *modes[mode])
            try:
                port = int(url.rpartition(":")[2])
                trio.run(run_jobs, port, proc.pid, tokens[:len(warm)], warm)
                seen[mode].append(trio.run(run_jobs, port, proc.pid, tokens, jobs))
            finally:
                stop_server(proc)
        raw["one_process"].append(raw_verify_rate(jobs, 0))
        raw_cpu_ms.append(raw_verify_cpu_ms(jobs))
        raw["per_cpu_processes"].append(raw_verify_rate(jobs, os.cpu_count() or 1))
    out: dict[str, Any] = {"rounds": rounds, "origins": origins}
    for mode, runs in seen.items():
        rates = [r.per_s for r in runs]
        out[mode] = {"per_s": [round(x, 1) for x in rates], "median_per_s": round(statistics.median(rates), 1),
                     "median_server_cpu_percent": round(statistics.median(
                         100 * r.server_cpu_s / r.seconds for r in runs)),
                     "median_server_cpu_ms_per_put": round(statistics.median(
                         1000 * r.server_cpu_s / r.requests for r in runs), 2),
                     "statuses": [r.statuses for r in runs]}
    for name, rates in raw.items():
        out[f"raw_verify_{name}"] = {"records_per_s": [round(x) for x in rates],
                                     "median_records_per_s": round(statistics.median(rates)),
                                     "median_put_per_s_bound": round(statistics.median(rates) / PER_FILE, 1)}
    out["raw_verify_cpu_ms_per_file"] = round(statistics.median(raw_cpu_ms), 2)
    out["median_ratio_processes_to_threads"] = round(statistics.median(
        p.per_s / t.per_s for p, t in zip(seen["processes"], seen["threads"], strict=True)), 2)
    out["median_ratio_processes_to_raw_per_cpu"] = round(statistics.median(
        p.per_s * PER_FILE / r for p, r in zip(seen["processes"], raw["per_cpu_processes"], strict=True)), 2)
    return out


def response_bytes(response: httpx.Response) -> int:
    """Bytes on the wire for an answer: status line, headers, body (HTTP/1.1)."""
    head = len(f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n")
    return head + sum(len(k) + len(v) + 4 for k, v in response.headers.raw) + 2 + len(response.content)


@dataclass
class Memo:
    index: str | None = None
    files: dict[str, str] = field(default_factory=dict)


async def pull(http: httpx.AsyncClient, memo: Memo) -> dict[str, Any]:
    """The protocol's pull rule, minimally: what it costs in requests and bytes."""
    out = {"index_requests": 1, "file_requests": 0, "index_status": 0, "bytes_received": 0}
    headers = {"if-none-match": memo.index} if memo.index else {}
    index = await http.get("/commons/index", headers=headers)
    out["index_status"] = index.status_code
    out["bytes_received"] += response_bytes(index)
    if index.status_code == 304:
        return out
    if index.status_code != 200:
        raise SystemExit(f"the index answered HTTP {index.status_code}: {index.text[:200]}")
    for entry in index.json():
        if memo.files.get(entry["origin"]) == entry["etag"]:
            continue
        got = await http.get(f"/commons/{entry['origin']}.jsonl")
        out["file_requests"] += 1
        out["bytes_received"] += response_bytes(got)
        if got.status_code == 200:
            memo.files[entry["origin"]] = got.headers["etag"]
    memo.index = index.headers["etag"]
    return out


async def bench_pull(url: str, token: str, origins: int) -> dict[str, Any]:
    few = {seed: signed(seed, range(1, 2)) for seed in range(10_001, 10_001 + origins)}
    client = RawClient(int(url.rpartition(":")[2]), token)
    for seed, lines in few.items():  # one record each: what is measured is the number of files
        assert await client.request("PUT", f"/commons/{origin(seed)}.jsonl", lines[0] + b"\n") == 201
    await client.aclose()
    out: dict[str, Any] = {"origins": origins}
    async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=60) as http:
        memo = Memo()
        for name in ("cold", "up_to_date", "one_changed"):
            if name == "one_changed":
                seed = next(iter(few))
                changed = b"".join(r + b"\n" for r in signed(seed, range(1, 3)))
                assert (await http.put(f"/commons/{origin(seed)}.jsonl", content=changed)).status_code == 200
            t = time.perf_counter()
            out[name] = await pull(http, memo)
            out[name]["seconds"] = round(time.perf_counter() - t, 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmarks of the HTTP commons server on 127.0.0.1.")
    parser.add_argument("--origins", type=int, default=200, help="origins pushing 100-record files (default 200)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients, one token each (default 16)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of the processes-against-threads comparison (default 5; 0: skip it)")
    parser.add_argument("--pull-origins", type=int, default=1000, help="files on the pull's server (default 1000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tokens = [f"bench-token-{i:04d}-0123456789abcdef" for i in range(args.clients)]
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "puts", tokens)
        try:
            result = trio.run(bench_puts, int(url.rpartition(":")[2]), proc.pid, tokens, args.origins)
        finally:
            stop_server(proc)
        if args.rounds > 0:
            result["compare"] = compare_new_files(Path(tmp) / "compare", tokens, args.origins, args.rounds)
        # One token fills the pull's server (1 000 PUTs) and then pulls it all (1 001 GETs): past
        # the default burst.  What is measured is the requests the protocol needs, not the limiter.
        proc, url = start_server(Path(tmp) / "pull", tokens, "--rate", "0")
        try:
            result["pull"] = trio.run(bench_pull, url, tokens[0], args.pull_origins)
        finally:
            stop_server(proc)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['cpus']} CPUs, {result['clients']} concurrent clients (one token each, default rate limits; "
          f"429s seen: {result['rate_limited_429']}), {PER_FILE}-record files ({result['bytes_per_file']} bytes)")
    for name, label in [("put_new_files", "PUT, new files (every record verified)"),
                        ("put_updates", "PUT, updates (1 new line of 100)"),
                        ("floor_get_404", "floor: GET of an absent origin (404)")]:
        r = result[name]
        print(f"  {label:40s} {r['requests']:5d} requests in {r['seconds']:6.2f} s = {r['per_s']:6.1f}/s, "
              f"server CPU {r['server_cpu_percent']:3d} %  {r['statuses']}")
    print("  target: ≥ 200 PUT/s of new files")
    if "compare" in result:
        c = result["compare"]
        print(f"new files, {c['rounds']} alternated rounds of {c['origins']} PUTs on fresh servers (medians):")
        for mode, label in [("processes", "verified in worker processes (default)"),
                            ("threads", "verified in the server's threads (before)")]:
            r = c[mode]
            print(f"  {label:42s} {r['median_per_s']:6.1f} PUT/s, server CPU {r['median_server_cpu_percent']:3d} % "
                  f"= {r['median_server_cpu_ms_per_put']:4.1f} ms a PUT  "
                  f"(rounds: {', '.join(f'{x:.0f}' for x in r['per_s'])})")
        for name, label in [("one_process", "raw verify, one process"),
                            ("per_cpu_processes", f"raw verify, {result['cpus']} processes")]:
            r = c[f"raw_verify_{name}"]
            print(f"  {label:42s} {r['median_records_per_s']:6d} records/s = {r['median_put_per_s_bound']:6.1f} "
                  f"files/s  (rounds: {', '.join(str(x) for x in r['records_per_s'])})")
        print(f"  raw verify CPU a file: {c['raw_verify_cpu_ms_per_file']:.1f} ms (one process)")
        print(f"  processes ÷ threads: {c['median_ratio_processes_to_threads']} ×; "
              f"processes ÷ raw verify on every CPU: {c['median_ratio_processes_to_raw_per_cpu']} ×")
    p = result["pull"]
    print(f"pull with {p['origins']} origins (index with If-None-Match, files only when their ETag changed):")
    for name in ("cold", "up_to_date", "one_changed"):
        r = p[name]
        print(f"  {name:12s} {r['index_requests']} index request (HTTP {r['index_status']}), "
              f"{r['file_requests']:4d} file requests, {r['bytes_received']:8d} bytes received, "
              f"{r['seconds'] * 1000:7.1f} ms")
    print("  target (up to date): 1 index request, 0 file requests")


if __name__ == "__main__":
    main()
