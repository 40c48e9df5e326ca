"""`dra-extender` as a user meets it: --version, help for every flag with its default, one-line usage errors (exit 2)."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from importlib.metadata import version

import pytest

from dra_extender.cli import build_parser
from tests.e2e.harness import DEMO, ROOT, free_port


def run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_extender.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_version() -> None:
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip().startswith(f"dra-extender {version('dra-extender')} (Python 3."), r.stdout


COMMANDS = ("serve", "controllers", "all")


def _actions(command: str) -> list[argparse.Action]:
    """The command's own flags (not -h, not the hidden ones that name another command)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.option_strings and a.dest not in ("help", argparse.SUPPRESS)]


FLAGS = [(command, a.option_strings[-1]) for command in COMMANDS for a in _actions(command)]


@pytest.mark.parametrize(("command", "flag"), FLAGS, ids=[f"{c} {f}" for c, f in FLAGS])
def test_every_flag_has_help_and_shows_its_default(command: str, flag: str) -> None:
    [action] = [a for a in _actions(command) if a.option_strings[-1] == flag]
    assert action.help and action.help != argparse.SUPPRESS and len(action.help) > 15, flag
    if action.default not in (None, False):
        assert "%(default)s" in action.help or str(action.default) in action.help, f"{flag}: its help does not show the default"


# name -> (argv after the command, what the single line on stderr says); the command is `serve` unless the
# name says `controllers` (every alert-receiver row: the receiver is the controllers').
def _usage_errors(taken: int) -> dict[str, tuple[list[str], str]]:
    kubeconfig = ["--kubeconfig", str(ROOT / "pyproject.toml")]
    return {
        "controllers: no leadership choice": (
            kubeconfig,
            "no leadership choice: against a cluster this process would evict and write rules beside any other",
        ),
        "controllers: leader-elect with --source": (
            ["--source", str(DEMO), "--leader-elect"],
            "--leader-elect needs a cluster, not --source",
        ),
        "controllers: listen in use": (
            ["--source", str(DEMO), "--listen", f"127.0.0.1:{taken}"],
            f"--listen 127.0.0.1:{taken}: Address already in use",
        ),
        "listen in use": (["--source", str(DEMO), "--listen", f"127.0.0.1:{taken}"], f"--listen 127.0.0.1:{taken}: Address already in use"),
        "probe-listen in use": (
            ["--source", str(DEMO), "--listen", f"127.0.0.1:{free_port()}", "--probe-listen", f"127.0.0.1:{taken}"],
            f"--probe-listen 127.0.0.1:{taken}: Address already in use",
        ),
        "listen not ours": (
            ["--source", str(DEMO), "--listen", "192.0.2.1:8888", "--allow-non-loopback-listen"],
            "--listen 192.0.2.1:8888:",
        ),
        "bad source": (["--source", "/nonexistent"], "--source: '/nonexistent' is not a directory"),
        "bad scheduler config": (
            ["--kubeconfig", str(ROOT / "pyproject.toml"), "--scheduler-config", "/nonexistent.yaml"],
            "--scheduler-config /nonexistent.yaml: No such file",
        ),
        "controllers: alert receiver with --source": (
            ["--source", str(DEMO), "--alerts-listen", "127.0.0.1:0"],
            "--alerts-listen: the alert receiver needs the health controller, which --source (policies live in a cluster) turns off",
        ),
        "controllers: alert receiver with --no-health": (
            [*kubeconfig, "--standalone", "--no-health", "--alerts-listen", "127.0.0.1:0"],
            "--alerts-listen: the alert receiver needs the health controller, which --no-health turns off",
        ),
        "controllers: alert receiver without a token": (
            [*kubeconfig, "--standalone", "--alerts-listen", "127.0.0.1:0"],
            "--alerts-listen needs --alerts-token-file: the receiver never accepts unauthenticated alerts",
        ),
        "controllers: alert token file missing": (
            [*kubeconfig, "--standalone", "--alerts-listen", "127.0.0.1:0", "--alerts-token-file", "/nonexistent"],
            "--alerts-token-file /nonexistent: No such file or directory",
        ),
        "controllers: alert token without a listener": (
            [*kubeconfig, "--standalone", "--alerts-token-file", str(ROOT / "examples" / "health" / "token")],
            "--alerts-token-file needs --alerts-listen",
        ),
        "controllers: alert TLS half given": (
            [*kubeconfig, "--standalone", "--alerts-listen", "127.0.0.1:0", "--alerts-tls-cert-file", "/x"],
            "--alerts-tls-cert-file and --alerts-tls-key-file go together",
        ),
        "controllers: alert listener in use": (
            [
                *kubeconfig,
                "--standalone",
                "--listen",
                f"127.0.0.1:{free_port()}",
                "--alerts-listen",
                f"127.0.0.1:{taken}",
                "--alerts-token-file",
                str(ROOT / "examples" / "health" / "token"),
            ],
            f"--alerts-listen 127.0.0.1:{taken}: Address already in use",
        ),
    }


USAGE_ERRORS = list(_usage_errors(0))


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_usage_errors_are_one_line_and_exit_2(case: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        argv, says = _usage_errors(held.getsockname()[1])[case]
        r = run("controllers" if case.startswith("controllers: ") else "serve", *argv)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("dra-extender: ") and says in r.stderr, r.stderr


# name -> (command, a flag of the other command with its value): an argparse error (exit 2) naming the command it belongs to.
MISPLACED = {
    "eviction off to serve": ("serve", ["--no-eviction"], "controllers"),
    "eviction mode to serve": ("serve", ["--eviction-mode", "evict"], "controllers"),
    "upstream eviction to serve": ("serve", ["--evict-upstream"], "controllers"),
    "health off to serve": ("serve", ["--no-health"], "controllers"),
    "alert receiver to serve": ("serve", ["--alerts-listen", "127.0.0.1:9095"], "controllers"),
    "alert token to serve": ("serve", ["--alerts-token-file=/x"], "controllers"),
    "profiles to serve": ("serve", ["--scheduler-name", "dra-scheduler"], "controllers"),
    "controllers' Lease namespace to serve": ("serve", ["--lease-namespace", "dra-system"], "controllers"),
    "bind timeout to controllers": ("controllers", ["--bind-timeout", "3"], "serve"),
    "scheduler config to controllers": ("controllers", ["--scheduler-config", "/etc/config.yaml"], "serve"),
    "followed Lease to controllers": ("controllers", ["--follow-scheduler-lease", "kube-system/kube-scheduler"], "serve"),
    "probe listener to controllers": ("controllers", ["--probe-listen", "127.0.0.1:8889"], "serve"),
    "placement to controllers": ("controllers", ["--node-placement", "spread"], "serve"),
    "feature gate to controllers": ("controllers", ["--no-feature-binding-conditions"], "serve"),
}


@pytest.mark.parametrize("case", list(MISPLACED))
def test_a_flag_given_to_the_wrong_command_names_where_it_belongs(case: str) -> None:
    command, argv, home = MISPLACED[case]
    r = run(command, "--source", str(DEMO), *argv)
    assert r.returncode == 2, r.stderr
    flag = argv[0].split("=")[0]
    assert f"dra-extender {command}: error: {flag} belongs to `dra-extender {home}`" in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["serve", "controllers"])
def test_all_takes_both_commands_flags(command: str) -> None:
    """`all` runs both in one process: every flag of either is its own."""
    assert {a.option_strings[-1] for a in _actions(command)} <= {a.option_strings[-1] for a in _actions("all")}
