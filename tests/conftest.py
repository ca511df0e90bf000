"""Root fixtures; shared helpers live in helpers.py (tests import them as `from helpers import ...`)."""

import pytest
from helpers import run_cli


@pytest.fixture
def cli():
    return run_cli
