"""Operator support tables (JSON data, see each file's "source")."""
