package dev.elfen;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.util.Locale;

/**
 * The few C library calls the binding needs, as FFM downcalls: {@code
 * syscall(SYS_futex, ...)} and {@code syscall(SYS_gettid)} (through libc's
 * {@code syscall}, with the x86-64 and aarch64 numbers), {@code kill(pid, 0)},
 * {@code clock_gettime(CLOCK_MONOTONIC)}, {@code sched_getaffinity} /
 * {@code sched_setaffinity}, {@code strerror}, {@code geteuid}, and the
 * System V shared-memory calls of the batch segment ({@code shmget},
 * {@code shmat}, {@code shmdt}, {@code shmctl}; {@link BatchSegment}).
 *
 * <p>Only Linux on x86-64 or aarch64: {@link #requireSupported()} says so
 * otherwise. Every variadic argument of {@code syscall} is passed as a
 * 64-bit integer or a pointer, so no register carries undefined upper bits.
 */
final class Native {
    private Native() {}

    static final String OS = System.getProperty("os.name", "?");
    static final String ARCH = System.getProperty("os.arch", "?");
    static final boolean SUPPORTED;
    static final long SYS_FUTEX;
    static final long SYS_GETTID;

    static final long FUTEX_WAIT = 0;
    static final long FUTEX_WAKE = 1;
    static final int CLOCK_MONOTONIC = 1;
    static final int EPERM = 1;
    /** Bytes of the CPU mask passed to sched_*affinity (8192 CPUs). */
    static final int CPU_MASK_BYTES = 1024;

    static final StructLayout TIMESPEC = MemoryLayout.structLayout(
            JAVA_LONG.withName("tv_sec"), JAVA_LONG.withName("tv_nsec"));

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO =
            CAPTURE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

    private static final MethodHandle SYSCALL6; // long syscall(long, ptr, long, long, ptr, ptr, long)
    private static final MethodHandle SYSCALL0; // long syscall(long)
    private static final MethodHandle KILL; // int kill(int, int), errno captured
    private static final MethodHandle CLOCK_GETTIME; // int clock_gettime(int, ptr)
    private static final MethodHandle GETAFFINITY; // int sched_getaffinity(int, long, ptr), errno
    private static final MethodHandle SETAFFINITY; // int sched_setaffinity(int, long, ptr), errno
    private static final MethodHandle STRERROR; // char *strerror(int)
    private static final MethodHandle GETEUID; // uid_t geteuid(void)
    private static final MethodHandle GETPWUID; // struct passwd *getpwuid(uid_t)
    private static final MethodHandle GETGRGID; // struct group *getgrgid(gid_t)
    private static final MethodHandle SHMGET; // int shmget(key_t, size_t, int), errno
    private static final MethodHandle SHMAT; // void *shmat(int, const void *, int), errno
    private static final MethodHandle SHMDT; // int shmdt(const void *)
    private static final MethodHandle SHMCTL; // int shmctl(int, int, struct shmid_ds *), errno

