"""The request log: TF Serving PredictionLog records, one folder per day.

    <log dir>/<model>/<YYYY-MM-DD>/requests-<host>-<pid>-<HHMMSS>.tfrecord

Each record is a `tensorflow_serving.apis.prediction_log_pb2.PredictionLog` with a
`predict_log` (the request as TF Serving received it, the response it sent) and
`log_metadata` (model name, the version that answered, signature, sampling rate and
`timestamp_secs`): the record TF Serving's own request logger writes, so any tool that reads
TF Serving logs reads these. Open-source TF Serving registers no log collector
(docs/guide/monitoring.md gives the evidence); the request logger in the serving pod
(`proxy.py`) writes them.

    writer = RequestLogWriter("/mnt/mptfx/request_log")
    writer.write(predict_log_from_rest("digits", 3, request_json, response_json, signature))
    logs, problems = read_window("/mnt/mptfx/request_log", "digits", since, until)

Files are uncompressed and flushed after every record, so a killed writer leaves at most one
torn record at the end of its file; the reader keeps every whole record before damage and
names the file in one line. A new process always starts a new file.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.core.text import one_line
from components.serving.rest_json import (
    COLUMNS_ANSWER_KEY,
    COLUMNS_KEY,
    ROWS_ANSWER_KEY,
    ROWS_KEY,
    columns,
    decode_b64,
)

FILE_SUFFIX = ".tfrecord"
DAY_FORMAT = "%Y-%m-%d"


def day_dir(log_dir: str | os.PathLike, model_name: str, when: dt.datetime) -> Path:
    """The folder of one model's records of one UTC day."""
    return Path(log_dir) / model_name / when.astimezone(dt.timezone.utc).strftime(DAY_FORMAT)


# -- writing ----------------------------------------------------------------------------------


def _tensor(value: Any, dtype: Any) -> Any:
    """A TensorProto of a REST JSON value with the signature's dtype."""
    import numpy as np
    import tensorflow as tf

    dtype = tf.dtypes.as_dtype(dtype)
    if dtype == tf.string:
        return tf.make_tensor_proto(np.array(decode_b64(value), dtype=object), dtype=tf.string)
    return tf.make_tensor_proto(np.array(value, dtype=dtype.as_numpy_dtype))


def predict_log_from_rest(
    model_name: str,
    version: int,
    request: Mapping[str, Any],
    response: Mapping[str, Any],
    signature: Any,
    sampling_rate: float = 1.0,
    now: dt.datetime | None = None,
) -> Any:
    """The PredictionLog of one REST predict call that TF Serving answered.

    Args:
        model_name, version: the model and the version that answered (0 = unknown).
        request, response: the JSON bodies as sent and received.
        signature: the `SignatureDef` the request addressed (gives the tensors' dtypes).
        sampling_rate: recorded in the log's metadata, as TF Serving does.
        now: the record's timestamp (default: the current time).
    """
    from tensorflow_serving.apis import (
        logging_pb2,
        model_pb2,
        predict_pb2,
        prediction_log_pb2,
    )
    from tensorflow_serving.config import logging_config_pb2

    signature_name = str(request.get("signature_name") or "serving_default")
    spec = model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
    if version:
        spec.version.value = int(version)
    predict_request = predict_pb2.PredictRequest(model_spec=spec)
    for name, value in columns(request, COLUMNS_KEY, ROWS_KEY,
                               list(signature.inputs)).items():
        predict_request.inputs[name].CopyFrom(_tensor(value, signature.inputs[name].dtype))
    predict_response = predict_pb2.PredictResponse(model_spec=spec)
    for name, value in columns(response, COLUMNS_ANSWER_KEY, ROWS_ANSWER_KEY,
                               list(signature.outputs)).items():
        predict_response.outputs[name].CopyFrom(_tensor(value, signature.outputs[name].dtype))
    when = now or dt.datetime.now(dt.timezone.utc)
    metadata = logging_pb2.LogMetadata(
        model_spec=spec,
        sampling_config=logging_config_pb2.SamplingConfig(sampling_rate=sampling_rate),
        timestamp_secs=int(when.timestamp()),
    )
    return prediction_log_pb2.PredictionLog(
        log_metadata=metadata,
        predict_log=prediction_log_pb2.PredictLog(request=predict_request,
                                                  response=predict_response),
    )


