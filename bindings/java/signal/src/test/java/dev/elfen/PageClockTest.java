package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The Java page clock is CLOCK_MONOTONIC: System.nanoTime against a native clock_gettime. */
class PageClockTest {
    @Test
    void nanoTimeIsClockMonotonic() {
        // A System.nanoTime() reading taken between two native
        // clock_gettime(CLOCK_MONOTONIC) readings lies between them if and only
        // if both read the same clock (another clock's epoch is off by far more
        // than the nanoseconds between the calls). Not a speed check: the
        // bracket holds however slow the calls are.
        for (int i = 0; i < 1000; i++) {
            long a = PageClock.nativeMonotonicNs();
            long j = PageClock.now();
            long b = PageClock.nativeMonotonicNs();
            assertTrue(a <= j && j <= b, "nanoTime " + j + " outside the native CLOCK_MONOTONIC bracket [" + a
                    + ", " + b + "] (round " + i + ")");
        }
    }

    @Test
    void tickConversionsOfAMonotonicPage() {
        assertTrue(PageClock.TICKS_PER_SEC == 1_000_000_000L);
        assertTrue(PageClock.since(10, 3) == 7 && PageClock.since(3, 10) == 0);
        assertTrue(PageClock.since(-1L, 1) == -2L, "unsigned: u64::MAX - 1");
    }
}
