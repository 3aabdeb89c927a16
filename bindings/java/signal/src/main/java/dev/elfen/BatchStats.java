package dev.elfen;

/**
 * One batch thread's accounting so far (the batch line holds the per-lane sums).
 *
 * @param slowChecks checks that took the slow path
 * @param naps naps taken
 * @param wakes naps ended
 * @param runNs time running batch code (between naps), ns
 * @param corunNs of that, time run while the request lane was busy, ns
 * @param napNs time napping, ns
 * @param configRejects controller-line rewrites refused (unknown ids, unavailable backend)
 */
public record BatchStats(long slowChecks, long naps, long wakes, long runNs, long corunNs, long napNs,
        long configRejects) {}
