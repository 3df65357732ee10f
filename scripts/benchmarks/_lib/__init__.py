"""What the benchmark scripts beside this folder share (not part of the installed packages).

- `_lib.benchmark`: timing training steps, alternating measures, the device record, tables
  and JSON reports, the peer programs of `../shared/peers`.
- `_lib.translators`: the translator sizes and the Transformer decoded without its cache.
- `_lib.decoding`: a decoder forced to a fixed length (`<end>` suppressed).
- `_lib.profiling`: op time by op and by group from a TensorFlow profiler trace.

A script in `scripts/benchmarks/` imports them as `from _lib.benchmark import alternate`:
Python puts the folder of the script it runs first on `sys.path`. A test that loads a script
or these modules by path puts that folder there itself (`tests.helpers.benchmarks`).
"""
