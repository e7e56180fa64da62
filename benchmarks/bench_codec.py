"""Wire codec rates: encodes and decodes per second of a 4 KB DATA packet and an ACK.

    python benchmarks/bench_codec.py
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc import wire
from mrc.packet import ACK, DATA, Packet
from topology import usid


def main() -> None:
    da = usid.path_address(1, 0, 3, 1, 4)
    data = Packet(DATA, 1, 2, 5, 7, ev=usid.make_ev(1, 3), msg_id=3, offset=4096,
                  length=4096, msg_len=1 << 20, da=da, payload=bytes(4096))
    ack = Packet(ACK, 2, 1, 5, 7, ev=usid.make_ev(1, 3), da=da)
    data_bytes, ack_bytes = wire.encode(data), wire.encode(ack)
    cases = [("DATA 4096 B encode", lambda: wire.encode(data)),
             ("DATA 4096 B decode", lambda: wire.decode(data_bytes)),
             ("ACK encode", lambda: wire.encode(ack)),
             ("ACK decode", lambda: wire.decode(ack_bytes))]
    n = 20_000
    for name, fn in cases:
        best = min(timeit.repeat(fn, number=n, repeat=3))
        print(f"{name:<20} {n / best:>10,.0f} per second")


if __name__ == "__main__":
    main()
