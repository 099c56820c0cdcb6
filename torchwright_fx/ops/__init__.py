"""Op constructions: FFN lanes (``lanes``, ``ffn``), attention heads (``attention``), the
position decoder (``position``), output decoding (``decode``) and the constants they rest on
(``numerics``). Below lowering: nothing here imports ``capture``'s registry, ``lower`` or an op
family. ``swiglu`` and ``relu`` are the two user-facing op libraries: entry points that
re-export ``torchwright_fx/families/libraries.py`` under their machine's name."""
