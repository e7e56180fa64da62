"""``mrc-lab``'s lab commands: ``run``, ``labs``, ``sweep`` and ``fleet``, and how each exits."""
