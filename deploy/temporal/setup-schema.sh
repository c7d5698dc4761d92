#!/bin/sh
# Creates Temporal's two PostgreSQL databases and brings their schemas up to date.
# Safe to re-run: create and setup-schema fail harmlessly when already done, and update-schema
# applies only the missing versions.
set -eu
: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
schemas=/etc/temporal/schema/postgresql/v12

tool() {
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "${DB_PORT:-5432}" -u "$POSTGRES_USER" "$@"
}

for pair in temporal:temporal temporal_visibility:visibility; do
  database=${pair%%:*}
  schema=${pair##*:}
  tool --db "$database" create || echo "database $database already exists"
  tool --db "$database" setup-schema -v 0.0 || echo "schema of $database already set up"
  tool --db "$database" update-schema -d "$schemas/$schema/versioned"
done
