"""Weight quantization: plans as data, RTN/GPTQ/AWQ, and a faithful MNN export."""
