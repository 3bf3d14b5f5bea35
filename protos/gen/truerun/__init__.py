"""Generated code. Do not edit; run `python protos/generate.py`."""
