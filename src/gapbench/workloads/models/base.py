"""What the model workloads share: their options and dtypes, the precisions a run asks for, the part of a
variant every model row carries (dtype, weights, attention, compile), the checks before anything is built, and
the single iteration a shape trace (gapbench assess) builds."""

from __future__ import annotations

from typing import ClassVar

from gapbench.results import Measurement
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.models.memory import host_memory_shortfall
from gapbench.workloads.models.options import ModelOptions
from gapbench.workloads.models.precision import (
    DTYPES,
    Precision,
    attention_choice,
    batch_option,
    choose_precision,
    choose_precisions,
    precision_unsupported,
)
from gapbench.workloads.models.prepare import Prepared, missing_dependency


class ModelWorkload(Workload):
    """A real model from configs with random weights, trained or run end to end on synthetic inputs."""

    category = "model"
    options = ModelOptions
    dtypes = DTYPES
    requires: ClassVar[tuple[str, ...]] = ("transformers",)  # what must import before anything is built
    training: ClassVar[bool] = True  # training keeps fp32 master weights (precision.precision_of)
    default_preset = "tiny"

    def precisions(self, ctx: Context, **kw) -> list[Precision]:
        """One per dtype asked for that the model computes in, else the device's default."""
        return choose_precisions(ctx.device, self.opts(ctx), training=self.training, **kw)

    def model_params(self, ctx: Context, precision: Precision) -> dict:
        """The part of a variant every model row carries."""
        o = self.opts(ctx)
        weights = {"weights": precision.weights} if self.training else {}  # inference: weights in the compute dtype
        return {"dtype": precision.dtype, **weights, "attention": o.attention, "compile": o.compile}

    def transformer_params(self, preset: str, config: dict, seq_len: int, batch, ctx: Context,
                           precision: Precision) -> dict:
        """The variant of a transformer's step: the model's shape, the batch, and the model part."""
        return {"model": preset, "layers": config["num_hidden_layers"], "hidden": config["hidden_size"],
                "seq_len": seq_len, "batch_size": batch, **self.model_params(ctx, precision)}

    def memory_refusal(self, variant: Variant, ctx: Context, fixed_bytes: float,
                       per_sample_bytes: float) -> Measurement | None:
        """`oom` before anything is built when the step cannot fit where device memory is host memory (the
        kernel's OOM killer would take the worker with it); None when it may fit."""
        b = variant.params["batch_size"]
        short = host_memory_shortfall(fixed_bytes + per_sample_bytes * (1 if b == "auto" else b), ctx.device)
        return self.failed(variant, ctx, "oom", short) if short else None

    def prepare(self, variant: Variant, ctx: Context) -> Prepared | Measurement:
        """Prepared, or the failed Measurement to return: a missing library is `unsupported` with the install
        hint. The precision is read back from the variant (its identity)."""
        missing = missing_dependency(*self.requires)
        if missing:
            return self.failed(variant, ctx, "unsupported", missing)
        prm = variant.params
        attn_impl, backends = attention_choice(prm)
        return Prepared(Precision(prm["dtype"], prm.get("weights", prm["dtype"]), "variant"), attn_impl, backends)

    def traced_setup(self, device, options: dict | None, default_batch: int, **kw) -> tuple:
        """(precision, attn_impl, sdpa backends, batch) of the one iteration a shape trace builds: the first
        dtype asked for, a number for the batch (auto is found by running out of memory)."""
        opts = self.options.model_validate(dict(options or {}))
        precision = choose_precision(device, opts, training=self.training, **kw)
        why = precision_unsupported(device, precision)
        if why:
            raise ValueError(why)
        batch = batch_option(opts, default_batch)
        if batch == "auto":
            raise ValueError("--batch-size auto is found by running out of memory; give a number to trace")
        return (precision, *attention_choice(opts), batch)
