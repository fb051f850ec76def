"""Task families: data preparation, heads and metrics for fine-tuning."""
