"""Transport: connections, pooled keep-alive HTTP/1.1, streamed bodies, SSE, endpoints and TLS.

The wire knows bytes and requests, never a protocol's documents; the adapters above it do.
"""
