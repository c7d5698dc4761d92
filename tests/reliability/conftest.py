from tests.loop_fixtures import temporal_client, temporal_server  # noqa: F401  (fixtures)
