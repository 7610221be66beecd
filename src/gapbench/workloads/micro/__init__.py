"""Micro-benchmarks: one operation class at a time (GEMM, bandwidth, per-operator cost, attention, convolution,
element-wise, collectives), each per dtype and shape."""
