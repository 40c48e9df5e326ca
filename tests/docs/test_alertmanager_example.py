"""docs/health.md's Alertmanager configuration is a whole one: `amtool check-config` passes it, checked here.

The block is also checked from the parsed YAML (a root route with a default
receiver, every route's receiver defined, the webhook's URL and token file,
and a short `group_interval` on the route to the receiver), so a machine
without amtool still sees those; amtool itself runs wherever it is installed
and must be in CI (tests/prometheus/tools.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.prometheus.tools import run

DOC = Path(__file__).resolve().parents[2] / "docs" / "health.md"


def _block() -> str:
    """The yaml block under ### Alertmanager, as written."""
    text = DOC.read_text()
    section = text[text.index("### Alertmanager") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, "docs/health.md: no yaml block under ### Alertmanager"
    return block.group(1)


def _config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(_block())
    return config


def test_amtool_check_config_passes_the_example(tmp_path: Path) -> None:
    path = tmp_path / "alertmanager.yml"
    path.write_text(_block())
    done = run("amtool", "check-config", path)
    assert done.returncode == 0, done.stdout + done.stderr


def _routes(route: dict[str, Any]) -> list[dict[str, Any]]:
    return [route, *(r for child in route.get("routes") or [] for r in _routes(child))]


def _seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


def test_the_root_route_has_a_default_receiver_and_every_receiver_is_defined() -> None:
    config = _config()
    assert config["route"].get("receiver"), "root route must specify a default receiver"
    defined = [r["name"] for r in config["receivers"]]
    assert len(defined) == len(set(defined)), defined
    for route in _routes(config["route"]):
        if "receiver" in route:
            assert route["receiver"] in defined, route


def test_the_receiver_route_sends_resolved_alerts_soon() -> None:
    config = _config()
    [route] = [r for r in _routes(config["route"]) if r.get("receiver") == "dra-extender"]
    assert _seconds(route["group_interval"]) <= 60, "Alertmanager's default group_interval (5m) delays every recovery"
    assert route.get("continue") is True
    [receiver] = [r for r in config["receivers"] if r["name"] == "dra-extender"]
    [hook] = receiver["webhook_configs"]
    assert hook["url"].endswith("/alerts") and hook["send_resolved"] is True
    assert hook["http_config"]["authorization"]["type"] == "Bearer" and hook["http_config"]["authorization"]["credentials_file"]
