package dev.elfen;

/**
 * The page clock as Java sees it.
 *
 * <p>A page's timestamps ({@code busy_since}, {@code busy_ticks},
 * {@code run_ticks}, {@code last_change}, {@code heartbeat}) count either TSC
 * ticks ({@link Layout.Clock#TSC}, what Rust and C choose on machines with an
 * invariant TSC) or CLOCK_MONOTONIC nanoseconds
 * ({@link Layout.Clock#MONOTONIC_NS}). Java cannot execute {@code rdtsc}, and
 * a TSC value derived from another clock would put absolute stamps such as
 * {@code busy_since} on another epoch than the Rust and C writers'. So:
 *
 * <ul>
 *   <li>pages created from Java are always MONOTONIC_NS, and
 *   <li>a Java writer (LC, batch or controller access) refuses a TSC page at
 *       attach with {@link ElfenException.Kind#CLOCK_UNSUPPORTED}, before it
 *       writes anything; observers may read any page.
 * </ul>
 *
 * <p>{@link System#nanoTime()} is CLOCK_MONOTONIC on Linux with HotSpot (the
 * JDK's {@code os::javaTimeNanos}); {@code PageClockTest} checks it against a
 * native {@code clock_gettime(CLOCK_MONOTONIC)} reading.
 */
public final class PageClock {
    private PageClock() {}

    /** Ticks per second of the clock Java writes: 10^9. */
    public static final long TICKS_PER_SEC = 1_000_000_000L;

    /** Now, in page-clock ticks of a MONOTONIC_NS page (CLOCK_MONOTONIC ns). */
    public static long now() {
        return System.nanoTime();
    }

    /** CLOCK_MONOTONIC read through the C library (for checks, not the hot path). */
    public static long nativeMonotonicNs() {
        return Native.monotonicNs();
    }

    /** {@code a - b} for page-clock values, 0 when {@code b} is later (Rust's saturating_sub on u64). */
    static long since(long a, long b) {
        return Long.compareUnsigned(a, b) > 0 ? a - b : 0;
    }
}
