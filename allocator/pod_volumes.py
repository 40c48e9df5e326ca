"""A pod's side of volume taints (docs/design.md#volume-taints): the PVCs it mounts and its volume tolerations.

The API has no volume tolerations, so a pod carries them in the annotation
`resource.dra-extender.io/volume-tolerations`, parsed into the device
toleration type so that matching is the one function devices use. Both are
read once, when the pod is parsed (`parse_pod`), and travel in the `Pod`.
A malformed annotation does not fail the pod: it counts as no tolerations,
and the reason is kept for the Warning Event. The taints on PVCs and PVs,
and the matching, are the tracker's (tracker/volumes.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from allocator.types import DeviceToleration

TOLERATIONS_ANNOTATION = "resource.dra-extender.io/volume-tolerations"
EFFECT_NO_USE = "NoUse"


class MalformedAnnotation(ValueError):
    """An annotation that is not the documented JSON list: str() says where and why."""


def annotation_entries(text: str, what: str) -> list[Mapping[str, Any]]:
    """The objects of a JSON-list annotation; MalformedAnnotation naming `what` otherwise."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise MalformedAnnotation(f"{what}: not JSON: {e}") from None
    if not isinstance(data, list):
        raise MalformedAnnotation(f"{what}: must be a JSON list, not {type(data).__name__}")
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise MalformedAnnotation(f"{what}[{i}]: must be an object")
    return data


def entry_string(item: Mapping[str, Any], field: str, where: str, *, required: bool = False) -> str:
    value = item.get(field)
    if value is None or value == "":
        if required:
            raise MalformedAnnotation(f"{where}.{field}: required")
        return ""
    if not isinstance(value, str):
        raise MalformedAnnotation(f"{where}.{field}: must be a string")
    return value


def parse_tolerations(text: str) -> tuple[DeviceToleration, ...]:
    """A pod's volume tolerations, with the device tolerations' rules (tolerationSeconds only for NoUse)."""
    out = []
    for i, item in enumerate(annotation_entries(text, TOLERATIONS_ANNOTATION)):
        where = f"{TOLERATIONS_ANNOTATION}[{i}]"
        operator = entry_string(item, "operator", where) or "Equal"
        if operator not in ("Equal", "Exists"):
            raise MalformedAnnotation(f"{where}.operator: must be Equal or Exists")
        key = entry_string(item, "key", where)
        value = entry_string(item, "value", where)
        if operator == "Exists" and value:
            raise MalformedAnnotation(f"{where}.value: must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise MalformedAnnotation(f"{where}.operator: must be Exists when key is empty")
        effect = entry_string(item, "effect", where)
        seconds = item.get("tolerationSeconds")
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, int):
                raise MalformedAnnotation(f"{where}.tolerationSeconds: must be an integer")
            if effect != EFFECT_NO_USE:
                raise MalformedAnnotation(f"{where}.tolerationSeconds: only allowed with effect NoUse")
        out.append(DeviceToleration(key=key, operator=operator, value=value, effect=effect, toleration_seconds=seconds))
    return tuple(out)


def volume_tolerations(annotations: Mapping[str, Any]) -> tuple[tuple[DeviceToleration, ...], str | None]:
    """(tolerations, problem) from a pod's annotations: a malformed annotation counts as no tolerations and says why."""
    text = annotations.get(TOLERATIONS_ANNOTATION)
    if text is None:
        return (), None
    if not isinstance(text, str):
        return (), f"{TOLERATIONS_ANNOTATION}: must be a string"
    try:
        return parse_tolerations(text), None
    except MalformedAnnotation as e:
        return (), str(e)


def volume_claims(volumes: Any, pod_name: str) -> tuple[str, ...]:
    """The PVCs a pod's `spec.volumes` use, in volume order: `claimName`, and `<pod>-<volume>` for generic ephemeral volumes.

    Lenient (a volume of another shape is skipped): the API server has validated the pod.
    """
    if not isinstance(volumes, list):
        return ()
    out: list[str] = []
    for v in volumes:
        if not isinstance(v, dict):
            continue
        pvc = v.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and isinstance(pvc.get("claimName"), str) and pvc["claimName"]:
            out.append(pvc["claimName"])
        elif isinstance(v.get("ephemeral"), dict) and isinstance(v.get("name"), str):
            out.append(f"{pod_name}-{v['name']}")
    return tuple(dict.fromkeys(out))


def has_pvc_volumes(raw_pod: Mapping[str, Any]) -> bool:
    """Cheap, on the raw pod: does it mount a PVC (named or generic ephemeral)? Most pods don't."""
    spec = raw_pod.get("spec")
    volumes = spec.get("volumes") if isinstance(spec, dict) else None
    if not volumes:
        return False
    return any(isinstance(v, dict) and ("persistentVolumeClaim" in v or "ephemeral" in v) for v in volumes)
