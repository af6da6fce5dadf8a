"""InfraValidator: the blessed candidate loaded and queried as TF Serving will serve it.

Between the Evaluator and the Pusher, as TFX's own InfraValidator
(tfx/components/infra_validator): it writes the same `InfraBlessing` artifact (custom
property `blessed`, an empty `INFRA_BLESSED` or `INFRA_NOT_BLESSED` file) and the Pusher
requires it, as TFX's Pusher does with `infra_blessing`. TFX's executor cannot run here:
it starts TF Serving with Docker or creates a Pod through the Kubernetes API from inside
the pipeline pod, and neither a Docker engine nor API access (node pods have none, by
design) nor TF Serving's binary is there. So this one talks to the server through TF
Serving's REST API: the TF Serving sidecar of its pod on Kubernetes
(`tf_serving.TFServingSidecar`), else a process of its own that loads the SavedModel
(`model_process.ModelProcess`) under the serving Deployment's memory limit.

A candidate the Evaluator did not bless is not checked (`checked` 0): it is not pushed
anyway. The result is recorded as custom properties of the blessing (`reason`, `server`,
`load_seconds`, `p50_ms`, `p99_ms`, `peak_rss_mb`, ...), which summary.json's `infra`
section reads back from ML Metadata.
"""


import logging
import os

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.utils import io_utils, path_utils

from components.infra.check import InfraResult, Limits, build_requests, check_candidate
from components.infra.config import quantity_bytes
from components.infra.model_process import ModelProcess
from components.infra.tf_serving import sidecar_from_environment

BLESSED_FILE = "INFRA_BLESSED"          # TFX's InfraValidator's file names
NOT_BLESSED_FILE = "INFRA_NOT_BLESSED"
MODEL_PROCESS_LOG = "model_process.log"
NOT_CHECKED = "not checked: the Evaluator did not bless the model"


def record_result(blessing: standard_artifacts.InfraBlessing, result: InfraResult,
                  checked: bool = True) -> None:
    """Write `result` on the InfraBlessing artifact, as TFX's InfraValidator marks it."""
    io_utils.write_string_file(
        os.path.join(blessing.uri, BLESSED_FILE if result.blessed else NOT_BLESSED_FILE), "")
    blessing.set_int_custom_property("blessed", int(result.blessed))
    blessing.set_int_custom_property("checked", int(checked))
    blessing.set_string_custom_property("reason", result.reason)
    if not checked:
        return
    blessing.set_string_custom_property("server", result.server)
    blessing.set_string_custom_property("memory_limit", result.memory_limit)
    blessing.set_string_custom_property("signatures", ",".join(result.signatures))
    blessing.set_int_custom_property("requests", result.requests)
    for key in ("start_seconds", "load_seconds", "p50_ms", "p99_ms", "peak_rss_mb"):
        value = getattr(result, key)
        if value is not None:
            blessing.set_float_custom_property(key, float(value))


@component
def InfraValidator(
    model: InputArtifact[standard_artifacts.Model],
    model_blessing: InputArtifact[standard_artifacts.ModelBlessing],
    examples: InputArtifact[standard_artifacts.Examples],
    blessing: OutputArtifact[standard_artifacts.InfraBlessing],
    model_name: Parameter[str],
    num_examples: Parameter[int] = 16,
    max_load_seconds: Parameter[float] = 60.0,
    p99_latency_ms: Parameter[float] = 250.0,
    memory_limit: Parameter[str] = "4Gi",
) -> None:
    """Load the blessed candidate in a model server, query it, bless it or say why not."""
    if not model_blessing.get_int_custom_property("blessed"):
        logging.info("InfraValidator: %s", NOT_CHECKED)
        record_result(blessing, InfraResult(reason=NOT_CHECKED), checked=False)
        return
    model_dir = path_utils.serving_model_path(model.uri)
    limits = Limits(max_load_seconds, p99_latency_ms, memory_limit, quantity_bytes(memory_limit))
    requests = build_requests(model_dir, examples.uri, num_examples)
    server = sidecar_from_environment(model_name) or ModelProcess(
        limits.memory_limit_bytes, os.path.join(blessing.uri, MODEL_PROCESS_LOG))
    with server:
        result = check_candidate(server, model_dir, requests, limits)
    logging.info("InfraValidator: %s", result)
    record_result(blessing, result)
