package dev.elfen;

import java.time.Duration;

/**
 * How a batch thread attaches.
 *
 * @param pin pin the calling thread to the batch lane's CPU (default true); the
 *     previous affinity is restored at {@link BatchThread#close()}
 * @param nap the nap backend, or {@code null} (default): the controller line's {@code nap}
 * @param futexTimeout how long one futex nap blocks before re-reading the control word
 *     (default 10 ms, clamped to 100 us..1 s)
 */
public record BatchOptions(boolean pin, NapChoice nap, Duration futexTimeout) {
    /** Default {@link #futexTimeout}. */
    public static final Duration DEFAULT_FUTEX_TIMEOUT = Duration.ofMillis(10);
    /** The longest futex timeout. */
    public static final Duration MAX_FUTEX_TIMEOUT = Duration.ofSeconds(1);

    /** Pinned, the controller's nap backend, 10 ms futex timeout. */
    public static BatchOptions defaults() {
        return new BatchOptions(true, null, DEFAULT_FUTEX_TIMEOUT);
    }

    /** These options with {@code pin}. */
    public BatchOptions withPin(boolean p) {
        return new BatchOptions(p, nap, futexTimeout);
    }

    /** These options with a nap backend. */
    public BatchOptions withNap(NapChoice n) {
        return new BatchOptions(pin, n, futexTimeout);
    }

    /** These options with a futex timeout. */
    public BatchOptions withFutexTimeout(Duration t) {
        return new BatchOptions(pin, nap, t);
    }
}
