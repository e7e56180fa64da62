/* The C of mrc/sim/arena.py for the compiled build (arena_c.pxd declares it to Cython): an
   arena allocator for pymalloc that carves its arenas out of one region of address space madvised for transparent
   huge pages. arena.py says why; this is how.

   pymalloc asks for an arena (1 MiB on 64-bit CPython 3.11) when its existing ones are full and hands
   it back when every object in it has died. Both calls come with the GIL held, but since 3.12
   an interpreter with its own GIL has its own pymalloc, while the arena allocator is one for
   the process: a mutex keeps the region's bookkeeping consistent (two uncontended lock
   operations per arena; nothing per object).

   A helper thread prefaults the region ahead of the arenas handed out: the kernel clears a
   fresh 2 MiB page on its first touch, on a VM slowly, and that clearing would otherwise stall
   the simulation (its setup and its run) once per huge page. The thread keeps the region
   populated up to MRC_AHEAD bytes past the bump pointer (mrc_fault_in: no byte changes, so
   pages in use are safe) and sleeps on a futex between. It holds no lock, so a child made by
   fork (which has no such thread) can only miss the prefaulting, never deadlock. */

#ifndef MRC_ARENA_C_H
#define MRC_ARENA_C_H

#if defined(__linux__)
#include <sys/mman.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/futex.h>
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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define MRC_AHEAD ((size_t)32 << 20)  /* bytes kept populated past the bump pointer */
static size_t mrc_page = 0;            /* the huge page size (the region's alignment) */
/* futex word: huge pages of the region wanted populated, counted from its start */
static unsigned int mrc_want = 0;
static size_t mrc_populated = 0;       /* bytes populated so far (the thread's count) */
static int mrc_prefaulting = 0;        /* 1 while the thread runs */

/* Fault in the huge page at `page`, without changing a byte of it. On x86 a locked add
   of 0 to its first byte: a write fault, which (Linux 6.4+) locks only the region's own
   mapping, where MADV_POPULATE_WRITE holds the process's memory-map lock through the
   whole clearing and stalls the main thread's brk and mmap meanwhile. The locked add is
   safe against the allocator writing that byte at the same time; it is written in
   assembly because a compiler may turn an atomic add of 0 into a load, a read fault
   that maps the zero page. Elsewhere MADV_POPULATE_WRITE (Linux 5.14+). 0, or -1 with
   errno. */
static int mrc_fault_in(char *page) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("lock addb $0, %0" : "+m"(*(volatile char *)page) : : "memory");
    return 0;
#else
    return madvise(page, mrc_page, MADV_POPULATE_WRITE);
#endif
}

/* The populate thread: populate huge page after huge page up to mrc_want, then wait for
   the allocator to raise it. Where the allocator has overtaken it, it goes on past the
   page in use: the allocator has faulted those pages in itself, and racing it for the
   page it is filling would clear that page twice. Ends at the region's end or on the
   first error (ENOMEM: the pages are then faulted in by their first touch, as without
   the thread). */
static void *mrc_populate(void *unused) {
    size_t done = 0, total = mrc_region_size / mrc_page, inuse;
    while (done < total) {
        unsigned int want = __atomic_load_n(&mrc_want, __ATOMIC_ACQUIRE);
        inuse = __atomic_load_n(&mrc_region_used, __ATOMIC_RELAXED) / mrc_page;
        if (done <= inuse)
            done = inuse + 1;
        if (done >= want) {
            syscall(SYS_futex, &mrc_want, FUTEX_WAIT_PRIVATE, want, NULL, NULL, 0);
            continue;
        }
        if (mrc_fault_in(mrc_region + done * mrc_page) != 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            break;
        }
        done++;
        __atomic_store_n(&mrc_populated, done * mrc_page, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&mrc_prefaulting, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* Under the arena lock, after the bump pointer moved: raise the thread's target to
   MRC_AHEAD past it (a wake-up at most once per huge page). */
static void mrc_want_ahead(void) {
    size_t want;
    if (!__atomic_load_n(&mrc_prefaulting, __ATOMIC_ACQUIRE))
        return;
    want = (mrc_region_used + MRC_AHEAD + mrc_page - 1) / mrc_page;
    if (want > mrc_region_size / mrc_page)
        want = mrc_region_size / mrc_page;
    if (want > __atomic_load_n(&mrc_want, __ATOMIC_RELAXED)) {
        __atomic_store_n(&mrc_want, (unsigned int)want, __ATOMIC_RELEASE);
        syscall(SYS_futex, &mrc_want, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Whether the populate thread can fault pages in here: on x86 always; elsewhere if the
   kernel has MADV_POPULATE_WRITE (tried on a scratch page). */
static int mrc_can_prefault(void) {
#if defined(__x86_64__) || defined(__i386__)
    return 1;
#else
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int ok;
    if (p == MAP_FAILED)
        return 0;
    ok = madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
    munmap(p, 4096);
    return ok;
#endif
}

/* A child made by fork has no populate thread. */
static void mrc_prefault_forked(void) { mrc_prefaulting = 0; }

/* Start the populate thread (signals blocked in it: they belong to the main thread). */
static int mrc_start_prefault(void) {
    pthread_t thread;
    pthread_attr_t attr;
    sigset_t all, old;
    int err;
    if (!mrc_can_prefault())
        return 0;
    pthread_atfork(NULL, NULL, mrc_prefault_forked);
    __atomic_store_n(&mrc_prefaulting, 1, __ATOMIC_RELEASE);
    mrc_want_ahead();
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&thread, &attr, mrc_populate, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (err)
        __atomic_store_n(&mrc_prefaulting, 0, __ATOMIC_RELEASE);
    return !err;
}

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
        __atomic_store_n(&mrc_region_used, mrc_region_used + span, __ATOMIC_RELAXED);
        mrc_want_ahead();
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
   page size), ask for huge pages there, make it pymalloc's arena source and start the
   populate thread (where it can fault pages in).
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
    mrc_page = align;
    PyObject_GetArenaAllocator(&mrc_previous);
    PyObjectArenaAllocator ours = {NULL, mrc_arena_alloc, mrc_arena_free};
    PyObject_SetArenaAllocator(&ours);
    pthread_mutex_lock(&mrc_arena_lock);
    mrc_start_prefault();
    pthread_mutex_unlock(&mrc_arena_lock);
    return 0;
}

/* The region's state, for diagnostics and tests: 0 start, 1 size, 2 bytes handed out
   (bump pointer), 3 freed arenas kept, 4 arenas the previous allocator had to serve,
   5 bytes prefaulted, 6 whether the populate thread runs. */
static size_t mrc_arena_stat(int which) {
    size_t out;
    pthread_mutex_lock(&mrc_arena_lock);
    switch (which) {
        case 0: out = (size_t)mrc_region; break;
        case 1: out = mrc_region_size; break;
        case 2: out = mrc_region_used; break;
        case 3: out = mrc_nfree; break;
        case 4: out = mrc_fallbacks; break;
        case 5: out = __atomic_load_n(&mrc_populated, __ATOMIC_ACQUIRE); break;
        default: out = (size_t)__atomic_load_n(&mrc_prefaulting, __ATOMIC_ACQUIRE);
    }
    pthread_mutex_unlock(&mrc_arena_lock);
    return out;
}
#else
/* not Linux, or no transparent huge pages in its headers: never installed */
static int mrc_arena_install(size_t size, size_t align) { return -1; }
static size_t mrc_arena_stat(int which) { return 0; }
static int mrc_can_prefault(void) { return 0; }
#endif

#endif
