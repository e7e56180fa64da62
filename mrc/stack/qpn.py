"""Which queue-pair numbers a run's QPs get: drawn from the seed, as on a real NIC.

A real NIC hands out QPNs from its 24-bit space (0 and 1 are the management QPs), and which
numbers a job gets depends on everything else that ran on the NIC before it: to the job, the
first QPN is arbitrary. That matters beyond bookkeeping, because a RoCE flow's UDP source
port derives from its QPN (:mod:`mrc.transport.rc.entropy`) and ECMP switches hash it
(:func:`mrc.stack.rc_connection.ecmp_t1`): the QPN decides which T1 an RC QP's flow takes. So a stack draws its first QPN from the seed
and numbers its QPs upward from there; another seed pins RC's QPs to other T1s, as another
job start would.

The draw stays below 2**23 so that a stack's QPs (a few thousand at most in the simulator)
never run past the 24-bit field.
"""

from __future__ import annotations

import hashlib
import struct

FIRST_USER_QPN = 2  # QP0 and QP1 are the subnet-management and general-services QPs
QPN_LIMIT = 1 << 23  # first QPNs are drawn below this; the field holds 24 bits


def first_qpn(seed: int) -> int:
    """The first QPN a stack run with ``seed`` allocates (stable in every process)."""
    digest = hashlib.blake2b(struct.pack("<Q", seed & (2**64 - 1)), digest_size=8,
                             person=b"mrc-lab-qpn").digest()
    return FIRST_USER_QPN + int.from_bytes(digest, "little") % (QPN_LIMIT - FIRST_USER_QPN)
