"""RoCE v2 Reliable Connection (RC): the single-path baseline MRC is compared with.

One ``RcQp`` (:mod:`.qp`) is one *endpoint* of an RC QP, as on a real NIC: its requester half
(:mod:`.requester`) sends the RDMA WRITEs posted on it, its responder half (:mod:`.responder`)
places the WRITEs of the peer and acknowledges them. The driver registers each endpoint with
its host's NIC under the QP's number; both ends of a QP use the same ``qpn``
(``mrc.stack.rc_connection.rc_qp_pair`` builds matching ends over a fabric). Lab parameters and
counters are in :mod:`.config`; :mod:`.striping` spreads one message over several QPs as NCCL
does.

Faithful to RC, not to MRC: **one path at a time, chosen by the fabric**. The plane is fixed
and the QP sends to its peer's routed address; the switches' ECMP hashes its 5-tuple (the UDP
source port derives from the QPN, :mod:`.entropy`), so every packet follows one FIFO path
until routing moves the flow (``mrc.sim.routing``); ACK/NAK go back over the same plane. Delivery is in order with go-back-N recovery, trimmed packets are losses, and a
QP that exhausts its retries moves to the error state (NCCL then aborts the job).

Internally sequence numbers are unbounded integers; the 24-bit wire PSN is derived from them
(``initial_psn`` + sequence, modulo 2^24), so wrap-around needs no special case.
"""
