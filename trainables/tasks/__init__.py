"""Task families: data preparation, heads and metrics for fine-tuning; the layout of the whole code:
docs/architecture.md."""
