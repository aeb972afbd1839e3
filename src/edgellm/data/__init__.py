"""Data files the tools need at run time (WikiText-2 test and valid splits; see README.md here)."""