    static {
        String arch = ARCH.toLowerCase(Locale.ROOT);
        boolean linux = OS.toLowerCase(Locale.ROOT).startsWith("linux");
        if (linux && (arch.equals("amd64") || arch.equals("x86_64"))) {
            SYS_FUTEX = 202;
            SYS_GETTID = 186;
            SUPPORTED = true;
        } else if (linux && arch.equals("aarch64")) {
            SYS_FUTEX = 98;
            SYS_GETTID = 178;
            SUPPORTED = true;
        } else {
            SYS_FUTEX = -1;
            SYS_GETTID = -1;
            SUPPORTED = false;
        }
        if (SUPPORTED) {
            Linker.Option errno = Linker.Option.captureCallState("errno");
            SYSCALL6 = handle("syscall", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, ADDRESS, JAVA_LONG,
                    JAVA_LONG, ADDRESS, ADDRESS, JAVA_LONG), Linker.Option.firstVariadicArg(1));
            SYSCALL0 = handle("syscall", FunctionDescriptor.of(JAVA_LONG, JAVA_LONG), Linker.Option.firstVariadicArg(1));
            KILL = handle("kill", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT), errno);
            CLOCK_GETTIME = handle("clock_gettime", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS));
            GETAFFINITY = handle("sched_getaffinity",
                    FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS), errno);
            SETAFFINITY = handle("sched_setaffinity",
                    FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS), errno);
            STRERROR = handle("strerror", FunctionDescriptor.of(ADDRESS, JAVA_INT));
            GETEUID = handle("geteuid", FunctionDescriptor.of(JAVA_INT));
            GETPWUID = handle("getpwuid", FunctionDescriptor.of(ADDRESS, JAVA_INT));
            GETGRGID = handle("getgrgid", FunctionDescriptor.of(ADDRESS, JAVA_INT));
            SHMGET = handle("shmget", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG, JAVA_INT), errno);
            SHMAT = handle("shmat", FunctionDescriptor.of(ADDRESS, JAVA_INT, ADDRESS, JAVA_INT), errno);
            SHMDT = handle("shmdt", FunctionDescriptor.of(JAVA_INT, ADDRESS));
            SHMCTL = handle("shmctl", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS), errno);
        } else {
            SYSCALL6 = SYSCALL0 = KILL = CLOCK_GETTIME = GETAFFINITY = SETAFFINITY = STRERROR = null;
            GETEUID = GETPWUID = GETGRGID = SHMGET = SHMAT = SHMDT = SHMCTL = null;
        }
    }

    @SuppressWarnings("restricted")
    private static MethodHandle handle(String name, FunctionDescriptor fd, Linker.Option... opts) {
        MemorySegment sym = LINKER.defaultLookup().find(name).orElseThrow(
                () -> new UnsatisfiedLinkError("the C library has no " + name));
        return LINKER.downcallHandle(sym, fd, opts);
    }

    /** Throws unless this OS and architecture are supported. */
    static void requireSupported() throws ElfenException {
        if (!SUPPORTED) {
            throw new ElfenException(ElfenException.Kind.UNSUPPORTED_PLATFORM, null,
                    "the elfen Java binding runs on Linux on x86-64 or aarch64 (it knows their futex and gettid"
                            + " syscall numbers); this is " + OS + " on " + ARCH);
        }
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(t);
    }

    /** The calling thread's kernel thread id. */
    static int gettid() {
        try {
            return (int) (long) SYSCALL0.invokeExact(SYS_GETTID);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * {@code FUTEX_WAIT} (shared) on the 4-byte word {@code word} while it holds
     * {@code val}, for at most {@code timeout} (a {@link #TIMESPEC}). Returns the
     * syscall's result; EAGAIN, EINTR and ETIMEDOUT are all fine for callers, who
     * re-check.
     */
    static long futexWait(MemorySegment word, int val, MemorySegment timeout) {
        try {
            return (long) SYSCALL6.invokeExact(SYS_FUTEX, word, FUTEX_WAIT, val & 0xFFFF_FFFFL, timeout,
                    MemorySegment.NULL, 0L);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** {@code FUTEX_WAKE} (shared) of every waiter on {@code word}; returns how many woke. */
    static long futexWakeAll(MemorySegment word) {
        try {
            return (long) SYSCALL6.invokeExact(SYS_FUTEX, word, FUTEX_WAKE, (long) Integer.MAX_VALUE,
                    MemorySegment.NULL, MemorySegment.NULL, 0L);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** Whether process or thread {@code id} exists ({@code kill(id, 0)}; EPERM counts as alive). */
    static boolean alive(int id) {
        if (id <= 0) {
            return false;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(CAPTURE);
            int r = (int) KILL.invokeExact(st, id, 0);
            return r == 0 || (int) ERRNO.get(st, 0L) == EPERM;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** CLOCK_MONOTONIC in nanoseconds, read by the C library. */
    static long monotonicNs() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ts = a.allocate(TIMESPEC);
            int r = (int) CLOCK_GETTIME.invokeExact(CLOCK_MONOTONIC, ts);
            if (r != 0) {
                throw new IllegalStateException("clock_gettime(CLOCK_MONOTONIC) failed");
            }
            return ts.get(JAVA_LONG, 0) * 1_000_000_000L + ts.get(JAVA_LONG, 8);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** The C library's text for errno {@code e}. */
    @SuppressWarnings("restricted")
    static String strerror(int e) {
        try {
            MemorySegment s = (MemorySegment) STRERROR.invokeExact(e);
            return s.equals(MemorySegment.NULL) ? "errno " + e : s.reinterpret(1024).getString(0);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** This process's effective uid. */
    static int geteuid() {
        try {
            return (int) GETEUID.invokeExact();
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * The name of user {@code uid} ({@code getpwuid}: {@code pw_name} is the
     * first member of {@code struct passwd}), or null.
     */
    static synchronized String userName(int uid) {
        try {
            return firstString((MemorySegment) GETPWUID.invokeExact(uid));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** The name of group {@code gid} ({@code getgrgid}: {@code gr_name} comes first), or null. */
    static synchronized String groupName(int gid) {
        try {
            return firstString((MemorySegment) GETGRGID.invokeExact(gid));
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** The C string the first pointer of the struct at {@code entry} points to. */
    @SuppressWarnings("restricted")
    private static String firstString(MemorySegment entry) {
        if (entry.equals(MemorySegment.NULL)) {
            return null;
        }
        MemorySegment name = entry.reinterpret(ADDRESS.byteSize()).get(ADDRESS, 0);
        return name.equals(MemorySegment.NULL) ? null : name.reinterpret(4096).getString(0);
    }

    // ---- System V shared memory (the same constants on x86-64 and aarch64)

    static final int IPC_PRIVATE = 0;
    static final int IPC_CREAT = 01000;
    static final int IPC_EXCL = 02000;
    static final int IPC_RMID = 0;
    static final int IPC_SET = 1;
    static final int IPC_STAT = 2;
    static final int SHM_RDONLY = 010000;
    static final int EACCES = 13;
    static final int EINVAL = 22;
    static final int EIDRM = 43;
    /**
     * {@code struct shmid_ds} of 64-bit Linux (x86-64 and aarch64 share it):
     * its size and the offsets of the fields read or set.
     */
    static final int SHMID_DS_SIZE = 112;
    static final int SHM_PERM_UID = 4;
    static final int SHM_PERM_GID = 8;
    static final int SHM_PERM_CUID = 12;
    static final int SHM_PERM_MODE = 20;
    static final int SHM_SEGSZ = 48;
    static final int SHM_NATTCH = 88;

    /** {@code shmget(IPC_PRIVATE, size, IPC_CREAT | IPC_EXCL | mode)}: the new id, or -errno. */
    static int shmgetPrivate(long size, int mode) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(CAPTURE);
            int r = (int) SHMGET.invokeExact(st, IPC_PRIVATE, size, IPC_CREAT | IPC_EXCL | (mode & 0777));
            return r < 0 ? -(int) ERRNO.get(st, 0L) : r;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** {@code shmat(id, NULL, flags)}: the address, or -errno. */
    static long shmat(int id, boolean readOnly) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(CAPTURE);
            MemorySegment r = (MemorySegment) SHMAT.invokeExact(st, id, MemorySegment.NULL,
                    readOnly ? SHM_RDONLY : 0);
            return r.address() == -1L ? -(long) (int) ERRNO.get(st, 0L) : r.address();
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** {@code shmdt(addr)}. */
    static void shmdt(MemorySegment addr) {
        try {
            int unused = (int) SHMDT.invokeExact(addr);
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** {@code shmctl(id, cmd, buf)} with {@code buf} a {@link #SHMID_DS_SIZE}-byte buffer (or NULL): 0 or errno. */
    static int shmctl(int id, int cmd, MemorySegment buf) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(CAPTURE);
            int r = (int) SHMCTL.invokeExact(st, id, cmd, buf);
            return r < 0 ? (int) ERRNO.get(st, 0L) : 0;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /**
     * Reads thread {@code tid}'s CPU affinity into {@code mask}
     * ({@link #CPU_MASK_BYTES} bytes); returns 0 or an errno.
     */
    static int getAffinity(int tid, MemorySegment mask) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(CAPTURE);
            int r = (int) GETAFFINITY.invokeExact(st, tid, mask.byteSize(), mask);
            return r < 0 ? (int) ERRNO.get(st, 0L) : 0;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }

    /** Sets thread {@code tid}'s CPU affinity to {@code mask}; returns 0 or an errno. */
    static int setAffinity(int tid, MemorySegment mask) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment st = a.allocate(CAPTURE);
            int r = (int) SETAFFINITY.invokeExact(st, tid, mask.byteSize(), mask);
            return r < 0 ? (int) ERRNO.get(st, 0L) : 0;
        } catch (Throwable t) {
            throw rethrow(t);
        }
    }
}
