package dev.elfen.policy;

/**
 * The signals a batch thread observes of its partner request lane at one check.
 *
 * @param lcBusy a request is executing on the request lane
 * @param queueLen requests waiting (unsigned), not counting the running one
 * @param runningRequest identifies the running request (e.g. the begin sequence); meaningless when idle
 * @param nowNs time of the check, ns on any monotonic clock (unsigned)
 * @param hasLcIpc whether {@code lcIpc} holds a sample (hardware counters exist)
 * @param lcIpc the request lane's IPC over the last sample, when {@code hasLcIpc}
 */
public record Observation(boolean lcBusy, int queueLen, long runningRequest, long nowNs, boolean hasLcIpc,
        double lcIpc) {
    /** An idle request lane with an empty queue at {@code nowNs}. */
    public static Observation idle(long nowNs) {
        return new Observation(false, 0, 0, nowNs, false, 0);
    }

    /** An idle request lane with {@code queueLen} waiting. */
    public static Observation idle(int queueLen, long nowNs) {
        return new Observation(false, queueLen, 0, nowNs, false, 0);
    }

    /** Request {@code request} running with {@code queueLen} waiting. */
    public static Observation busy(long request, int queueLen, long nowNs) {
        return new Observation(true, queueLen, request, nowNs, false, 0);
    }

    /** This observation with an IPC sample. */
    public Observation withLcIpc(double ipc) {
        return new Observation(lcBusy, queueLen, runningRequest, nowNs, true, ipc);
    }
}
