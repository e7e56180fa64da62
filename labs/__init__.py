"""Bundled lab files (TOML), shipped as package data of ``mrc.bundled_labs``."""
