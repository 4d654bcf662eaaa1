"""LL9xx: JAX (compiled functions, PRNG keys, optimizer state)."""
