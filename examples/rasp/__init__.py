"""tracr's lib.py in our language (issue 16): one program per module; see README.md."""
