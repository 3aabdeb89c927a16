package dev.elfen;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * Little-endian, aligned var handles on mapped segments: every access to
 * shared memory goes through these, with the ordering the protocol asks for
 * ({@code getOpaque}/{@code setOpaque} for Rust's {@code Relaxed},
 * {@code getAcquire}/{@code setRelease}, volatile {@code getAndAdd} and CAS for
 * {@code SeqCst}/{@code AcqRel} read-modify-writes).
 *
 * <p>Coordinates: {@code (MemorySegment segment, long offset)}. Both mappings
 * start page-aligned, and every field is naturally aligned, so all access
 * modes (atomic ones included) are available.
 */
final class Mem {
    private Mem() {}

    static final ValueLayout.OfLong U64_LAYOUT = ValueLayout.JAVA_LONG.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfInt U32_LAYOUT = ValueLayout.JAVA_INT.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** A u64 field. */
    static final VarHandle U64 = U64_LAYOUT.varHandle().withInvokeExactBehavior();
    /** A u32 field. */
    static final VarHandle U32 = U32_LAYOUT.varHandle().withInvokeExactBehavior();

    static long get64(MemorySegment s, long off) {
        return (long) U64.getOpaque(s, off);
    }

    static int get32(MemorySegment s, long off) {
        return (int) U32.getOpaque(s, off);
    }

    static void set64(MemorySegment s, long off, long v) {
        U64.setOpaque(s, off, v);
    }

    static void set32(MemorySegment s, long off, int v) {
        U32.setOpaque(s, off, v);
    }

    static long acquire64(MemorySegment s, long off) {
        return (long) U64.getAcquire(s, off);
    }

    static int acquire32(MemorySegment s, long off) {
        return (int) U32.getAcquire(s, off);
    }

    static void release64(MemorySegment s, long off, long v) {
        U64.setRelease(s, off, v);
    }

    static void release32(MemorySegment s, long off, int v) {
        U32.setRelease(s, off, v);
    }

    /** Atomic add on a u64, returning the previous value (no ordering beyond atomicity needed). */
    static long add64(MemorySegment s, long off, long d) {
        return (long) U64.getAndAdd(s, off, d);
    }

    /** Atomic add on a u32 (sequentially consistent), returning the previous value. */
    static int add32(MemorySegment s, long off, int d) {
        return (int) U32.getAndAdd(s, off, d);
    }
}
