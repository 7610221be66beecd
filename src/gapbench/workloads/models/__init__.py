"""Model workloads: real models built from configs with random weights, trained or run end to end."""
