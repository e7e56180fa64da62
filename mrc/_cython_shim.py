"""What the compiled core's sources need of the ``cython`` module when Cython is not
installed: only ``compiled`` (False), which picks the pure-Python path of the few pieces whose
data layout differs between the builds (the event heap). With Cython installed, its own
shadow module serves instead (same answer). The build replaces ``cython.compiled`` by True.
"""

compiled = False
