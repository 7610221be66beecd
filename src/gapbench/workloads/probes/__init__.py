"""Probes of the known weak spots: sparse computation, dynamic shapes, mixed-precision training."""
