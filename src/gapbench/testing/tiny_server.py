"""A small OpenAI-compatible completion server that streams tokens from llm-infer's tiny model (random weights),
to try `gapbench run -w llm-infer --server URL` without an inference engine, and to test the client against.

    python -m gapbench.testing.tiny_server [--port 8000] [--threads 1]

Endpoints: POST /v1/completions (token-id or text prompt, `max_tokens`, `stream`; greedy, no EOS, so every
request gets exactly max_tokens tokens), GET /v1/models, GET /version, and GET /gapbench/timings: when the server
received each request and wrote each of its chunks, on this host's monotonic clock (time.perf_counter), by
completion id — the server's own side of the timings a client measures. Each request runs its own batch of one
(threads, no batching across requests). Text is the token ids written out ("<17>"): there is no tokenizer.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

MODEL_NAME = "gapbench-tiny"
KEEP_TIMINGS = 10_000


class TinyModel:
    def __init__(self, dtype: torch.dtype = torch.float32):
        from gapbench.workloads.inference import generate
        from gapbench.workloads.inference.llm_infer import PRESETS

        self.cfg = PRESETS["tiny"].config
        torch.manual_seed(0)
        self.model = generate.build_random_llama(self.cfg, "sdpa", torch.device("cpu"), dtype)
        self.dtype = dtype

    def stream(self, prompt: list[int], max_tokens: int):
        from gapbench.workloads.inference.generate import StaticGenerator

        g = StaticGenerator(self.model, 1, len(prompt), max_tokens, torch.device("cpu"), self.dtype)
        for column in g.stream(torch.tensor([prompt], dtype=torch.long)):
            yield int(column[0])


class Timings:
    """Server-side timestamps of the last requests, by completion id."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_id: OrderedDict[str, dict] = OrderedDict()

    def add(self, rid: str, entry: dict) -> None:
        with self.lock:
            self.by_id[rid] = entry
            while len(self.by_id) > KEEP_TIMINGS:
                self.by_id.popitem(last=False)

    def snapshot(self) -> dict:
        with self.lock:
            return dict(self.by_id)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gapbench-tiny-server"
    model: TinyModel
    timings: Timings

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: a benchmark's server does not print a line per request

    def _json(self, status: int, doc) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model",
                                                         "owned_by": "gapbench"}]})
        elif self.path == "/version":
            from gapbench import __version__

            self._json(200, {"version": __version__, "server": self.server_version})
        elif self.path == "/gapbench/timings":
            self._json(200, self.timings.snapshot())
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        received = time.perf_counter()
        if self.path != "/v1/completions":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            prompt = _prompt_ids(req.get("prompt"), self.model.cfg["vocab_size"])
            max_tokens = int(req.get("max_tokens") or 16)
            if max_tokens < 1 or len(prompt) + max_tokens > self.model.cfg["max_position_embeddings"]:
                raise ValueError(f"{len(prompt)} prompt + {max_tokens} new tokens do not fit the context of "
                                 f"{self.model.cfg['max_position_embeddings']}")
        except (ValueError, TypeError, KeyError) as e:
            self._json(400, {"error": {"message": str(e)}})
            return
        rid = f"cmpl-{uuid.uuid4().hex[:16]}"
        if req.get("stream"):
            self._stream(rid, prompt, max_tokens, received)
        else:
            tokens = list(self.model.stream(prompt, max_tokens))
            self._json(200, {"id": rid, "object": "text_completion", "model": MODEL_NAME,
                             "choices": [{"index": 0, "text": "".join(f"<{t}>" for t in tokens),
                                          "finish_reason": "length"}],
                             "usage": _usage(len(prompt), len(tokens))})

    def _stream(self, rid: str, prompt: list[int], max_tokens: int, received: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = []
        n = 0
        for token in self.model.stream(prompt, max_tokens):
            n += 1
            last = n == max_tokens
            self._event({"id": rid, "object": "text_completion", "model": MODEL_NAME,
                         "choices": [{"index": 0, "text": f"<{token}>",
                                      "finish_reason": "length" if last else None}]})
            sent.append(time.perf_counter())
        # recorded before the stream ends, so a client that has read the whole stream finds it
        self.timings.add(rid, {"received": received, "token_times": sent, "prompt_tokens": len(prompt)})
        self._event({"id": rid, "object": "text_completion", "model": MODEL_NAME, "choices": [],
                     "usage": _usage(len(prompt), n)})
        self._write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, doc: dict) -> None:
        self._write(b"data: " + json.dumps(doc).encode() + b"\n\n")

    def _write(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _prompt_ids(prompt, vocab: int) -> list[int]:
    """Token ids as given, or a text prompt's UTF-8 bytes folded into the vocabulary (there is no tokenizer)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        if any(x < 0 or x >= vocab for x in prompt):
            raise ValueError(f"token ids must be in [0, {vocab})")
        return prompt
    if isinstance(prompt, str) and prompt:
        return [b % vocab for b in prompt.encode()]
    raise ValueError("prompt must be a non-empty list of token ids or a string")


def serve(host: str = "127.0.0.1", port: int = 0, dtype: torch.dtype = torch.float32) -> ThreadingHTTPServer:
    """A started server (in a daemon thread); `server.server_address` has the port."""
    handler = type("TinyHandler", (Handler,), {"model": TinyModel(dtype), "timings": Timings()})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    server = serve(args.host, args.port)
    host, port = server.server_address[:2]
    print(f"gapbench tiny server: http://{host}:{port} (model {MODEL_NAME})", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
