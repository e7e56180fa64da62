# The C of mrc/sim/arena.py for the compiled build (see mrc/_build.py): an arena allocator for
# pymalloc that carves its arenas out of one region of address space madvised for transparent
# huge pages. arena.py says why; this is how.
#
# pymalloc asks for an arena (1 MiB on 64-bit CPython 3.11) when its existing ones are full and hands
# it back when every object in it has died. Both calls come with the GIL held, but since 3.12
# an interpreter with its own GIL has its own pymalloc, while the arena allocator is one for
# the process: a mutex keeps the region's bookkeeping consistent (two uncontended lock
# operations per arena; nothing per object).
cdef extern from *:
    """
    #if defined(__linux__)
    #include <sys/mman.h>
    #include <pthread.h>
    #endif
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* A freed arena of ours, linked through its own first bytes (it is at least a page). */
    typedef struct mrc_free_arena { struct mrc_free_arena *next; size_t size; } mrc_free_arena;
    static char *mrc_region = NULL;               /* start of the region, huge-page aligned */
    static size_t mrc_region_size = 0, mrc_region_used = 0;   /* used: the bump pointer */
    static size_t mrc_nfree = 0, mrc_fallbacks = 0;
    static mrc_free_arena *mrc_free_list = NULL;  /* freed arenas, last freed first */
    static PyObjectArenaAllocator mrc_previous;   /* the allocator we replaced */
    static pthread_mutex_t mrc_arena_lock = PTHREAD_MUTEX_INITIALIZER;

    static void *mrc_arena_alloc(void *ctx, size_t size) {
        void *p = NULL;
        size_t span = (size + 4095) & ~(size_t)4095;  /* whole pages: the next one stays aligned */
        pthread_mutex_lock(&mrc_arena_lock);
        /* a freed arena of exactly this size (pymalloc's arenas are all one size, so this is
           the head of the list); else the next span of the region */
        for (mrc_free_arena **link = &mrc_free_list; *link; link = &(*link)->next) {
            if ((*link)->size == size) {
                p = *link;
                *link = (*link)->next;
                mrc_nfree--;
                break;
            }
        }
        if (!p && size && span >= size && mrc_region_size - mrc_region_used >= span) {
            p = mrc_region + mrc_region_used;
            mrc_region_used += span;
        }
        if (!p)
            mrc_fallbacks++;
        pthread_mutex_unlock(&mrc_arena_lock);
        /* the region is used up (or the size is absurd): the previous allocator serves */
        return p ? p : mrc_previous.alloc(mrc_previous.ctx, size);
    }

    static void mrc_arena_free(void *ctx, void *ptr, size_t size) {
        if ((char *)ptr < mrc_region || (char *)ptr >= mrc_region + mrc_region_size) {
            /* made before we were installed, or after the region ran out */
            mrc_previous.free(mrc_previous.ctx, ptr, size);
            return;
        }
        /* kept for reuse, never unmapped (as glibc's malloc keeps its heap) */
        mrc_free_arena *arena = (mrc_free_arena *)ptr;
        pthread_mutex_lock(&mrc_arena_lock);
        arena->size = size;
        arena->next = mrc_free_list;
        mrc_free_list = arena;
        mrc_nfree++;
        pthread_mutex_unlock(&mrc_arena_lock);
    }

    /* Reserve `size` bytes of address space aligned to `align` (a power of two: the huge
       page size), ask for huge pages there and make it pymalloc's arena source.
       0: installed (or already was); -1: mmap refused the size; -2: madvise refused. */
    static int mrc_arena_install(size_t size, size_t align) {
        if (mrc_region)
            return 0;
        if (!align || (align & (align - 1)) || size < align || size % align)
            return -1;
        /* NORESERVE: address space only; memory is committed page by page as it is touched */
        char *raw = (char *)mmap(NULL, size + align, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (raw == (char *)MAP_FAILED)
            return -1;
        char *start = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
        if (madvise(start, size, MADV_HUGEPAGE) != 0) {
            munmap(raw, size + align);
            return -2;
        }
        /* give back the unaligned ends */
        if (start > raw)
            munmap(raw, (size_t)(start - raw));
        munmap(start + size, (size_t)(raw + align - start));
        mrc_region = start;
        mrc_region_size = size;
        PyObject_GetArenaAllocator(&mrc_previous);
        PyObjectArenaAllocator ours = {NULL, mrc_arena_alloc, mrc_arena_free};
        PyObject_SetArenaAllocator(&ours);
        return 0;
    }

    /* The region's state, for diagnostics and tests: 0 start, 1 size, 2 bytes handed out
       (bump pointer), 3 freed arenas kept, 4 arenas the previous allocator had to serve. */
    static size_t mrc_arena_stat(int which) {
        size_t out;
        pthread_mutex_lock(&mrc_arena_lock);
        switch (which) {
            case 0: out = (size_t)mrc_region; break;
            case 1: out = mrc_region_size; break;
            case 2: out = mrc_region_used; break;
            case 3: out = mrc_nfree; break;
            default: out = mrc_fallbacks;
        }
        pthread_mutex_unlock(&mrc_arena_lock);
        return out;
    }
    #else
    /* not Linux, or no transparent huge pages in its headers: never installed */
    static int mrc_arena_install(size_t size, size_t align) { return -1; }
    static size_t mrc_arena_stat(int which) { return 0; }
    #endif
    """
    int _install "mrc_arena_install"(size_t size, size_t align)
    size_t _stat "mrc_arena_stat"(int which)
