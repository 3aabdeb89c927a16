package dev.elfen;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.time.Duration;

/**
 * How a Java batch thread steps aside until its request lane changes
 * (protocol.md, "Batch side"): spin, futex or hybrid. Every nap returns when
 * the watched {@code state} differs from the value napped on, or the page's
 * control word differs from its value when the nap began; a nap taken
 * because the heartbeat was stale ({@link #napStale}) also returns when
 * {@code heartbeat} or {@code heartbeat_stale_ns} changes. Naps never
 * allocate or throw, and leave {@code sleepers} as they found it. One
 * napper serves one thread.
 */
final class Napper {
    /** How often a spinning nap re-reads header line 1 (in spins). */
    static final int CONTROL_EVERY = 4096;
    /** How often a hybrid nap's spin phase reads the clock (in spins). */
    static final int CLOCK_EVERY = 64;

    private final MemorySegment page;
    private final long stateOff;
    private final MemorySegment futexWord;
    private final MemorySegment batch;
    private final long sleepersOff;
    private final MemorySegment timespec;
    private NapBackend backend;
    private long hybridSpinNs;
    /** The current nap also ends on a change of the heartbeat or its bound ({@link #napStale}). */
    private boolean watchBeat;
    private long beat0;
    private long stale0;

    /**
     * A napper watching {@code state} at {@code stateOff} of {@code page} and
     * counting itself in {@code sleepers} at {@code sleepersOff} of {@code batch}.
     */
    Napper(MemorySegment page, long stateOff, MemorySegment batch, long sleepersOff, NapBackend backend,
            int hybridSpinNs, Duration futexTimeout) {
        this.page = page;
        this.stateOff = stateOff;
        // the futex word is the low (little-endian: first) half of state
        this.futexWord = page.asSlice(stateOff, 4);
        this.batch = batch;
        this.sleepersOff = sleepersOff;
        Duration t = futexTimeout.compareTo(Duration.ofNanos(100_000)) < 0 ? Duration.ofNanos(100_000)
                : futexTimeout.compareTo(BatchOptions.MAX_FUTEX_TIMEOUT) > 0 ? BatchOptions.MAX_FUTEX_TIMEOUT
                : futexTimeout;
        this.timespec = Arena.ofAuto().allocate(Native.TIMESPEC);
        timespec.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, t.getSeconds());
        timespec.set(java.lang.foreign.ValueLayout.JAVA_LONG, 8, (long) t.getNano());
        reconfigure(backend, hybridSpinNs);
    }

    /** Another backend or hybrid bound (a controller rewrite). */
    void reconfigure(NapBackend b, int spinNs) {
        this.backend = b;
        this.hybridSpinNs = Integer.toUnsignedLong(spinNs);
    }

    NapBackend backend() {
        return backend;
    }

    long hybridSpinNs() {
        return hybridSpinNs;
    }

    /** The futex timeout, ns. */
    long futexTimeoutNs() {
        return timespec.get(java.lang.foreign.ValueLayout.JAVA_LONG, 0) * 1_000_000_000L
                + timespec.get(java.lang.foreign.ValueLayout.JAVA_LONG, 8);
    }

    private boolean over(long napped, long control0) {
        return Mem.get64(page, stateOff) != napped || headerChanged(control0);
    }

    /** The control word changed or, for a stale-heartbeat nap, the controller beat or changed the bound. */
    private boolean headerChanged(long control0) {
        return Mem.get64(page, Layout.Header.CONTROL) != control0
                || watchBeat && (Mem.get64(page, Layout.Header.HEARTBEAT) != beat0
                        || Mem.get64(page, Layout.Header.HEARTBEAT_STALE_NS) != stale0);
    }

    /** Naps until {@code state != napped} or {@code control != control0}. */
    void nap(long napped, long control0) {
        watchBeat = false;
        napOn(napped, control0);
    }

    /**
     * The heartbeat is stale: naps until {@code state != napped},
     * {@code control != control0}, or the heartbeat or its bound differ from
     * {@code beat0} / {@code staleNs0}.
     */
    void napStale(long napped, long control0, long beat0, long staleNs0) {
        this.watchBeat = true;
        this.beat0 = beat0;
        this.stale0 = staleNs0;
        napOn(napped, control0);
        this.watchBeat = false;
    }

    private void napOn(long napped, long control0) {
        switch (backend) {
            case SPIN -> spin(napped, control0, false, 0);
            case FUTEX -> futex(napped, control0);
            case HYBRID -> {
                long deadline = System.nanoTime() + hybridSpinNs;
                if (!spin(napped, control0, true, deadline)) {
                    futex(napped, control0);
                }
            }
        }
    }

    /**
     * The spin nap: reads {@code state} every iteration and header line 1
     * every {@link #CONTROL_EVERY}, nothing else. Returns true when the nap is
     * over, false when {@code deadline} (System.nanoTime) passed.
     */
    private boolean spin(long napped, long control0, boolean bounded, long deadline) {
        int i = 0;
        while (true) {
            if (Mem.get64(page, stateOff) != napped) {
                return true;
            }
            i++;
            if (i % CONTROL_EVERY == 0 && headerChanged(control0)) {
                return true;
            }
            if (bounded && i % CLOCK_EVERY == 0 && System.nanoTime() - deadline >= 0) {
                return false;
            }
            Thread.onSpinWait();
        }
    }

    /**
     * The futex nap: register in {@code sleepers}, full fence, re-read
     * {@code state}; block only if it still holds the napped value. The LC
     * stores {@code state}, fences, then reads {@code sleepers}: either it sees
     * us and wakes us, or we see its store and do not block. The timeout
     * bounds how late a change of header line 1 is noticed.
     */
    private void futex(long napped, long control0) {
        while (true) {
            Mem.add32(batch, sleepersOff, 1);
            VarHandle.fullFence();
            boolean over = over(napped, control0);
            if (!over) {
                Native.futexWait(futexWord, (int) napped, timespec);
            }
            Mem.add32(batch, sleepersOff, -1);
            if (over || over(napped, control0)) {
                return;
            }
            // timeout, spurious wake, or a queue-length-only change: register again
        }
    }
}
