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


def _serve_actions() -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices["serve"]._actions if a.option_strings and a.dest != "help"]


SERVE_FLAGS = [a.option_strings[-1] for a in _serve_actions()]


@pytest.mark.parametrize("flag", SERVE_FLAGS)
def test_every_serve_flag_has_help_and_shows_its_default(flag: str) -> None:
    [action] = [a for a in _serve_actions() if a.option_strings[-1] == flag]
    assert action.help and action.help != argparse.SUPPRESS and len(action.help) > 15, flag
    if action.default not in (None, False):
        assert "%(default)s" in action.help or str(action.default) in action.help, f"{flag}: its help does not show the default"


# name -> (argv after `serve`, what the single line on stderr says)
def _usage_errors(taken: int) -> dict[str, tuple[list[str], str]]:
    return {
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
        "alert receiver with --source": (
            ["--source", str(DEMO), "--alerts-listen", "127.0.0.1:0"],
            "--alerts-listen: the alert receiver needs the health controller, which --source (policies live in a cluster) turns off",
        ),
        "alert receiver with --no-health": (
            ["--kubeconfig", str(ROOT / "pyproject.toml"), "--no-health", "--alerts-listen", "127.0.0.1:0"],
            "--alerts-listen: the alert receiver needs the health controller, which --no-health turns off",
        ),
        "alert receiver without a token": (
            ["--kubeconfig", str(ROOT / "pyproject.toml"), "--alerts-listen", "127.0.0.1:0"],
            "--alerts-listen needs --alerts-token-file: the receiver never accepts unauthenticated alerts",
        ),
        "alert token file missing": (
            ["--kubeconfig", str(ROOT / "pyproject.toml"), "--alerts-listen", "127.0.0.1:0", "--alerts-token-file", "/nonexistent"],
            "--alerts-token-file /nonexistent: No such file or directory",
        ),
        "alert token without a listener": (
            ["--kubeconfig", str(ROOT / "pyproject.toml"), "--alerts-token-file", str(ROOT / "examples" / "health" / "token")],
            "--alerts-token-file needs --alerts-listen",
        ),
        "alert TLS half given": (
            ["--kubeconfig", str(ROOT / "pyproject.toml"), "--alerts-listen", "127.0.0.1:0", "--alerts-tls-cert-file", "/x"],
            "--alerts-tls-cert-file and --alerts-tls-key-file go together",
        ),
        "alert listener in use": (
            [
                "--kubeconfig",
                str(ROOT / "pyproject.toml"),
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
        r = run("serve", *argv)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("dra-extender: ") and says in r.stderr, r.stderr
