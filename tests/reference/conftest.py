"""Differential tests against the real `flax`; every test here is skipped when it is absent."""

import pytest

pytest.importorskip("flax")
