"""Model loading: built-in offline aliases, hub ids, local folders and GGUF files."""
