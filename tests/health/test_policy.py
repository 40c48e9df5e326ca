"""DeviceHealthPolicy parsing: every faulty field named; the shipped CRD refuses the same objects at the API server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from controllers.health.policy import PolicyError, parse_duration, parse_policy
from kubesim.fakeapi import FakeApiServer
from tests.health.harness import policy, xid_rule


@dataclass(frozen=True)
class Bad:
    name: str
    rule: dict[str, Any]
    field: str
    api_refuses: bool = True  # the CRD's schema or CEL refuses it too


def edit(**over: Any) -> dict[str, Any]:
    r = xid_rule()
    for k, v in over.items():
        if v is None:
            r.pop(k, None)
        else:
            r[k] = v
    return r


BAD = [
    Bad("two signals", edit(signal={"alert": {"matchLabels": {"a": "b"}}, "driverTaint": {"key": "k"}}), "spec.rules[0].signal"),
    Bad("no signal", edit(signal={}), "spec.rules[0].signal"),
    Bad("empty matchLabels", edit(signal={"alert": {"matchLabels": {}}}), "spec.rules[0].signal.alert.matchLabels"),
    Bad("alert without match", edit(match=None), "spec.rules[0].match"),
    Bad("attribute without its label", edit(match={"nodeLabel": "Hostname", "attribute": "uuid"}), "spec.rules[0].match.attribute"),
    Bad("no device in match", edit(match={"nodeLabel": "Hostname"}), "spec.rules[0].match"),
    Bad("unknown effect", edit(steps=[{"effect": "Evict"}]), "spec.rules[0].steps[0].effect"),
    Bad("no steps", edit(steps=[]), "spec.rules[0].steps"),
    Bad(
        "weaker later step",
        edit(steps=[{"effect": "NoExecute"}, {"effect": "NoSchedule", "after": "1m"}]),
        "spec.rules[0].steps[1].effect",
        False,
    ),
    Bad("later step with no condition", edit(steps=[{"effect": "NoSchedule"}, {"effect": "NoExecute"}]), "spec.rules[0].steps[1]", False),
    Bad("bad duration", edit(clearAfter="15 minutes"), "spec.rules[0].clearAfter"),
    Bad("percent over 100", edit(guard={"maxNoExecutePercent": 150}), "spec.rules[0].guard.maxNoExecutePercent"),
    Bad("negative guard", edit(guard={"maxNoExecute": -1}), "spec.rules[0].guard.maxNoExecute"),
    Bad("no driver", edit(devices={}), "spec.rules[0].devices.driver"),
    Bad("no taint key", edit(taint={"value": "x"}), "spec.rules[0].taint.key"),
]


@pytest.mark.parametrize("row", BAD, ids=[b.name for b in BAD])
async def test_a_faulty_policy_names_its_field(row: Bad) -> None:
    obj = policy("p", row.rule)
    with pytest.raises(PolicyError) as err:
        parse_policy(obj)
    assert err.value.field == row.field
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        url = f"{api.url}/apis/resource.dra-extender.io/v1alpha1/devicehealthpolicies"
        async with http.post(url, json=obj) as resp:
            # Accepted by the schema when not refused: the controller reports it (InvalidPolicy Event, Ready=False).
            assert (resp.status == 422) == row.api_refuses, await resp.text()


def test_the_good_policy_parses() -> None:
    p = parse_policy(policy())
    (rule,) = p.rules
    assert [(s.effect, s.after, s.occurrences) for s in rule.steps] == [("NoSchedule", 0.0, None), ("NoExecute", 300.0, 3)]
    assert rule.clear_after == 900.0 and rule.device is not None and rule.device.driver == "gpu.example.com"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5h", 5400), ("0s", 0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == seconds
