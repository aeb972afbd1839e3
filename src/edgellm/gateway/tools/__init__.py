"""Tool calling for the gateway: the tools asked for, their prompt and grammar, the calls read back."""
