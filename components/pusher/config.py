"""`pusher`: where and how blessed models are published (components/pusher/).

pipelines/config.py composes it into the one `Config`. Importing this module is cheap
(pydantic only).

    PusherSection().keep_versions   # 5
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from components.core.sections import NAME_PATTERN, StrictSection


class PusherSection(StrictSection):
    # null in a config file: named after the data, as pipeline.name is.
    model_name: str = Field("digits", pattern=NAME_PATTERN)
    # Empty = <workspace>/serving. TF Serving's --model_base_path is <serving_dir>/<model_name>.
    serving_dir: str = ""
    # At least 2: TF Serving polls models.config, so the version it still serves must
    # outlive the push of the next one. Labelled versions are never pruned.
    keep_versions: int = Field(5, ge=2)
    # direct: a blessed version becomes `stable`; canary: it becomes `canary`, stable stays.
    rollout: Literal["direct", "canary"] = "direct"
