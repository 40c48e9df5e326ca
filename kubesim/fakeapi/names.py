"""Name formats the API server checks (DNS labels and subdomains, label keys and values, C identifiers, semver).

Each check returns the problems as the texts the API server puts after the
value (an empty list: the name is fine), so a caller wraps them in a field
error at its own path.
"""

from __future__ import annotations

import re
from typing import Final

_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_C_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Semantic Versioning 2.0.0: three numbers without leading zeros, then optional pre-release and build parts.
_NUMERIC: Final = r"(0|[1-9][0-9]*)"
_PRE: Final = r"(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
SEMVER: Final = re.compile(rf"^{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}(-{_PRE}(\.{_PRE})*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")

RFC3339: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$")

LABEL_MAX: Final = 63
SUBDOMAIN_MAX: Final = 253


def dns_label(value: str) -> list[str]:
    out = [f"must be no more than {LABEL_MAX} characters"] if len(value) > LABEL_MAX else []
    if not _LABEL.match(value):
        out.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character"
        )
    return out


def dns_subdomain(value: str) -> list[str]:
    out = [f"must be no more than {SUBDOMAIN_MAX} characters"] if len(value) > SUBDOMAIN_MAX else []
    if not _SUBDOMAIN.match(value):
        out.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return out


def label_key(value: str) -> list[str]:
    """A label (or taint, or condition) key: an optional DNS-subdomain prefix and `/`, then a 63-character name."""
    prefix, slash, name = value.rpartition("/")
    out: list[str] = []
    if slash:
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            out += [f"prefix part {p}" for p in dns_subdomain(prefix)]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > LABEL_MAX:
        out.append(f"name part must be no more than {LABEL_MAX} characters")
    if name and not _NAME_PART.match(name):
        out.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return out


def label_value(value: str) -> list[str]:
    out = [f"must be no more than {LABEL_MAX} characters"] if len(value) > LABEL_MAX else []
    if not _LABEL_VALUE.match(value):
        out.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return out


def c_identifier(value: str) -> list[str]:
    if _C_IDENTIFIER.match(value):
        return []
    return ["a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'"]
