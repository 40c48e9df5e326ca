"""An operator's mistakes at start-up are one line and exit 2, never a traceback or a silent second allocator.

- Every kubeconfig fault, for `dra-extender serve`, `dra-extender webhook`
  and `kubectl dra`: one line naming the flag (or where the file came from)
  and the fault.
- `serve` against a cluster without a leadership choice refuses: it would
  allocate and evict beside the chart's replica without a word.
- `serve --scheduler-config` refuses a kube-scheduler profile that keeps the
  in-tree DynamicResources plugin on (two allocators for the same devices).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, free_port
from tests.e2e.test_webhook import make_certs

CLUSTER = "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
USER = "users:\n- name: u\n  user: {token: t}\n"
CONTEXT = "contexts:\n- name: x\n  context: {cluster: c, user: u}\n"

# name -> (the kubeconfig's text, None for no file; what the line says after the file's name)
KUBECONFIG_FAULTS: dict[str, tuple[str | None, str]] = {
    "missing file": (None, "no such file"),
    "bad YAML": ("clusters: [\n", "not valid YAML"),
    "not a kubeconfig": ("kind: ConfigMap\n", "no clusters in it"),
    "no current context": (CLUSTER + CONTEXT + USER, "no current-context"),
    "unknown context": ("current-context: y\n" + CLUSTER + CONTEXT + USER, "context 'y' not found"),
    "unknown user": ("current-context: x\n" + CLUSTER + CONTEXT.replace("user: u", "user: nobody") + USER, "names user 'nobody'"),
    "unknown cluster": ("current-context: x\n" + CLUSTER + CONTEXT.replace("cluster: c", "cluster: gone") + USER, "names cluster 'gone'"),
}


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBERNETES_SERVICE_HOST": "", **(env or {})},
    )


def _serve(path: str, _: Path) -> list[str]:
    return ["dra_extender.cli", "serve", "--kubeconfig", path, "--standalone", "--listen", f"127.0.0.1:{free_port()}"]


def _webhook(path: str, tmp: Path) -> list[str]:
    _, cert, key = make_certs(tmp)
    return [
        "dra_extender.cli",
        "webhook",
        "--kubeconfig",
        path,
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--tls-cert-file",
        str(cert),
        "--tls-key-file",
        str(key),
    ]


def _kubectl_dra(path: str, _: Path) -> list[str]:
    return ["kubectl_dra.cli", "--kubeconfig", path, "devices"]


COMMANDS: dict[str, tuple[Callable[[str, Path], list[str]], str]] = {
    "dra-extender serve": (_serve, "dra-extender: --kubeconfig "),
    "dra-extender webhook": (_webhook, "dra-extender: --kubeconfig "),
    "kubectl dra": (_kubectl_dra, "error: kubeconfig "),
}


@pytest.mark.parametrize("fault", KUBECONFIG_FAULTS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_kubeconfig_fault_is_one_line_and_exit_2(command: str, fault: str, tmp_path) -> None:
    text, says = KUBECONFIG_FAULTS[fault]
    path = tmp_path / "kubeconfig.yaml"
    if text is not None:
        path.write_text(text)
    argv, starts = COMMANDS[command]
    r = _run(argv(str(path), tmp_path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"{starts}{path}") and says in r.stderr, r.stderr


def test_the_kubeconfig_from_the_environment_is_named_as_such(tmp_path) -> None:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(CLUSTER + CONTEXT + USER)
    r = _run(["dra_extender.cli", "serve", "--standalone", "--listen", f"127.0.0.1:{free_port()}"], env={"KUBECONFIG": str(path)})
    assert r.returncode == 2 and r.stderr == f"dra-extender: $KUBECONFIG {path}: no current-context; name one in the file (contexts: x)\n"


def test_in_cluster_outside_a_pod_is_one_line() -> None:
    r = _run(["dra_extender.cli", "serve", "--in-cluster", "--standalone", "--listen", f"127.0.0.1:{free_port()}"])
    assert r.returncode == 2 and r.stderr.startswith("dra-extender: --in-cluster: ") and r.stderr.count("\n") == 1, r.stderr


def _good_kubeconfig(tmp: Path) -> Path:
    path = tmp / "kubeconfig.yaml"
    path.write_text("current-context: x\n" + CLUSTER + CONTEXT + USER)
    return path


def test_a_cluster_without_a_leadership_choice_is_refused(tmp_path) -> None:
    """The README's old workstation line: it would have been a second allocator and evictor beside the chart's."""
    r = _run(["dra_extender.cli", "serve", "--kubeconfig", str(_good_kubeconfig(tmp_path)), "--listen", f"127.0.0.1:{free_port()}"])
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    for choice in ("--scheduler-config", "--follow-scheduler-lease", "--leader-elect", "--read-only", "--standalone"):
        assert choice in r.stderr, (choice, r.stderr)


# name -> the profiles of a KubeSchedulerConfiguration whose DynamicResources stays on (the refused profile's name)
IN_TREE_ON: dict[str, tuple[str, str]] = {
    "no profiles (kube-scheduler's default profile)": ("", "default-scheduler"),
    "plugin left at its default": ("profiles:\n- schedulerName: dra-scheduler\n", "dra-scheduler"),
    "disabled at one extension point only": (
        "profiles:\n- schedulerName: dra-scheduler\n  plugins:\n    filter:\n      disabled: [{name: DynamicResources}]\n",
        "dra-scheduler",
    ),
    "disabled, then enabled again": (
        "profiles:\n- schedulerName: dra-scheduler\n  plugins:\n    multiPoint:\n      disabled: [{name: '*'}]\n"
        "    reserve:\n      enabled: [{name: DynamicResources}]\n",
        "dra-scheduler",
    ),
    "a second profile keeps it": (
        "profiles:\n- schedulerName: dra-scheduler\n  plugins:\n    multiPoint:\n      disabled: [{name: DynamicResources}]\n"
        "- schedulerName: default-scheduler\n",
        "default-scheduler",
    ),
}


@pytest.mark.parametrize("case", IN_TREE_ON)
def test_a_scheduler_profile_with_the_in_tree_allocator_is_refused(case: str, tmp_path) -> None:
    profiles, refused = IN_TREE_ON[case]
    config = tmp_path / "scheduler.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" + profiles)
    r = _run(
        [
            "dra_extender.cli",
            "serve",
            "--kubeconfig",
            str(_good_kubeconfig(tmp_path)),
            "--scheduler-config",
            str(config),
            "--listen",
            f"127.0.0.1:{free_port()}",
        ]
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"--scheduler-config {config}: profile {refused} keeps the in-tree DynamicResources plugin on" in r.stderr, r.stderr
