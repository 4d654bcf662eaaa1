"""LL4xx: distribution strategies."""
