"""Public ONNX surface: export a Phi-3 checkpoint directory and run it with onnxruntime.

import torchwright_fx.onnx as twx
twx.export("binary_increment_hf", "binary_increment_onnx")
print(twx.load("binary_increment_onnx").generate("1011\\n"))
"""

from torchwright_fx.backends.onnx import OnnxRunner, SequenceTooLongError, load
from torchwright_fx.backends.onnx import export_onnx as export

__all__ = ["OnnxRunner", "SequenceTooLongError", "export", "load"]
