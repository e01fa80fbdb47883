"""Fixtures for the deploy/ tests."""

from __future__ import annotations

import pytest
from deploy_files import parse_yaml, render_base


@pytest.fixture(scope="session")
def rendered() -> list:
    """The objects `kubectl kustomize deploy/kubernetes` makes."""
    return parse_yaml(render_base())
