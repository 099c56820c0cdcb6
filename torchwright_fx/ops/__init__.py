"""Op constructions: FFN lanes (``lanes``, ``ffn``), attention heads (``attention``), and the
two user-facing op libraries (``swiglu``, ``relu``)."""
