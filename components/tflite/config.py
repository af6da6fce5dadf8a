"""`tflite`: the TF Lite variants the TFLiteExport component writes (components/tflite/).

pipelines/config.py composes it into the one `Config`. Importing this module is cheap
(pydantic only).

    TFLiteSection().variants   # ["fp32", "fp16", "dynamic_int8", "int8"]
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.core.sections import StrictSection


class TFLiteSection(StrictSection):
    variants: list[Literal["fp32", "fp16", "dynamic_int8", "int8"]] = Field(
        default_factory=lambda: ["fp32", "fp16", "dynamic_int8", "int8"]
    )
    uint8_io: bool = False
    representative_samples: int = Field(200, ge=1)
    # 0 = the whole eval split.
    parity_limit: int = Field(0, ge=0)
