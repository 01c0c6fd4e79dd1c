"""ClickHouse: clients and DDL migrations, the read-only analyst endpoint and its SQL policy, `flywheel sql`."""
