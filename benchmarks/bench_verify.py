"""Benchmark: the whole `verify` pipeline against raw PyNaCl verification.

Generates N signed lesson lines (default 20 000) from a few hundred distinct
identities, then times, over the same lines and in the same run:

- baseline: libsodium's Ed25519 check through PyNaCl on bytes already cut and
  decoded (``nacl.bindings.crypto_sign_open``, the primitive under
  ``VerifyKey.verify``; ``VerifyKey.verify`` itself is also reported);
- pipeline: ``neverest.records.parse`` on each raw line: size bound, UTF-8,
  JSON with duplicate-key refusal, every field checked, origin fingerprint,
  hash recomputation, the safety-rule-1 detector, cutting ``sig`` out of the
  received bytes and the same Ed25519 check;
- cli: ``neverestctl verify FILE`` in-process, including reading the file and
  writing one JSON verdict per line.

Target (issue 2): pipeline ≥ 0.8 × baseline.  Run:

    python benchmarks/bench_verify.py [--lines 20000] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import nacl.bindings
import nacl.signing

from neverest.ctl import main as ctl_main
from neverest.records import parse, sign_lesson

SUBJECTS = ["The build", "pip install", "The test suite", "Docker compose", "The linter", "CI on macOS",
            "The cache", "Port 8080", "The migration", "npm ci"]
PROBLEMS = ["fails without LANG set", "hangs when the network is slow", "is slow on a cold cache",
            "needs root on this host", "times out after 10 minutes", "breaks under Python 3.13"]


def make_lines(n: int) -> list[bytes]:
    keys = [nacl.signing.SigningKey(i.to_bytes(32, "big")) for i in range(1, 301)]
    lines = []
    for i in range(n):
        text = f"{SUBJECTS[i % 10]} {PROBLEMS[(i // 10) % 6]} (case {i})"
        lines.append(sign_lesson(keys[i % len(keys)], kind="error", text=text, seen=1 + i % 5,
                                 strength=1.0, updated="2026-11-21T03:00:00.000000Z", seq=i + 1).raw)
    return lines


def rate(fn, items: list, repeat: int) -> float:  # type: ignore[no-untyped-def, type-arg]
    """Best lines per second over `repeat` passes (the least disturbed pass)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter() - start)
    return len(items) / best


def run(n: int, repeat: int) -> dict[str, float]:
    lines = make_lines(n)
    # Pre-cut inputs for the baselines: (sig || signed bytes, public key).
    pre = []
    for raw in lines:
        fields = json.loads(raw)
        sig = fields["sig"]
        signed = raw.replace(b',"sig":"' + sig.encode() + b'"', b"")
        pre.append((bytes.fromhex(sig), signed, bytes.fromhex(fields["key"])))

    def raw_open(item: tuple[bytes, bytes, bytes]) -> None:
        nacl.bindings.crypto_sign_open(item[0] + item[1], item[2])

    def raw_verifykey(item: tuple[bytes, bytes, bytes]) -> None:
        nacl.signing.VerifyKey(item[2]).verify(item[1], item[0])

    baseline = rate(raw_open, pre, repeat)
    verifykey = rate(raw_verifykey, pre, repeat)
    pipeline = rate(parse, lines, repeat)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        best = float("inf")
        for _ in range(repeat):
            sink = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stdout(sink):
                status = ctl_main(["verify", str(path)])
            best = min(best, time.perf_counter() - start)
            assert status == 0, "every generated line must verify"
        cli = n / best
    return {
        "lines": n,
        "baseline_crypto_sign_open_per_s": round(baseline),
        "baseline_verifykey_verify_per_s": round(verifykey),
        "pipeline_parse_per_s": round(pipeline),
        "cli_verify_per_s": round(cli),
        "pipeline_ratio": round(pipeline / baseline, 3),
        "cli_ratio": round(cli / baseline, 3),
        "target_ratio": 0.8,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.lines, args.repeat)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.lines} signed lesson lines, best of {args.repeat} passes")
        print(f"  raw PyNaCl crypto_sign_open   {result['baseline_crypto_sign_open_per_s']:>8} lines/s  (baseline)")
        print(f"  raw PyNaCl VerifyKey.verify   {result['baseline_verifykey_verify_per_s']:>8} lines/s")
        print(f"  records.parse pipeline        {result['pipeline_parse_per_s']:>8} lines/s  "
              f"= {result['pipeline_ratio']:.3f} x baseline (target >= 0.8)")
        print(f"  neverestctl verify FILE       {result['cli_verify_per_s']:>8} lines/s  "
              f"= {result['cli_ratio']:.3f} x baseline")
    return 0 if result["pipeline_ratio"] >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
