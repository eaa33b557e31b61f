"""Model definitions and loading (GGUF files, safetensors folders)."""
