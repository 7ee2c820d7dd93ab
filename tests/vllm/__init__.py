"""Helpers of the vLLM engine tests: the tiny Llama writer and the engine process."""
