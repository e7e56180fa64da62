"""The lab file format: its sections as field tables, validated into a :class:`Lab`."""
