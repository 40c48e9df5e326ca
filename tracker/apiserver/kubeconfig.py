"""A kubeconfig's faults in one line, before anything connects.

kubernetes-asyncio loads the kubeconfig at the first request and says what
went wrong with a traceback ("Expected key current-context"); an operator
wants the file, the flag and the fault. `problem` reads the file the way
the client will (the first context, cluster and user it names) and says
what is missing; `KubeconfigError` carries the message to the edge, where
each command turns it into its exit-2 usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class KubeconfigError(ValueError):
    """The kubeconfig (or the in-cluster configuration) cannot be used; the message names the fault."""


def _names(config: dict[str, Any], key: str) -> dict[str, Any]:
    return {str(e.get("name")): e.get(key[:-1]) for e in config.get(key) or [] if isinstance(e, dict) and e.get("name")}


def _have(names: dict[str, Any]) -> str:
    return ", ".join(sorted(names)) or "none"


def problem(path: str, context: str | None = None) -> str | None:
    """What makes this kubeconfig unusable with this context (None: its own current-context), or None when nothing does."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "a directory, not a kubeconfig file"
    except OSError as e:
        return str(e.strerror or e)
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        return f"not valid YAML{at} ({getattr(e, 'problem', None) or e})"
    if not isinstance(config, dict) or not config.get("clusters"):
        return "no clusters in it (is it a kubeconfig?)"
    contexts = _names(config, "contexts")
    name = context or config.get("current-context")
    if not name:
        return f"no current-context; name one in the file (contexts: {_have(contexts)})"
    if name not in contexts:
        return f"context {name!r} not found (contexts: {_have(contexts)})"
    entry = contexts[name] if isinstance(contexts[name], dict) else {}
    clusters = _names(config, "clusters")
    if entry.get("cluster") not in clusters:
        return f"context {name!r} names cluster {entry.get('cluster')!r}, which is not in clusters ({_have(clusters)})"
    server = (clusters[entry["cluster"]] or {}).get("server") if isinstance(clusters[entry["cluster"]], dict) else None
    if not server:
        return f"cluster {entry['cluster']!r} has no server"
    users = _names(config, "users")
    user = entry.get("user")
    if user and user not in users:
        return f"context {name!r} names user {user!r}, which is not in users ({_have(users)})"
    return None


def check(path: str, where: str, context: str | None = None) -> None:
    """KubeconfigError "WHERE PATH: the fault" when the kubeconfig cannot be used."""
    fault = problem(path, context)
    if fault is not None:
        raise KubeconfigError(f"{where} {path}: {fault}")
