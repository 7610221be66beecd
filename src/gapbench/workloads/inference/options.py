"""llm-infer's options (docs/inference.md): the engine (transformers static batching, vLLM offline, or a running
OpenAI-compatible server), the input/output lengths, the batch sizes or concurrencies swept, the arrival rate,
and the latency limits of SLO attainment. Each value is checked here, and so is each combination: an option
that applies to a server only, without --server, is refused."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from gapbench.workloads.models.options import ModelOptions
from gapbench.workloads.options import MAX_ITEMS, Positive, PositiveFloat, comma_list, finite

ENGINES = ("transformers", "vllm")
DECODES = ("auto", "graph", "eager")
DEFAULT_CONCURRENCY = (4, 8, 16, 32, 64)  # InferenceMAX's sweep, ×2 from 4
SERVER_ONLY = ("served_model", "server_devices", "concurrency", "request_rate", "num_prompts", "length_range")


def _url(text: str) -> str:
    try:
        parts = urlsplit(text)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as e:
        raise ValueError(f"not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http://HOST[:PORT] or https://HOST[:PORT]")
    del port
    return text.rstrip("/")


def parse_engine_args(text: str) -> dict:
    """'max_num_batched_tokens=8192,enable_prefix_caching=false' -> keyword arguments (ints, floats, booleans)."""
    out: dict = {}
    for item in (x.strip() for x in text.split(",")):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"engine argument {item!r}: expected KEY=VALUE")
        out[key.strip()] = _value(raw.strip())
    return out


def _value(raw: str):
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _pairs(value: Any) -> Any:
    """'128:32,1024:1024' -> [[128, 32], [1024, 1024]]; pairs given as lists pass through."""
    if not isinstance(value, str):
        return value
    out = []
    for item in value.split(","):
        a, sep, b = item.strip().partition(":")
        if not sep:
            raise ValueError(f"{item.strip()!r}: expected INPUT:OUTPUT")
        out.append([a.strip(), b.strip()])
    return out


def _rate(value: Any) -> Any:
    return value if value == "inf" else finite(value)


Url = Annotated[str, AfterValidator(_url)]
Lengths = Annotated[list[tuple[Positive, Positive]], BeforeValidator(_pairs), Field(min_length=1, max_length=MAX_ITEMS)]
Counts = Annotated[list[Positive], BeforeValidator(comma_list), Field(min_length=1, max_length=MAX_ITEMS)]


class InferOptions(ModelOptions):
    """llm-infer's options, checked once."""

    title: ClassVar[str] = "LLM inference (llm-infer; docs/inference.md)"
    batch_size: Positive | Literal["auto"] | Counts | None = Field(
        None, description="batch sizes: a number, a comma list, or 'auto' (default: the sweep 1, 2, 4, … up to "
        "memory)", json_schema_extra={"metavar": "N[,N]|auto"})
    engine: Literal[ENGINES] = Field("transformers", description="transformers static batching (default) or "
                                     "vLLM's offline engine")
    server: Url | None = Field(None, description="measure a running OpenAI-compatible server (vLLM, SGLang, TGI, "
                               "TensorRT-LLM, llama.cpp) from the client side, concurrency swept",
                               json_schema_extra={"metavar": "URL"})
    served_model: Annotated[str, Field(min_length=1, max_length=500)] | None = Field(
        None, description="with --server: the model to request (default: the first in /v1/models)",
        json_schema_extra={"metavar": "NAME"})
    server_devices: Positive = Field(1, description="with --server: devices the server uses; per-device "
                                            "rows divide by N (default 1)", json_schema_extra={"metavar": "N"})
    engine_args: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        None, description="vLLM: KEY=VALUE,... passed to vllm.LLM; --server: the server's launch arguments, "
        "recorded in the results", json_schema_extra={"metavar": "TEXT"})
    lengths: Lengths | None = Field(None, description="input/output token lengths (default per preset; "
                                    "InferenceMAX's are 1024:1024,1024:8192,8192:1024)",
                                    json_schema_extra={"metavar": "IN:OUT[,IN:OUT]"})
    input_len: Positive | None = Field(None, description="input tokens per request (with --output-len)",
                                       json_schema_extra={"metavar": "N"})
    output_len: Positive | None = Field(None, description="output tokens per request (with --input-len)",
                                        json_schema_extra={"metavar": "N"})
    concurrency: Counts | None = Field(None, description="with --server: requests in flight per point (default "
                                       "4,8,16,32,64)", json_schema_extra={"metavar": "N[,N]"})
    request_rate: Annotated[PositiveFloat | Literal["inf"], BeforeValidator(_rate)] | None = Field(
        None, description="with --server: Poisson arrivals at R requests/s (default: all at once)",
        json_schema_extra={"metavar": "R"})
    num_prompts: Positive | None = Field(None, description="with --server: prompts per round (default 10 × "
                                         "concurrency)", json_schema_extra={"metavar": "N"})
    length_range: Annotated[float, BeforeValidator(finite), Field(ge=0, lt=1)] = Field(
        0.0, description="with --server: lengths uniform in [L·(1−R), L·(1+R)] (default 0)",
        json_schema_extra={"metavar": "R"})
    decode: Literal[DECODES] = Field(
        "auto", description="the transformers engine's decode step: graph (captured once as a CUDA/HIP graph and "
        "replayed each token; with --compile, torch.compile mode=reduce-overhead), eager (dispatched from Python "
        "each token: host-bound at small batches), or auto (default: graph where the device captures graphs, else "
        "eager; a capture that fails falls back to eager, the reason in the row)")
    slo_ttft_ms: PositiveFloat | None = Field(None, description="TTFT limit for SLO attainment and goodput (MLPerf "
                                              "Llama-2-70B Server: 2000; interactive: 450)",
                                              json_schema_extra={"metavar": "MS"})
    slo_tpot_ms: PositiveFloat | None = Field(None, description="TPOT limit (MLPerf Llama-2-70B Server: 200; "
                                              "interactive: 40)", json_schema_extra={"metavar": "MS"})

    @model_validator(mode="after")
    def _combinations(self) -> InferOptions:
        given = self.model_fields_set
        if self.server is None:
            stray = [n for n in SERVER_ONLY if n in given]
            if stray:
                raise ValueError(f"--{stray[0].replace('_', '-')} applies to a server: give --server URL")
            if "engine_args" in given and self.engine != "vllm":
                raise ValueError("--engine-args are vLLM's (--engine vllm) or a server's (--server)")
            if self.engine_args:
                parse_engine_args(self.engine_args)  # vLLM's are KEY=VALUE; a server's are recorded as written
        elif "engine" in given:
            raise ValueError("--engine and --server: a server runs its own engine; give one of them")
        if "decode" in given and self.kind != "transformers":
            raise ValueError("--decode chooses the transformers engine's decode step; vLLM and servers run their own")
        if (self.input_len is None) != (self.output_len is None):
            raise ValueError("give both --input-len and --output-len (or --lengths IN:OUT)")
        if self.input_len is not None and self.lengths is not None:
            raise ValueError("give --lengths or --input-len with --output-len, not both")
        return self

    # ---- what the engines read ----------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return "server" if self.server else self.engine

    @property
    def pairs(self) -> tuple[tuple[int, int], ...] | None:
        """The input/output length pairs asked for; None: the preset's."""
        if self.input_len is not None:
            return ((self.input_len, self.output_len),)
        return tuple(tuple(p) for p in self.lengths) if self.lengths else None

    @property
    def batch(self) -> tuple[int, ...] | str | None:
        """Batch sizes, "auto", or None for the sweep."""
        b = self.batch_size
        return b if b in (None, "auto") else tuple(b) if isinstance(b, list) else (b,)

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return tuple(self.concurrency) if self.concurrency else DEFAULT_CONCURRENCY

    @property
    def arrival_rate(self) -> float | None:
        """Requests/s of Poisson arrivals; None: all at once."""
        return None if self.request_rate in (None, "inf") else float(self.request_rate)

    @property
    def slo(self):
        from gapbench.workloads.inference.metrics import Slo

        return Slo(self.slo_ttft_ms, self.slo_tpot_ms)
