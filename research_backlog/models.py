"""Research backlog models."""
