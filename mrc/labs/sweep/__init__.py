"""Sweeps: a grid of lab parameters, its runs (local or on Dask), their table and plot."""
