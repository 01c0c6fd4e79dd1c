"""Serving a policy: the HTTP server, dynamic batching, the OpenAI wire format, vLLM, hot reload, merging versions."""
