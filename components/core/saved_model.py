"""The serving signatures of an exported SavedModel, read from its saved_model.pb without
loading the model (no TensorFlow runtime, no variables): what the infra check sends its
requests to and what the request logger decodes the REST bodies it logs with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAVED_MODEL_FILE = "saved_model.pb"
SERVING_TAG = "serve"


def serving_signatures(model_dir: str | Path) -> dict[str, Any]:
    """Signature name -> SignatureDef of the serving tag's meta graph in `model_dir`
    (TensorFlow's own `__saved_model_init_op` entries left out; {} without a serving tag)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel.FromString(
        (Path(model_dir) / SAVED_MODEL_FILE).read_bytes())
    for meta_graph in saved_model.meta_graphs:
        if SERVING_TAG in meta_graph.meta_info_def.tags:
            return {name: signature for name, signature in meta_graph.signature_def.items()
                    if not name.startswith("__")}
    return {}
