"""Fixtures for the deploy/ tests."""

from __future__ import annotations

import pytest
from deploy_files import render_base


@pytest.fixture(scope="session")
def rendered() -> list:
    """The objects `kubectl kustomize deploy/kubernetes` makes."""
    return render_base()
