"""Pathway library models (the pgvector extension is created by this app's first migration)."""
