"""Operator scan: which ops an exported MNN graph uses and which backends run them natively."""
