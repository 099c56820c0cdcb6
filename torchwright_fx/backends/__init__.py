"""Backends that run or package a Machine: in-process runtime, Hugging Face directory, ONNX."""
