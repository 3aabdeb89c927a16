package dev.elfen;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The batch region's memory: a System V shared-memory segment (the Java
 * mirror of Rust's {@code elfen_shm::segment}). Its size is fixed at
 * creation: no process can shrink or grow it under another, so a mapping of
 * it never faults, whatever a batch user does. The creator marks it for
 * removal as soon as it has attached it, so it is freed with the last
 * process that has it attached. The page header's {@code batch_shmid}
 * names it.
 */
final class BatchSegment {
    private BatchSegment() {}

    /** What {@code IPC_STAT} says about a segment. */
    record Stat(long size, int uid, int gid, int cuid, int mode, long attached, boolean markedForRemoval) {}

    /**
     * {@code IPC_STAT} of segment {@code id}: the stat, or throws with the
     * errno in {@link ErrnoException#errno}.
     */
    static Stat stat(int id) throws ErrnoException {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ds = a.allocate(Native.SHMID_DS_SIZE, 8);
            int e = Native.shmctl(id, Native.IPC_STAT, ds);
            if (e != 0) {
                throw new ErrnoException(e);
            }
            int mode = ds.get(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_MODE);
            return new Stat(ds.get(ValueLayout.JAVA_LONG_UNALIGNED, Native.SHM_SEGSZ),
                    ds.get(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_UID),
                    ds.get(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_GID),
                    ds.get(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_CUID), mode & 0777,
                    ds.get(ValueLayout.JAVA_LONG_UNALIGNED, Native.SHM_NATTCH), (mode & 01000) != 0);
        }
    }

    /**
     * Attaches segment {@code id} whole into {@code arena} (detached when the
     * arena closes): read-write or read-only.
     */
    @SuppressWarnings("restricted")
    static MemorySegment attach(int id, boolean writable, Arena arena) throws ErrnoException {
        long addr = Native.shmat(id, !writable);
        if (addr < 0) {
            throw new ErrnoException((int) -addr);
        }
        // what is attached cannot change size any more: its size from a stat made now
        Stat s;
        try {
            s = stat(id);
        } catch (ErrnoException e) {
            Native.shmdt(MemorySegment.ofAddress(addr));
            throw e;
        }
        MemorySegment m = MemorySegment.ofAddress(addr).reinterpret(s.size(), arena, Native::shmdt);
        // a read-only attachment refuses stores in Java (the OS would fault)
        return writable ? m : m.asReadOnly();
    }

    /**
     * Creates a private segment of {@code size} bytes with permission bits
     * {@code mode} (and group {@code gid}, or {@code null}), attaches it
     * read-write into {@code arena} and marks it for removal. Returns its id
     * and the attached memory.
     */
    static Created create(long size, int mode, Integer gid, Arena arena) throws ErrnoException {
        int id = Native.shmgetPrivate(size, mode);
        if (id < 0) {
            throw new ErrnoException(-id);
        }
        MemorySegment m;
        try {
            m = attach(id, true, arena);
        } finally {
            // attached (or failed): from here on the kernel frees it with its last user
            Native.shmctl(id, Native.IPC_RMID, MemorySegment.NULL);
        }
        if (gid != null) {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment ds = a.allocate(Native.SHMID_DS_SIZE, 8);
                int e = Native.shmctl(id, Native.IPC_STAT, ds);
                if (e == 0) {
                    ds.set(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_GID, gid);
                    int old = ds.get(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_MODE);
                    ds.set(ValueLayout.JAVA_INT_UNALIGNED, Native.SHM_PERM_MODE, (old & ~0777) | (mode & 0777));
                    e = Native.shmctl(id, Native.IPC_SET, ds);
                }
                if (e != 0) {
                    throw new ErrnoException(e);
                }
            }
        }
        return new Created(id, m);
    }

    /** A created segment: its id and its attachment. */
    record Created(int id, MemorySegment memory) {}

    /** Whether segment {@code id} exists (in this IPC namespace). */
    static boolean exists(int id) {
        try {
            stat(id);
            return true;
        } catch (ErrnoException e) {
            return e.errno == Native.EACCES;
        }
    }

    /** A failed call's errno. */
    static final class ErrnoException extends Exception {
        private static final long serialVersionUID = 1L;
        final int errno;

        ErrnoException(int errno) {
            super(Native.strerror(errno));
            this.errno = errno;
        }
    }
}
