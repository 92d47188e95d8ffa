"""Real pretrained models into standard HF directories: `convert` (any GGUF file transformers
can load) and `registry` (known models shipped as PyPI wheels, `posttrain models get`)."""
