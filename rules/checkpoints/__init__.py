"""LL8xx: checkpoints and logging."""
