# C layout of mrc/sim/ports.py for the compiled build (mrc/_build.py).
cimport cython
from mrc.packet cimport Packet
from mrc.sim.engine cimport Handler, Simulator
from mrc.sim.fifo cimport Fifo
from mrc.sim.switch cimport Switch

# constants: typed copies of imported names, and this module's private ones
cdef long long DATA, ECN_CE, ECN_NOT_ECT
cdef long long _PS_BITS, _ETH

cdef class OutPort(Handler):
    # In the order of the C struct: first what every packet-hop reads or writes (send, the
    # drain, the arrival), so a port gone cold since its last packet costs two or three
    # cache lines per hop rather than six; configuration and rare counters after.
    cdef public Simulator sim
    cdef public bint up
    cdef public bint _pending
    cdef public long long busy_until, epoch, _ppb, _flight, _qb, _hqb
    cdef public object _arrive
    cdef public double loss_p
    cdef public long long tx_packets, tx_bytes, delivered
    cdef public Fifo hq
    cdef public object _tap
    cdef public Switch _far
    cdef public long long peak_hqbytes, header_limit
    cdef public Fifo q
    cdef public long long _admit_limit, ecn_threshold, peak_qbytes
    cdef public object _deliver
    cdef public object name, net, link
    cdef public long long plane
    cdef public object src, dst
    cdef public object _rng
    cdef public long long nominal_bps, bps, delay_ps, far_latency_ps
    cdef public long long buffer_bytes, trim_threshold, trim_size
    cdef public bint trimming
    cdef public long long trims, ecn_marks
    cdef public dict drops

    @cython.locals(size=cython.longlong, ppb=cython.longlong, end=cython.longlong)
    cdef long long _transmit(self, Packet pkt, long long start) except? -1
    @cython.locals(now=cython.longlong)
    cpdef send(self, Packet pkt)
    @cython.locals(t=cython.longlong, pkt=Packet, hq=Fifo, q=Fifo)
    cpdef _drain(self, long long now)
    @cython.locals(size=cython.longlong, qb=cython.longlong)
    cpdef _admit(self, Packet pkt, long long now)
    @cython.locals(now=cython.longlong)
    cpdef bint _arrival(self, Packet pkt) except? False
    cdef void fire(self, object pkt)
    cpdef arrive(self, Packet pkt)
    @cython.locals(port=OutPort)
    cpdef _arrive_switch(self, Packet pkt)
    cpdef bint _lose(self) except? False
    cpdef _lost(self, Packet pkt)
    cpdef _mark(self, Packet pkt, long long now)
    cpdef _trim(self, Packet pkt, long long now)
    @cython.locals(hqb=cython.longlong)
    cpdef bint _enqueue_header(self, Packet pkt) except? False
    cpdef _drop(self, Packet pkt, str reason)
    cpdef sync(self)
    cpdef tuple backlog(self)
    cpdef long long set_down(self) except? -1
    cpdef set_up(self)
    cpdef set_rate_fraction(self, fraction)
    cpdef _set_bps(self, long long bps)
    cpdef set_loss(self, p)
    cpdef long long serialization_ps(self, long long size) except? -1
