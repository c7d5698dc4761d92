#!/bin/sh
# Runs once, when the PostgreSQL volume is first initialised: a database and a role for Marathon's
# store, separate from Temporal's.
set -eu
: "${MARATHON_DB_PASSWORD:?set MARATHON_DB_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v password="$MARATHON_DB_PASSWORD" <<'SQL'
CREATE ROLE marathon LOGIN PASSWORD :'password';
CREATE DATABASE marathon OWNER marathon;
SQL