class RequestLogWriter:
    """Appends PredictionLogs under `log_dir`, one file per process, model and UTC day.

    Thread-safe; every record is flushed as it is written. `close()` ends the open files.
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self.log_dir = Path(log_dir)
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], tuple[Path, Any]] = {}  # (model, day) -> file
        self.paths: list[Path] = []  # every file this writer started, oldest first

    def write(self, log: Any) -> Path:
        """Append one PredictionLog to its model's file of the record's day; its path."""
        import tensorflow as tf

        when = dt.datetime.fromtimestamp(log.log_metadata.timestamp_secs, dt.timezone.utc)
        model_name = log.log_metadata.model_spec.name
        key = (model_name, when.strftime(DAY_FORMAT))
        with self._lock:
            if key not in self._open:
                for other in [k for k in self._open if k[0] == model_name]:
                    self._open.pop(other)[1].close()  # a new day: yesterday's file is done
                folder = day_dir(self.log_dir, model_name, when)
                folder.mkdir(parents=True, exist_ok=True)
                started = dt.datetime.now(dt.timezone.utc)
                path = folder / (f"requests-{socket.gethostname()}-{os.getpid()}-"
                                 f"{started:%H%M%S%f}{FILE_SUFFIX}")
                self._open[key] = (path, tf.io.TFRecordWriter(str(path)))
                self.paths.append(path)
            path, writer = self._open[key]
            writer.write(log.SerializeToString())
            writer.flush()
            return path

    def close(self) -> None:
        """Close every open file."""
        with self._lock:
            for _, writer in self._open.values():
                writer.close()
            self._open.clear()


# -- reading ----------------------------------------------------------------------------------


@dataclass
class LogWindow:
    """The records of one model logged in [since, until), and what could not be read."""

    records: list[Any] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _days(since: dt.datetime, until: dt.datetime) -> list[str]:
    first = since.astimezone(dt.timezone.utc).date()
    last = until.astimezone(dt.timezone.utc).date()
    return [(first + dt.timedelta(days=n)).strftime(DAY_FORMAT)
            for n in range((last - first).days + 1)]


def read_window(log_dir: str | os.PathLike, model_name: str, since: dt.datetime,
                until: dt.datetime) -> LogWindow:
    """Every whole PredictionLog of `model_name` timestamped in [since, until).

    A file that is truncated, corrupt or not PredictionLogs adds one line to `problems`
    naming it and how many of its records were kept (the whole ones before the damage).
    """
    window = LogWindow()
    # Records carry whole seconds: compare with the exact bounds, so a record of the current
    # second is inside a window that ends now.
    start, end = since.timestamp(), until.timestamp()
    for day in _days(since, until):
        folder = Path(log_dir) / model_name / day
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob(f"*{FILE_SUFFIX}")):
            window.files.append(path)
            records, problem = _read_file(path)
            if problem:
                window.problems.append(problem)
            window.records += [r for r in records
                               if start <= r.log_metadata.timestamp_secs < end]
    return window


def _read_file(path: Path) -> tuple[list[Any], str | None]:
    import tensorflow as tf
    from google.protobuf.message import DecodeError
    from tensorflow_serving.apis import prediction_log_pb2

    records: list[Any] = []
    try:
        for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            try:
                records.append(prediction_log_pb2.PredictionLog.FromString(raw))
            except DecodeError:
                return records, (f"{path}: record {len(records) + 1} is not a PredictionLog; "
                                 f"kept {len(records)} records before it, skipped the rest")
    except tf.errors.DataLossError as error:
        return records, (f"{path}: truncated or corrupt after {len(records)} records "
                         f"({one_line(error)}); kept those, skipped the rest")
    except (tf.errors.OpError, OSError) as error:
        return records, f"{path}: cannot read: {one_line(error)}; skipped"
    return records, None
