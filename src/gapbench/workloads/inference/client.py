"""A streaming client for OpenAI-compatible completion servers (vLLM, SGLang, TGI, TensorRT-LLM, llama.cpp server):
the request and timing side of `gapbench run -w llm-infer --server URL`.

Timing is on the client, as vLLM's `bench serve` and AIPerf take it: a request starts when it is sent; each
streamed chunk with text is an arrival of output; chunks without text are not (a role or usage chunk). Requests
ask for a fixed output length (`max_tokens` = `min_tokens`, `ignore_eos`), greedy, from prompts of random token
ids. A round sends its prompts with at most `concurrency` in flight, all at once or at a Poisson request rate.
Standard library only (http.client and threads): nothing to install for the client side.
"""

from __future__ import annotations

import http.client
import json
import queue
import random
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass

from gapbench.workloads.inference.metrics import RequestTrace

VERSION_ENDPOINTS = ("/version", "/get_server_info", "/info", "/props")  # vLLM, SGLang, TGI, llama.cpp


class ServerError(RuntimeError):
    """The server refused or broke off a request; the message says what it answered."""


@dataclass(frozen=True)
class Target:
    url: str  # the server's base URL, e.g. http://127.0.0.1:8000
    model: str | None = None  # the served model's name (default: the first /v1/models lists)
    timeout_s: float = 600.0

    @property
    def parts(self) -> tuple[str, str, int, str]:
        u = urllib.parse.urlsplit(self.url if "://" in self.url else f"http://{self.url}")
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server URL {self.url!r}: expected http://HOST:PORT")
        return u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80), u.path.rstrip("/")

    def connection(self) -> http.client.HTTPConnection:
        scheme, host, port, _ = self.parts
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = cls(host, port, timeout=self.timeout_s)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small chunks leave at once
        return conn

    def path(self, p: str) -> str:
        return self.parts[3] + p


def get_json(target: Target, path: str, timeout_s: float = 10.0) -> dict | list | None:
    """GET a JSON document; None when the server has no such endpoint or answers something else."""
    scheme, host, port, _ = target.parts
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = cls(host, port, timeout=timeout_s)
    try:
        conn.request("GET", target.path(path), headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            return None
        return json.loads(body)
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def probe(target: Target) -> tuple[str, dict]:
    """(the model to request, what the server says about itself): /v1/models, and the first version endpoint
    that answers. Raises ServerError when the server does not list a model and none was given."""
    models = get_json(target, "/v1/models")
    ids = [m.get("id") for m in (models or {}).get("data", []) if isinstance(m, dict)] if isinstance(models, dict) \
        else []
    model = target.model or (ids[0] if ids else None)
    if model is None:
        raise ServerError(f"{target.url}: /v1/models lists no model (is it an OpenAI-compatible server?); "
                          "name the model with --served-model")
    info: dict = {"url": target.url, "models": ids}
    for ep in VERSION_ENDPOINTS:
        doc = get_json(target, ep)
        if isinstance(doc, dict):
            info["version_endpoint"] = ep
            info["version"] = {k: doc[k] for k in list(doc)[:20] if isinstance(doc[k], (str, int, float, bool))}
            break
    return model, info


def stream_completion(target: Target, model: str, prompt: list[int], output_len: int,
                      conn: http.client.HTTPConnection | None = None) -> RequestTrace:
    """One streamed completion of `output_len` tokens; its trace on the client's clock."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": output_len, "min_tokens": output_len,
                       "ignore_eos": True, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    own = conn is None
    conn = conn or target.connection()
    try:
        start = time.perf_counter()
        conn.request("POST", target.path("/v1/completions"), body=body,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ServerError(f"HTTP {resp.status}: {resp.read()[:300].decode(errors='replace')}")
        times, usage, rid = _read_stream(resp)
    finally:
        if own:
            conn.close()
    if not times:
        raise ServerError("the stream ended without any output")
    n_out = int(usage.get("completion_tokens") or len(times))
    n_in = int(usage.get("prompt_tokens") or len(prompt))
    return RequestTrace(start, tuple(times), n_in, n_out, rid)


def _read_stream(resp) -> tuple[list[float], dict, str]:
    """Arrival times of the chunks with text, the usage the server reported, the completion's id."""
    times: list[float] = []
    usage: dict = {}
    rid = ""
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        now = time.perf_counter()
        chunk = json.loads(payload)
        rid = rid or str(chunk.get("id") or "")
        if any(_text_of(c) for c in chunk.get("choices") or []):
            times.append(now)
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
    resp.read()  # the end of the chunked body, so the connection can be reused
    return times, usage, rid


def _text_of(choice: dict) -> str:
    if not isinstance(choice, dict):
        return ""
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""


@dataclass(frozen=True)
class Round:
    traces: list[RequestTrace]
    failures: list[str]
    duration_s: float


def run_round(target: Target, model: str, prompts: list[list[int]], output_lens: list[int], concurrency: int,
              request_rate: float | None = None, seed: int = 0) -> Round:
    """Send every prompt, at most `concurrency` in flight; with a request rate, request i is not sent before its
    Poisson arrival time (exponential gaps, mean 1/rate, from `seed`). Each worker keeps one connection."""
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    for _ in prompts:
        arrivals.append(t)
        if request_rate:
            t += rng.expovariate(request_rate)
    todo: queue.Queue = queue.Queue()
    for i in range(len(prompts)):
        todo.put(i)
    traces: list[RequestTrace | None] = [None] * len(prompts)
    failures: list[str] = []
    lock = threading.Lock()
    begin = time.perf_counter()

    def worker() -> None:
        conn = None
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                break
            wait = begin + arrivals[i] - time.perf_counter()
            if request_rate and wait > 0:
                time.sleep(wait)
            try:
                conn = conn or target.connection()
                traces[i] = stream_completion(target, model, prompts[i], output_lens[i], conn)
            except (OSError, ValueError, ServerError, http.client.HTTPException) as e:
                with lock:
                    failures.append(f"request {i}: {type(e).__name__}: {e}")
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(concurrency, len(prompts)))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return Round([t for t in traces if t is not None], failures, time.perf_counter() - begin)


def random_requests(n: int, input_len: int, output_len: int, vocab: int, length_range: float,
                    seed: int) -> tuple[list[list[int]], list[int]]:
    """n prompts of random token ids and their output lengths: each length uniform in
    [L·(1 − range), L·(1 + range)] (vLLM's random dataset's --random-range-ratio), no shared prefix."""
    rng = random.Random(seed)

    def length(n_: int) -> int:
        lo, hi = max(1, round(n_ * (1 - length_range))), max(1, round(n_ * (1 + length_range)))
        return rng.randint(lo, hi)

    prompts, outs = [], []
    for _ in range(n):
        prompts.append([rng.randrange(vocab) for _ in range(length(input_len))])
        outs.append(length(output_len))
    return prompts, outs
