"""LL1xx: autodiff correctness — values that silently leave the gradient computation."""
