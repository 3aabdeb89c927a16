package dev.elfen;

/**
 * What a batch thread's slow path does, header line 1 considered: the kill
 * switch's bits and the heartbeat fail-safe (the Java mirror of Rust's
 * {@code elfen_shm::BatchMode} and {@code batch_mode}; docs/protocol.md,
 * "Kill switch and heartbeat").
 */
public enum BatchMode {
    /** Run the lane's policy on the request lane's state. */
    MANAGED,
    /** Never nap (kill switch in mode unmanaged). */
    UNMANAGED,
    /** Nap until the control word changes (kill switch in mode paused). */
    KILLED,
    /**
     * Nap until a fresh heartbeat: the controller stopped beating, so the LC
     * lines it writes may be frozen.
     */
    STALE;

    /** Whether batch threads nap whatever the request lane does. */
    public boolean paused() {
        return this == KILLED || this == STALE;
    }

    /**
     * Whether a heartbeat is stale: the check is on ({@code staleNs} != 0)
     * and the controller never beat ({@code heartbeat} = 0) or its last beat
     * is more than {@code staleNs} old at page-clock time {@code now} (a beat
     * after {@code now} has age 0). All values are unsigned.
     */
    public static boolean heartbeatStale(long heartbeat, long staleNs, long now, long ticksPerSec) {
        if (staleNs == 0) {
            return false;
        }
        if (heartbeat == 0) {
            return true;
        }
        long ageNs = Page.ticksToNs(PageClock.since(now, heartbeat), ticksPerSec);
        return Long.compareUnsigned(ageNs, staleNs) > 0;
    }

    /**
     * The mode of header line 1 read at page-clock time {@code now}:
     * {@code KILL} first, then a stale heartbeat (it acts as {@code KILL},
     * so it also wins over {@code UNMANAGED}), then {@code UNMANAGED}.
     */
    public static BatchMode of(long control, long heartbeat, long staleNs, long now, long ticksPerSec) {
        if ((control & Layout.Control.KILL) != 0) {
            return KILLED;
        }
        if (heartbeatStale(heartbeat, staleNs, now, ticksPerSec)) {
            return STALE;
        }
        return (control & Layout.Control.UNMANAGED) != 0 ? UNMANAGED : MANAGED;
    }
}
