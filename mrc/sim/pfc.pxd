# C layout of mrc/sim/pfc.py for the compiled build (mrc/_build.py); the .py is the source.
# PauseState stays a plain (slot-less) Python class: the ports that use it (pfc_ports.pxd)
# declare its state as their own C fields.
cimport cython
from mrc.packet cimport Packet
from mrc.sim.engine cimport Simulator

cdef class PauseFrame(Packet):
    cdef public long long quanta

cdef class PfcIngress:
    cdef public object port, reverse
    cdef public Simulator sim
    cdef public long long prio, bytes, peak, xoff, xon, limit, quanta, refresh_ps
    cdef public bint xoff_state
    cdef public long long _gen, xoff_frames, xon_frames, overflows
    cdef public object _refresh_cb

    @cython.locals(b=cython.longlong, sim=Simulator)
    cpdef bint charge(self, long long size) except? False
    @cython.locals(b=cython.longlong)
    cpdef release(self, long long size)
    cpdef reset(self)
    cpdef _send(self, long long quanta)
    @cython.locals(sim=Simulator)
    cpdef _refresh(self, long long gen)
