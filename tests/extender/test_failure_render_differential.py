"""Failure messages built from parts render byte for byte as the regex path did.

Until issue 32 the verdict cache recovered claim slots by running a regex
over the English message (`_regex_template` and `_regex_tell` below, kept
here as the oracle only). Failures are now built from text and ClaimName
parts; for every generated failure shaped like the allocator's ("claim
<key>" followed by ", request ...", ":", " is ..."; several claims; text
that looks like a claim name and is not one), the parts render the same
message as the string did, and the template made from the parts renders
for other claims exactly what the regex template told them.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence

from allocator.failures import ClaimName, Failure, Text
from extender.filter.outcomes import FailureTemplate
from tests.tiers import examples

CASES = examples(200_000)  # a quarter in the fast tier

# Claim keys with the traps the regex had to get right: a key that is a prefix of another
# ("a" of "a.b", "a-1", "ab"), dots and dashes, one namespace or several.
KEYS = ["default/a", "default/a.b", "default/a-1", "default/ab", "ns-2/gpu-claim", "ns-2/gpu-claim-0", "team.x/c", "default/b"]
# What follows a claim mention in the allocator's messages.
AFTER = [
    " is being deleted",
    ": its requests ask for at least 33 devices, more than the 32 one claim may hold",
    ", request r: 2 devices usable, but not enough left for 3 after the devices picked for other requests of this pod",
    ", request gpu/small: device class gpu not found",
    " is allocated to devices not reachable from node node-1",
    ": no combination of available devices satisfies the constraints (matchAttribute gpu.example.com/model)",
]
# Text between mentions, some of which looks like a claim (a longer name than one of the keys; no "claim " before a key).
TEXT = [
    "invalid resource pools were encountered (gpu.example.com/pool-1: bad); ",
    "no allocation found for the pod's claims on this node",
    "; and claim default/abc, which is not the pod's",
    " (claim default/a.bz)",
    "; default/a is named without the word",
    "",
]


@functools.cache
def _mention(names: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"claim ({'|'.join(re.escape(n) for n in names)})(?![a-z0-9.\-])")


def _regex_template(failure: Failure, names: tuple[str, ...]) -> tuple[Failure, tuple[str | int, ...], str | int]:
    """The old FailureTemplate.of: slots found by a regex over the message."""
    parts: list[str | int] = []
    rest = failure.message
    if names:
        mention = _mention(names)
        pos = 0
        for m in mention.finditer(rest):
            parts += [rest[pos : m.start(1)], names.index(m.group(1))]
            pos = m.end()
        rest = rest[pos:]
    parts.append(rest)
    claim = names.index(failure.claim) if failure.claim in names else failure.claim
    return failure, tuple(p for p in parts if p != ""), claim


def _regex_tell(template: tuple[Failure, tuple[str | int, ...], str | int], names: Sequence[str]) -> tuple[str, str]:
    """The old FailureTemplate.tell: (message, claim) for the claims `names`."""
    _failure, message, claim = template
    return "".join(p if isinstance(p, str) else names[p] for p in message), claim if isinstance(claim, str) else names[claim]


def _failure(rng: random.Random, names: tuple[str, ...]) -> tuple[Failure, str]:
    """A failure built from parts, and the message the allocator's f-string made of the same pieces."""
    parts: list[str | ClaimName] = []
    text = ""
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.7:
            key = rng.choice(names)
            after = rng.choice(AFTER)
            parts += ["claim ", ClaimName(key), after]
            text += f"claim {key}{after}"
        else:
            piece = rng.choice(TEXT)
            parts.append(piece)
            text += piece
    blamed = next((p.key for p in parts if isinstance(p, ClaimName)), "") if rng.random() < 0.8 else ""
    return Failure(rng.choice(["allocated", "tainted", "no_devices"]), tuple(parts), blamed, "r", rng.choice(["", "gpu"])), text


def test_parts_render_what_the_regex_path_rendered() -> None:
    rng = random.Random(32)
    for case in range(CASES):
        names = tuple(rng.sample(KEYS, rng.randint(1, 4)))
        failure, text = _failure(rng, names)
        assert failure.message == text, case
        others = tuple(rng.sample(KEYS, len(names)))
        old_message, old_claim = _regex_tell(_regex_template(failure, names), others)
        new = FailureTemplate.of(failure, names).render(others)
        assert (new.message, new.claim) == (old_message, old_claim), (case, names, others, text)
        assert (new.code, new.request, new.device_class) == (failure.code, failure.request, failure.device_class)


def test_claims_named_without_the_word_claim_get_the_new_names() -> None:
    """The search-limit message lists the pod's claims: the regex left them with the first pod's names."""
    parts: Text = ("the constraints of ", ClaimName("default/a"), ", ", ClaimName("default/b"), " admit too many combinations")
    failure = Failure("search_limit", parts)
    assert _regex_tell(_regex_template(failure, ("default/a", "default/b")), ("x/1", "x/2"))[0] == failure.message
    told = FailureTemplate.of(failure, ("default/a", "default/b")).render(("x/1", "x/2"))
    assert told.message == "the constraints of x/1, x/2 admit too many combinations"
