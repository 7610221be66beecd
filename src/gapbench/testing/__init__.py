"""What tests and demos stand on: a tiny OpenAI-compatible server."""
