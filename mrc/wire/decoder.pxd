# decoder.py is compiled for the compiled build (mrc/_build.py) as plain Python: no C
# declarations yet (its per-datagram code runs as compiled Python functions).
