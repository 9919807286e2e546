"""Prompt datasets from local files: generic JSON lines, ShareGPT, a line pool; one loader each."""
