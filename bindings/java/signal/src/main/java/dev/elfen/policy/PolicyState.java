package dev.elfen.policy;

/**
 * A batch lane's policy state (Figure 9's per-CPU variables).
 *
 * @param status {@code lane_status}
 * @param startNs {@code start_stamp}: when the current co-running budget started (ns, unsigned)
 * @param lastRequest {@code last_request}: the request the current budget was granted for
 */
public record PolicyState(LaneStatus status, long startNs, long lastRequest) {
    /** The initial state: NORMAL, 0, 0. */
    public static final PolicyState INITIAL = new PolicyState(LaneStatus.NORMAL, 0, 0);
}
