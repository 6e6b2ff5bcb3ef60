"""The contract tests' fixtures: ``pair`` (a MemoryStore and a RedisStore on one fake clock,
tests/model/test_divergences.py) for the tests that run both stores side by side."""

from tests.model.test_divergences import pair  # noqa: F401
