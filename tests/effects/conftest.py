"""The effects tests' fixtures: a private PostgreSQL server (tests/pg_fixtures.py)."""

from tests.pg_fixtures import pg_server, pg_url  # noqa: F401  (session server, its URL)
