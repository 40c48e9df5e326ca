"""kubernetes-asyncio's Configuration, ApiClient and config loaders, without its generated API classes and models.

Importing anything under `kubernetes_asyncio` runs its packages' `__init__`s,
and `kubernetes_asyncio.client`'s imports every API class and every model:
859 modules whose code objects took 35 MiB of the extender's resident set
(bench/results/kube-scheduler-model-mem-traced-before.txt). The extender
uses the client's Configuration, `ApiClient.call_api` with
`_preload_content=False` (raw bytes, parsed with orjson: the models never
see an object) and the `config` loaders (kubeconfig, in-cluster, exec and
token refresh), so it needs none of them.

`load` registers the three packages (`kubernetes_asyncio`, `.client`,
`.client.models`) without running their `__init__`, imports the modules
used, and gives `kubernetes_asyncio.client` the two names the config
package imports from it. Each deferred package completes itself on
demand: asking it for a name it lacks (a model, an API class) runs its
real `__init__` then, so code that imports kubernetes_asyncio the usual
way in the same process still finds everything
(tests/tracker/test_client_modules.py).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

TOP = "kubernetes_asyncio"
_DEFERRED = (TOP, f"{TOP}.client", f"{TOP}.client.models")
_lock = threading.RLock()


def _deferred_package(name: str, path: list[str] | None) -> types.ModuleType:
    """The package `name`, registered in sys.modules with its `__init__` not run yet (run by `_complete`)."""
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"package {name} not found", name=name)
    module = importlib.util.module_from_spec(spec)

    def __getattr__(attr: str) -> Any:  # noqa: N807 (PEP 562's module __getattr__)
        return _complete(module, attr)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]  # PEP 562: consulted for names the module lacks
    sys.modules[name] = module
    return module


def _complete(module: types.ModuleType, attr: str) -> Any:
    """A name the deferred package lacks: its submodule, imported; else any other name, after the real `__init__` has run."""
    name = module.__name__
    spec = module.__spec__
    with _lock:
        if spec is not None and importlib.machinery.PathFinder.find_spec(f"{name}.{attr}", list(module.__path__)) is not None:
            return importlib.import_module(f"{name}.{attr}")  # `from package import submodule` asks this way first
        if module.__dict__.pop("__getattr__", None) is not None and spec is not None and spec.loader is not None:
            spec.loader.exec_module(module)
    try:
        return module.__dict__[attr]
    except KeyError:
        raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None


def load() -> tuple[Any, Any, types.ModuleType]:
    """(Configuration, ApiClient, the `kubernetes_asyncio.config` module), importing as little of the package as it can."""
    with _lock:
        if TOP not in sys.modules:
            try:
                _load_deferred()
            except Exception:
                for name in [n for n in sys.modules if n == TOP or n.startswith(TOP + ".")]:
                    del sys.modules[name]  # a layout this does not know: the plain import below, whole
        client = importlib.import_module(f"{TOP}.client")
        config = importlib.import_module(f"{TOP}.config")
    return client.Configuration, client.ApiClient, config


def _load_deferred() -> None:
    top = _deferred_package(TOP, None)
    client = _deferred_package(f"{TOP}.client", list(top.__path__))
    # What the import system would set on a parent for its imported submodule, and the client package's names
    # that kubernetes_asyncio.config imports (`from kubernetes_asyncio.client import ApiClient, Configuration`).
    setattr(top, "client", client)  # noqa: B010 (a module's attribute mypy cannot know)
    setattr(client, "models", _deferred_package(f"{TOP}.client.models", list(client.__path__)))  # noqa: B010 (the same)
    configuration = importlib.import_module(f"{TOP}.client.configuration")
    api_client = importlib.import_module(f"{TOP}.client.api_client")
    setattr(client, "Configuration", configuration.Configuration)  # noqa: B010 (the same)
    setattr(client, "ApiClient", api_client.ApiClient)  # noqa: B010 (the same)
    importlib.import_module(f"{TOP}.config")
