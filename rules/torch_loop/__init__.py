"""LL7xx: PyTorch loop structure — the order and mode of what one training iteration does."""
