"""Quality evidence: perplexity, top-1 agreement and KL against fp, for torch and MNN models."""
