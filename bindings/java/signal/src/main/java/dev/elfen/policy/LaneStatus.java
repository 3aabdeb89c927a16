package dev.elfen.policy;

/** Figure 9b's per-lane {@code lane_status}. */
public enum LaneStatus {
    /** No budget left: nap whenever the request lane is busy. */
    NORMAL,
    /** The request lane went idle with an empty queue: the next request may be co-run for a budget. */
    NEW_PERIOD,
    /** Co-running with a request since {@code startNs}. */
    CO_RUNNING
}
