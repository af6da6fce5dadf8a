"""Turn one version of a CustomResourceDefinition into the JSON schema the tests validate with.

    python scripts/crd_to_jsonschema.py CRD.yaml VERSION OUT.schema.json

Takes `spec.versions[name=VERSION].schema.openAPIV3Schema` as published, drops the
Kubernetes extensions JSON Schema does not know (`x-kubernetes-*`: CEL rules, list types),
and adds `additionalProperties: false` wherever the API server's structural schema would
prune unknown fields (an object with `properties` and no `x-kubernetes-preserve-unknown-
fields`), so a misspelt key fails the test instead of silently vanishing. Also sets
`apiVersion` and `kind` to the CRD's group/version and kind.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def strict(node: Any) -> Any:
    """The schema `node` with extensions dropped and unknown properties refused."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    out = {key: strict(value) for key, value in node.items()
           if not key.startswith("x-kubernetes-")}
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def convert(crd: dict[str, Any], version: str) -> dict[str, Any]:
    """The JSON schema of `version` of `crd`."""
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = strict(served["schema"]["openAPIV3Schema"])
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    schema["properties"]["apiVersion"] = {"type": "string", "enum": [f"{group}/{version}"]}
    schema["properties"]["kind"] = {"type": "string", "enum": [kind]}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind",
                                                                    "metadata", "spec"})
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return schema


def main(argv: list[str]) -> int:
    """Entry point: CRD file, version, output file."""
    source, version, target = argv
    crd = next(d for d in yaml.safe_load_all(Path(source).read_text())
               if d and d.get("kind") == "CustomResourceDefinition")
    Path(target).write_text(json.dumps(convert(crd, version), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
