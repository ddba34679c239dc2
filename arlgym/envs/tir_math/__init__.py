"""TIR Math: math problems solved with a sandboxed Python tool (``arl/TIRMath-v0``)."""
