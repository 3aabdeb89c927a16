package dev.elfen;

/**
 * One lane's batch line, each field read once (no consistency across fields).
 *
 * @param attached batch threads attached
 * @param sleepers batch threads blocked in futex
 * @param napping batch threads napping
 * @param naps naps taken
 * @param wakes naps ended
 * @param runTicks page-clock ticks running batch code
 * @param corunTicks of those, ticks while the request lane was busy
 * @param lastChange page clock at the last nap or wake
 * @param slowChecks checks that took the slow path
 */
public record BatchLineSnapshot(int attached, int sleepers, int napping, long naps, long wakes, long runTicks,
        long corunTicks, long lastChange, long slowChecks) {}
