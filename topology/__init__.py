"""Fabric model: multi-plane two-tier Clos specs, element names, paths and the SRv6 uSID plan."""

from topology.spec import FabricError, FabricSpec, preset, PRESETS

__all__ = ["FabricError", "FabricSpec", "preset", "PRESETS"]
