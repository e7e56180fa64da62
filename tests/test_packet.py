"""``make_packet`` (the transports' per-packet constructor) makes exactly what the keyword
constructor makes, in whichever build runs."""

import pytest

from mrc.packet import ACK, DATA, FLAG_LAST, Packet, make_packet, split_address


def test_make_packet_equals_keyword_constructor() -> None:
    data = make_packet(DATA, 3, 7, 0x1234, 99, 0x50001, 12, 8192, 4096, 2_000_000, FLAG_LAST,
                       123456, 0, 0, 0, 0, *split_address((0xFCBB0000 << 96) | 5), 4240, None,
                       0xDEADBEEF, 1)
    assert data.fields() == Packet(
        DATA, 3, 7, 0x1234, 99, ev=0x50001, msg_id=12, offset=8192, length=4096,
        msg_len=2_000_000, flags=FLAG_LAST, ts=123456, da=(0xFCBB0000 << 96) | 5, size=4240,
        digest=0xDEADBEEF, plane=1).fields()
    ack = make_packet(ACK, 7, 3, 0x99, 5, 0x2, 0, 0, 0, 0, 0, 77, 0, 4, 1, (1 << 64) - 1,
                      *split_address(1 << 100), 136, None, 0, 0)
    assert ack.fields() == Packet(ACK, 7, 3, 0x99, 5, ev=0x2, ts=77, echo_psn=4, sack_base=1,
                                  sack=(1 << 64) - 1, da=1 << 100, size=136).fields()


def test_destination_is_kept_as_two_halves_and_joined_exactly() -> None:
    """A packet keeps its 128-bit destination as two 64-bit halves (the switches shift them
    in C); ``da`` reads and writes the whole address, and refuses what is not one."""
    top = (0xFCBB0001 << 96) | (0xE001 << 80) | (0xE002 << 64) | 0xE003_0000_0000_0001
    pkt = Packet(DATA, 0, 1, 2, da=top)
    assert (pkt.da_hi, pkt.da_lo) == split_address(top) == (top >> 64, top & ((1 << 64) - 1))
    assert pkt.da == top
    pkt.da = (1 << 128) - 1
    assert (pkt.da_hi, pkt.da_lo) == ((1 << 64) - 1, (1 << 64) - 1)
    for bad in (1 << 128, -1):
        with pytest.raises(ValueError, match="128-bit"):
            pkt.da = bad
        with pytest.raises(ValueError, match="128-bit"):
            split_address(bad)
    assert pkt.da == (1 << 128) - 1  # a refused address changes nothing
