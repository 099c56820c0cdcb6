"""An RV32I machine for torchwright_fx (issue 33): C programs built for rv32i (``c/``, the ELF
images in ``elf/``), an ELF loader (``elf.py``), a plain-Python reference interpreter
(``reference.py``), a cross-check against unicorn (``crosscheck.py``) and the command line
(``python -m examples.rv32i``). README.md has the plan for the compiled interpreter."""
