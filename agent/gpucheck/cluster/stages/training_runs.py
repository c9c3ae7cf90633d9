"""What the training stage runs (docs/training.md): the model and batch, and one run's ranks and outcome.
training.py makes the runs, training_verdict.py judges them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..context import Options
from ..layout import Layout
from ..ssh.result import Remote


@dataclass(frozen=True)
class Model:
    """The benchmark's model and batch: width 64 at 224 px is ResNet-50 as published."""

    width: int
    image_size: int
    batch_size: int  # per GPU (per rank)

    @property
    def published(self) -> bool:
        return self.width == 64 and self.image_size == 224

    def to_dict(self) -> dict[str, Any]:
        return {"name": "ResNet-50" if self.width == 64 else f"ResNet-50 at width {self.width}",
                "width": self.width, "image_size_px": self.image_size, "batch_size_per_gpu": self.batch_size}


GPU_MODEL = Model(64, 224, 256)  # NVIDIA's published runs: batch 256 per GPU, mixed precision
CPU_MODEL = Model(8, 32, 16)  # small enough for CPU ranks sharing a lab machine's cores


@dataclass
class Run:
    label: str
    lay: Layout
    done: Remote | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    blamed: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.verdict.get("passed")) and self.done is not None and self.done.ok

    @property
    def gpus(self) -> int:
        return self.lay.ranks


def model_for(options: Options, gpus: bool) -> Model:
    base = GPU_MODEL if gpus else CPU_MODEL
    return Model(options.train_width or base.width, options.train_image_size or base.image_size,
                 options.train_batch_size or base.batch_size)
