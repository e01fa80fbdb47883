"""Fixtures for the deploy/ tests."""

from __future__ import annotations

import pytest
from deploy_files import MPS_OVERLAY, render


@pytest.fixture(scope="session")
def rendered() -> list:
    """The objects `kubectl kustomize deploy/kubernetes` makes."""
    return render()


@pytest.fixture(scope="session")
def rendered_mps() -> list:
    """The objects `kubectl kustomize deploy/kubernetes-mps` makes."""
    return render(MPS_OVERLAY)
