package dev.elfen;

/**
 * One lane's LC line, each field read once (no consistency across fields).
 *
 * @param state the {@link State} word
 * @param requestId id of the running request
 * @param busySince page clock at its begin
 * @param busyTicks page-clock ticks in completed requests
 * @param requests completed requests
 * @param lcTid the attached LC thread (0 = none)
 */
public record LcLineSnapshot(long state, long requestId, long busySince, long busyTicks, long requests,
        int lcTid) {}
