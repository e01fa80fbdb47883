"""Which resource names the kubelet registers a device plugin for: extended resource names.

The kubelet refuses every other name at registration, and would go on refusing it however often
it is asked, so the plugin checks its name at start with the kubelet's own rule:

- a domain, "/", a name (a name without a domain is one of Kubernetes' own resources);
- the domain outside kubernetes.io (no "kubernetes.io/" anywhere in the name) and not starting
  with "requests." (the prefix resource quotas put before a resource's name);
- "requests." followed by the whole name must be a qualified name: the domain a DNS-1123
  subdomain of at most 253 characters with that prefix (so at most 244 of its own): labels of
  lower-case letters, digits and '-', separated by single dots, each starting and ending with a
  letter or digit; the name at most 63 letters, digits, '-', '_' or '.', starting and ending with
  a letter or digit.
"""

from __future__ import annotations

import re

QUOTA_PREFIX = "requests."
NATIVE_DOMAIN = "kubernetes.io/"
SUBDOMAIN_MAX = 253
NAME_MAX = 63
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

RULE = ("the kubelet registers only an extended resource name: DOMAIN/NAME, DOMAIN outside "
        "kubernetes.io, not starting with 'requests.', made of lower-case letters, digits and "
        "'-' in dot-separated parts that start and end with a letter or digit (at most "
        f"{SUBDOMAIN_MAX - len(QUOTA_PREFIX)} characters), NAME at most {NAME_MAX} letters, "
        "digits, '-', '_' or '.' starting and ending with a letter or digit; for example "
        "gemshare.io/gpu")


def problem(name: str) -> str | None:
    """Why the kubelet would refuse `name` as an extended resource name; None when it would
    not."""
    if "/" not in name:
        return "it has no domain (a name without one is one of Kubernetes' own resources)"
    if NATIVE_DOMAIN in name:
        return "names in the kubernetes.io domain are Kubernetes' own resources"
    if name.startswith(QUOTA_PREFIX):
        return f"it starts with {QUOTA_PREFIX!r}, which resource quotas put before a name"
    domain, _, rest = name.partition("/")
    if "/" in rest:
        return "it has more than one '/'"
    if not domain:
        return "its domain is empty"
    if len(QUOTA_PREFIX + domain) > SUBDOMAIN_MAX:
        return f"its domain is longer than {SUBDOMAIN_MAX - len(QUOTA_PREFIX)} characters"
    if not _SUBDOMAIN.fullmatch(domain):
        return f"its domain {domain!r} is not a DNS subdomain"
    if not rest:
        return "its name after the '/' is empty"
    if len(rest) > NAME_MAX:
        return f"its name after the '/' is longer than {NAME_MAX} characters"
    if not _NAME.fullmatch(rest):
        return f"its name after the '/', {rest!r}, has a character or an end the rule refuses"
    return None


def refusal(name: str) -> str | None:
    """The whole message for a name the kubelet would refuse: what is wrong, and the rule."""
    why = problem(name)
    return None if why is None else f"{name!r} cannot be registered: {why}; {RULE}"
