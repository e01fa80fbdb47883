"""The kubelet's rule for the resource names it registers, checked before the plugin starts:
every name the kubelet's IsExtendedResourceName refuses is refused, each for its reason."""

from __future__ import annotations

import pytest

from gemshare_plugin.resource_names import RULE, problem, refusal

DOMAIN_MAX = 253 - len("requests.")


def domain_of(length: int) -> str:
    """A valid DNS subdomain of exactly `length` characters (labels of 50)."""
    labels, left = [], length
    while left > 0:
        take = min(50, left if left <= 50 else left - 2)  # leave room for ".x" after it
        labels.append("a" * take)
        left -= take + 1
    return ".".join(labels)


@pytest.mark.parametrize("name", [
    "gemshare.io/gpu", "example.com/shared-gpu", "a.b-c.d/G_p.u", "k8s.io/gpu", "x/y",
    "0.example.com/9", f"{domain_of(DOMAIN_MAX)}/gpu", f"example.com/{'n' * 63}",
])
def test_names_the_kubelet_registers_pass(name):
    assert problem(name) is None and refusal(name) is None


@pytest.mark.parametrize("name, why", [
    ("gpu", "it has no domain"),
    ("requests.example.com/gpu", "it starts with 'requests.'"),
    ("kubernetes.io/gpu", "kubernetes.io domain"),
    ("nvidia.kubernetes.io/gpu", "kubernetes.io domain"),
    ("example.com/kubernetes.io/gpu", "kubernetes.io domain"),
    ("example.com/a/b", "more than one '/'"),
    ("/gpu", "its domain is empty"),
    ("a..b/gpu", "its domain 'a..b' is not a DNS subdomain"),
    ("Example.com/gpu", "is not a DNS subdomain"),
    ("-a.com/gpu", "is not a DNS subdomain"),
    ("a-.com/gpu", "is not a DNS subdomain"),
    ("a_b.com/gpu", "is not a DNS subdomain"),
    (f"{domain_of(DOMAIN_MAX + 1)}/gpu", f"longer than {DOMAIN_MAX} characters"),
    ("example.com/", "its name after the '/' is empty"),
    ("example.com/-gpu", "'-gpu', has a character or an end the rule refuses"),
    ("example.com/gpu.", "has a character or an end"),
    ("example.com/g pu", "has a character or an end"),
    (f"example.com/{'n' * 64}", "longer than 63 characters"),
])
def test_names_the_kubelet_refuses_are_refused_for_their_reason(name, why):
    assert why in problem(name)
    message = refusal(name)
    assert message.startswith(f"{name!r} cannot be registered: ") and message.endswith(RULE)


def test_the_domains_built_here_have_the_length_asked():
    assert len(domain_of(DOMAIN_MAX)) == DOMAIN_MAX
    assert len(domain_of(DOMAIN_MAX + 1)) == DOMAIN_MAX + 1
