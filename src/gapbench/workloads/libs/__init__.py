"""Library maturity: one GEMM and one attention through every library path a stack offers."""
