"""LL6xx: mixed precision — autocast, loss scaling, float16 outputs."""
