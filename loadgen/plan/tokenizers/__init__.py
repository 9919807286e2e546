"""Tokenizers from local files (never downloaded): a Hugging Face tokenizer.json, a
tiktoken-style BPE ranks file."""
