"""Helpers of the real-engine tests: the tiny GGUF model writer and the llama.cpp servers."""
