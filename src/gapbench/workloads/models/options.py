"""The model workloads' options: precision, torch.compile, the attention implementation, the batch size; the
steps of a diffusion pipeline; data-parallel training across ranks."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from gapbench.workloads.options import DtypeOptions, Positive

ATTENTION = ("sdpa", "eager", "flash", "efficient", "math", "cudnn")


class ModelOptions(DtypeOptions):
    """The model workloads' options (llm-train, bert-finetune, diffusion-infer, llm-infer)."""

    title: ClassVar[str] = "model workloads (llm-train, bert-finetune, diffusion-infer, llm-infer)"
    compile: bool = Field(False, description="torch.compile the model")
    attention: Literal[ATTENTION] = Field("sdpa", description="attention implementation: sdpa (PyTorch picks the "
                                          "kernel), eager, or one SDPA kernel forced: flash, efficient, math, cudnn")
    batch_size: Positive | Literal["auto"] | None = Field(
        None, description="batch size: a number, or 'auto' (the largest that fits; default: the preset's); "
        "llm-infer: also a comma list (default there: the sweep 1, 2, 4, … up to memory)",
        json_schema_extra={"metavar": "N|auto"})


class TrainingOptions(ModelOptions):
    """Training under torch.distributed: every rank trains a copy, data-parallel (llm-train, bert-finetune)."""

    title: ClassVar[str] = "data-parallel training (llm-train, bert-finetune; with --nproc or under torchrun)"
    parallel: Literal["ddp", "fsdp"] | None = Field(None, description="train data-parallel on every rank: DDP or "
                                                    "FSDP2 (fully_shard)")
    scaling_baseline: bool = Field(True, description="with --parallel: skip the single-device run that scaling "
                                   "efficiency is measured against", json_schema_extra={"flag": "--no-baseline"})

    @model_validator(mode="after")
    def _baseline_of_a_parallel_run(self) -> TrainingOptions:
        if not self.scaling_baseline and self.parallel is None:
            raise ValueError("--no-baseline skips the single-device run of --parallel training; give --parallel")
        return self


class DiffusionOptions(ModelOptions):
    title: ClassVar[str] = "diffusion inference (diffusion-infer)"
    steps: Positive | None = Field(None, description="denoising steps (default: the preset's)")
