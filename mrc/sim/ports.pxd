# C layout of mrc/sim/ports.py for the compiled build (mrc/_build.py).
cimport cython
from mrc.packet cimport Packet
from mrc.sim.engine cimport Handler, Simulator, _put, _take
from mrc.sim.switch cimport Switch

# constants: typed copies of imported names, and this module's private ones
cdef long long DATA, ECN_CE, ECN_NOT_ECT
cdef long long _PS_BITS, _ETH

@cython.final
cdef class Fifo:
    cdef public list _items
    cdef public Py_ssize_t _mask, _head, _count

    cpdef void append(self, item) except *
    cpdef void appendleft(self, item) except *
    cpdef popleft(self)
    cpdef remove(self, item)
    cdef _grow(self)
    @cython.locals(items=list, mask=Py_ssize_t, head=Py_ssize_t, i=Py_ssize_t)
    cdef list _in_order(self)

cdef class OutPort(Handler):
    cdef public object name, net, link
    cdef public long long plane
    cdef public object src, dst
    cdef public Simulator sim
    cdef public object _rng
    cdef public object _arrive, _deliver
    cdef public Switch _far
    cdef public long long nominal_bps, bps, _ppb, delay_ps, far_latency_ps, _flight
    cdef public bint up
    cdef public long long epoch, busy_until
    cdef public bint _pending
    cdef public Fifo q, hq
    cdef public long long _qb, _hqb
    cdef public long long buffer_bytes, trim_threshold, _admit_limit, trim_size, header_limit
    cdef public long long ecn_threshold
    cdef public bint trimming
    cdef public double loss_p
    cdef public object _tap
    cdef public long long tx_packets, tx_bytes, delivered, trims, ecn_marks
    cdef public long long peak_qbytes, peak_hqbytes
    cdef public dict drops

    @cython.locals(now=cython.longlong, size=cython.longlong, ppb=cython.longlong,
                   end=cython.longlong)
    cpdef send(self, Packet pkt)
    @cython.locals(t=cython.longlong, sim=Simulator, flight=cython.longlong,
                   ppb=cython.longlong, epoch=cython.longlong, size=cython.longlong,
                   pkt=Packet, hq=Fifo, q=Fifo)
    cpdef _drain(self, long long now)
    @cython.locals(size=cython.longlong, qb=cython.longlong)
    cpdef _admit(self, Packet pkt, long long now)
    @cython.locals(now=cython.longlong)
    cpdef bint _arrival(self, Packet pkt) except? False
    cdef void fire(self, object pkt)
    cpdef arrive(self, Packet pkt)
    @cython.locals(port=OutPort)
    cpdef _arrive_switch(self, Packet pkt)
    cpdef kick(self)
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
