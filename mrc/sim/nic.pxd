# C layout of nic.py for the compiled build (mrc/_build.py); the .py is the source.
from mrc.sim.nic_driver cimport NicDriver

cdef class Nic(NicDriver):
    cdef public object sim, host
