"""The one edge between mptfx and the Kubernetes API: every refused or failed call becomes
a `KubernetesError` whose one line says what was refused, why, and what to do (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from components.core.text import one_line
from components.errors import UsageError


class KubernetesError(UsageError):
    """The Kubernetes API refused or could not be reached: exit 2 with this one line."""




def describe_api_error(error: Exception, action: str, target: str, namespace: str) -> str:
    """One line for a failed API call: what was refused, why, and what to do."""
    status = getattr(error, "status", None)
    message = _api_message(error)
    where = f"{target} in namespace {namespace}"
    if status == 403 and "exceeded quota" in message:
        return f"quota exceeded: cannot {action} {where}: {message}"
    if status == 403:
        return (f"forbidden: cannot {action} {where} (the ServiceAccount or user lacks RBAC "
                f"rights; see k8s/base/rbac.yaml): {message}")
    if status == 401:
        return f"unauthorized: cannot {action} {where}: the credentials were rejected"
    if status == 404:
        return (f"not found: cannot {action} {where}: {message} (is namespace {namespace} "
                f"applied? kubectl apply -k k8s/overlays/<cloud>)")
    if status == 409:
        return (f"already exists: cannot {action} {where}: {message} (resume the run with "
                f"--resume, or use a new run id)")
    if status == 422:
        return f"invalid: the API server rejected {target}: {message}"
    if status is not None:
        return f"cannot {action} {where}: HTTP {status} {getattr(error, 'reason', '')}: {message}"
    return f"cannot reach the Kubernetes API server to {action} {where}: {message}"


def _api_message(error: Exception) -> str:
    body = getattr(error, "body", None)
    if body:
        try:
            text = json.loads(body).get("message", "")
        except (TypeError, ValueError, AttributeError):
            text = str(body)
    else:
        text = getattr(error, "reason", None) or str(error)
    return one_line(str(text)) or type(error).__name__


@contextmanager
def api_call(action: str, target: str, namespace: str) -> Iterator[None]:
    """Turn the client's ApiException / connection errors into a KubernetesError line."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except (ApiException, HTTPError, OSError) as error:
        raise KubernetesError(describe_api_error(error, action, target, namespace)) from None




def read_json(method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a client read/list method and return the object as the server sent it (a dict).

    The client is 26.1 (TFX 1.16 pins kubernetes<27), whose models follow the 1.26 API: there
    every podFailurePolicy rule carried `onPodConditions`, which 1.27+ servers omit on an
    `onExitCodes` rule, and the models refuse such a Job when they deserialise it. Reading
    the JSON skips that out-of-date model layer; the server has validated the object.
    """
    response = method(*args, _preload_content=False, **kwargs)
    return json.loads(response.data)
