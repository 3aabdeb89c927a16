package dev.elfen;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Pins a thread to one CPU and restores its previous affinity (Rust's {@code PinGuard}). */
final class Pin {
    private final int tid;
    private final MemorySegment previous;

    private Pin(int tid, MemorySegment previous) {
        this.tid = tid;
        this.previous = previous;
    }

    /** Pins thread {@code tid} to {@code cpu}; returns the guard, or throws with the OS's reason. */
    static Pin to(int tid, int cpu, java.util.function.Function<String, ElfenException> error)
            throws ElfenException {
        if (cpu < 0 || cpu >= Native.CPU_MASK_BYTES * 8) {
            throw error.apply("cpu " + Integer.toUnsignedString(cpu) + " is beyond the "
                    + Native.CPU_MASK_BYTES * 8 + " CPUs a mask holds");
        }
        Arena arena = Arena.ofAuto();
        MemorySegment old = arena.allocate(Native.CPU_MASK_BYTES, 8);
        int e = Native.getAffinity(tid, old);
        if (e != 0) {
            throw error.apply("sched_getaffinity: " + Native.strerror(e));
        }
        MemorySegment mask = arena.allocate(Native.CPU_MASK_BYTES, 8);
        mask.set(ValueLayout.JAVA_BYTE, cpu / 8, (byte) (1 << (cpu % 8)));
        e = Native.setAffinity(tid, mask);
        if (e != 0) {
            throw error.apply("sched_setaffinity: " + Native.strerror(e)
                    + (e == 22 ? " (the CPU is offline or outside this process's cpuset)" : ""));
        }
        return new Pin(tid, old);
    }

    /** Restores the previous affinity (best effort). */
    void restore() {
        Native.setAffinity(tid, previous);
    }
}
