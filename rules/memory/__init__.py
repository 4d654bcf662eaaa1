"""LL3xx: memory and lifetimes in loops."""
