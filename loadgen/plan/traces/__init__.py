"""Named production trace formats (Mooncake, Azure LLM inference, BurstGPT): one loader each."""
