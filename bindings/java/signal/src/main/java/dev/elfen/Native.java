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
 * {@code sched_setaffinity} and {@code strerror}.
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
        } else {
            SYSCALL6 = SYSCALL0 = KILL = CLOCK_GETTIME = GETAFFINITY = SETAFFINITY = STRERROR = null;
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
