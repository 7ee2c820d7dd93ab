"""The simulated OpenAI-compatible LLM server: a physically grounded twin of a continuous-batching engine."""
