"""The state store (SQLite or PostgreSQL) and the small stores built on it."""
