# The C of mrc/sim/arena.py (arena_c.h, which says what it does and how). Declarations only.

cdef extern from "mrc/sim/arena_c.h":
    int _install "mrc_arena_install"(size_t size, size_t align)
    size_t _stat "mrc_arena_stat"(int which)
    int _can_prefault "mrc_can_prefault"()
