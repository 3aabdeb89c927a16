package dev.elfen;

/**
 * Packing of the LC line's {@code state} word, the word every batch check loads.
 *
 * <pre>
 * bit  0      busy: a request is running on the request lane
 * bits 1..31  begin sequence: +1 at every request_begin (wraps at 2^31)
 * bits 32..63 queue length (saturates at 2^32 - 2)
 * </pre>
 *
 * {@link #NEVER} (all ones) is never stored, so a batch thread that must take
 * the slow path at every check compares against it. The low 32 bits change at
 * every request begin and end: they are the futex word.
 */
public final class State {
    private State() {}

    /** The busy bit. */
    public static final long BUSY = 1;
    private static final long SEQ_MASK = 0x7FFF_FFFFL;
    /** The largest queue length a state word holds (u32 max - 1, as an unsigned int). */
    public static final int MAX_QUEUE_LEN = 0xFFFF_FFFE;
    /** A value {@code state} never takes. */
    public static final long NEVER = -1L;

    /** Builds a state word; the queue length (unsigned) saturates at {@link #MAX_QUEUE_LEN}. */
    public static long pack(boolean busy, int seq, int queueLen) {
        int q = Integer.compareUnsigned(queueLen, MAX_QUEUE_LEN) > 0 ? MAX_QUEUE_LEN : queueLen;
        return (busy ? 1L : 0L) | ((seq & SEQ_MASK) << 1) | ((q & 0xFFFF_FFFFL) << 32);
    }

    /** Whether a request is running. */
    public static boolean busy(long s) {
        return (s & BUSY) != 0;
    }

    /** The begin sequence (31 bits). */
    public static int seq(long s) {
        return (int) ((s >>> 1) & SEQ_MASK);
    }

    /** The queue length (an unsigned int). */
    public static int queueLen(long s) {
        return (int) (s >>> 32);
    }

    /** The low half: the futex word. */
    public static int futexWord(long s) {
        return (int) s;
    }
}
