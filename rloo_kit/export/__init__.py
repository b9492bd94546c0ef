"""A trained adapter out of the kit: a merged model (`export_merged`), a GGUF file for llama.cpp and Ollama
(`export_gguf`), proved in a real llama.cpp (`verify_gguf`, through `llama_cpp`), and a push to the hub.

The writers live in `convert`; `llama_cpp` runs a GGUF in llama.cpp's own runtime.
"""

from .convert import export_gguf, export_merged, push_to_hub, verify_gguf

__all__ = ["export_gguf", "export_merged", "push_to_hub", "verify_gguf"]
