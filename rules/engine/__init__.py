"""LL0xx: findings about the input and the suppression comments, reported by the engine itself."""
