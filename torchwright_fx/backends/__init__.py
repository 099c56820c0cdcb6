"""Backends that run or package the compiled weights: the in-process runtime, the Hugging Face
directory (transformers), GGUF (llama.cpp) and ONNX. Their two shapes, writer and runner, are
in ``protocol.py``."""
