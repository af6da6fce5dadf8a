"""TF Serving's REST predict bodies, both formats, read and written as TF Serving does.

TF Serving 2.16's `util/json_tensor.cc` is the reference:

- a request has either `"instances"` (rows: a non-empty list, one element per example;
  with several inputs each element is an object `{input: value}`, with one input the
  element is the value) or `"inputs"` (columns: `{input: batch}`, or the bare batch of a
  single input); any string value may be `{"b64": "<base64>"}`, the only way JSON carries
  binary strings. So `{"instances": [{"b64": "..."}]}` feeds a single string input, such as
  `predict_image_bytes`'s `image_bytes`.
- the answer to rows is `{"predictions": [...]}` (an object per example when the signature
  has several outputs, else the bare value); to columns `{"outputs": {name: batch}}` (the
  bare batch for a single output). A string output whose name ends in `_bytes` is written
  as `{"b64": ...}`, any other as text.

The local model process (components/infra/model_process.py), the request logger and the TF
Serving test double read bodies with this module, so a body one of them accepts is one TF
Serving accepts. A leaf: numpy only.

    inputs, rows = parse_request(body, {"image_bytes": np.object_})
    reply = answer(outputs, rows)                   # {"predictions": [...]} or {"outputs": ...}
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

B64_KEY = "b64"
BYTES_SUFFIX = "_bytes"
ROWS_KEY, COLUMNS_KEY = "instances", "inputs"
ROWS_ANSWER_KEY, COLUMNS_ANSWER_KEY = "predictions", "outputs"


class RestBodyError(ValueError):
    """A body TF Serving would refuse (its HTTP 400); the message says why."""


def is_b64(value: Any) -> bool:
    """`{"b64": "<text>"}` and nothing else: TF Serving's encoding of a binary string."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(B64_KEY), str)


def b64(data: bytes) -> dict[str, str]:
    """Binary `data` as TF Serving's REST JSON writes it."""
    return {B64_KEY: base64.b64encode(data).decode("ascii")}


def rest_value(array: np.ndarray) -> Any:
    """An array as a REST JSON value: nested lists, bytes strings as `{"b64": ...}`."""
    array = np.asarray(array)
    if array.dtype.kind in ("S", "O") and array.size:
        return np.vectorize(b64, otypes=[object])(array).tolist()
    return array.tolist()


def decode_b64(value: Any) -> Any:
    """`value` with every `{"b64": ...}` replaced by its bytes, at any depth of lists."""
    if is_b64(value):
        return base64.b64decode(value[B64_KEY])
    if isinstance(value, list):
        return [decode_b64(item) for item in value]
    return value


def _array(value: Any, dtype: Any, name: str) -> np.ndarray:
    """A JSON value of input `name` as an array of `dtype` (bytes strings: an object array)."""
    decoded = decode_b64(value)
    dtype = np.dtype(dtype)
    try:
        if dtype.kind in ("O", "S", "U"):
            array = np.array(decoded, dtype=object)
            if array.dtype != object or any(isinstance(v, list) for v in array.flat):
                raise ValueError("ragged")
            return np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode(),
                                otypes=[object])(array) if array.size else array
        return np.array(decoded, dtype=dtype)
    except (ValueError, TypeError) as error:
        raise RestBodyError(f"input {name!r}: not a dense {dtype.name} tensor ({error})") \
            from None


def columns(body: Mapping[str, Any], columns_key: str, rows_key: str,
            names: list[str]) -> dict[str, Any]:
    """Name -> the JSON batch of each tensor of a body in either format (requests:
    `inputs`/`instances`; answers: `outputs`/`predictions`), b64 still encoded.

    Raises:
        RestBodyError: the tensors cannot be told apart as TF Serving tells them.
    """
    if columns_key in body:
        value = body[columns_key]
        if isinstance(value, dict) and not is_b64(value):
            missing = [name for name in names if name not in value]
            if missing:
                raise RestBodyError(f"Missing named input: {missing[0]} in "
                                    f"'{columns_key}' object.")
            return {name: value[name] for name in names}
        if len(names) > 1:
            raise RestBodyError(f"{columns_key} is a plain value/list, but expecting an "
                                f"object as multiple input tensors required")
        return {names[0]: value}
    rows = body.get(rows_key)
    if not isinstance(rows, list) or not rows:
        raise RestBodyError(f"Expecting '{rows_key}' to be a non-empty list")
    named = [isinstance(row, dict) and not is_b64(row) for row in rows]
    if named[0]:
        for number, row in enumerate(rows):
            if not named[number] or sorted(row) != sorted(names):
                raise RestBodyError(f"Failed to process element: {number} of '{rows_key}' "
                                    f"list: expecting an object with the keys "
                                    f"{','.join(sorted(names))}")
        return {name: [row[name] for row in rows] for name in names}
    if len(names) > 1:
        raise RestBodyError(f"{rows_key} is a plain list, but expecting list of objects as "
                            f"multiple input tensors required")
    if any(named):
        raise RestBodyError(f"Expecting value/list but got object at item {named.index(True)} "
                            f"of '{rows_key}' list")
    return {names[0]: rows}


def parse_request(body: Mapping[str, Any], dtypes: Mapping[str, Any]
                  ) -> tuple[dict[str, np.ndarray], bool]:
    """The input arrays of a predict request body and whether it came as rows.

    Args:
        body: the parsed JSON body.
        dtypes: the signature's inputs, name -> numpy dtype (object for strings).

    Raises:
        RestBodyError: a body TF Serving would refuse, naming why.
    """
    if not isinstance(body, Mapping):
        raise RestBodyError("the body is not a JSON object")
    if (ROWS_KEY in body) == (COLUMNS_KEY in body):
        raise RestBodyError(f"expecting exactly one of '{COLUMNS_KEY}' or '{ROWS_KEY}' keys")
    rows = ROWS_KEY in body
    values = columns(body, COLUMNS_KEY, ROWS_KEY, list(dtypes))
    return {name: _array(value, dtypes[name], name) for name, value in values.items()}, rows


def _json_value(name: str, array: np.ndarray) -> Any:
    if array.dtype.kind not in ("O", "S") or not array.size or name.endswith(BYTES_SUFFIX):
        return rest_value(array)
    return np.vectorize(lambda v: v.decode("utf-8", "replace"), otypes=[object])(
        array).tolist()


def answer(outputs: Mapping[str, np.ndarray], rows: bool) -> dict[str, Any]:
    """The reply TF Serving writes for a signature's `outputs` (name -> batch), in the
    format of the request (`rows`: it came as `instances`)."""
    values = {name: _json_value(name, np.asarray(array)) for name, array in outputs.items()}
    if not rows:
        only = len(values) == 1
        return {COLUMNS_ANSWER_KEY: next(iter(values.values())) if only else values}
    if len(values) == 1:
        return {ROWS_ANSWER_KEY: next(iter(values.values()))}
    count = len(next(iter(values.values())))
    return {ROWS_ANSWER_KEY: [{name: value[index] for name, value in values.items()}
                              for index in range(count)]}
