"""LLM inference: the llm-infer workload, its engines (transformers, vLLM, a server) and its metrics."""
