"""LL5xx: input pipelines — how data reaches the training loop."""
