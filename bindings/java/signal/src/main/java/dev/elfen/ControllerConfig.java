package dev.elfen;

import java.util.Arrays;
import java.util.List;

/**
 * A controller line read consistently (under its seqlock).
 *
 * @param role {@link Layout.Role}
 * @param cpu logical CPU
 * @param policy policy id
 * @param nap nap backend id
 * @param budgetNs budget, ns
 * @param refIpcMilli reference IPC x 1000
 * @param partnerCount valid entries of the partners array (as stored, may exceed 6 in a corrupt line)
 * @param partnerArray the six partner slots
 * @param hybridSpinNs hybrid spin bound, ns (unsigned)
 * @param seq the (even) seqlock value the snapshot was taken at
 */
public record ControllerConfig(int role, int cpu, int policy, int nap, long budgetNs, int refIpcMilli,
        int partnerCount, int[] partnerArray, int hybridSpinNs, int seq) {
    /** Copies the partner slots. */
    public ControllerConfig {
        partnerArray = partnerArray.clone();
    }

    /** The partner lanes (the first {@code min(partnerCount, 6)} slots). */
    public List<Integer> partners() {
        int n = (int) Math.min(Integer.toUnsignedLong(partnerCount), Layout.MAX_PARTNERS);
        return Arrays.stream(partnerArray, 0, n).boxed().toList();
    }

    @Override
    public int[] partnerArray() {
        return partnerArray.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ControllerConfig c && role == c.role && cpu == c.cpu && policy == c.policy
                && nap == c.nap && budgetNs == c.budgetNs && refIpcMilli == c.refIpcMilli
                && partnerCount == c.partnerCount && Arrays.equals(partnerArray, c.partnerArray)
                && hybridSpinNs == c.hybridSpinNs && seq == c.seq;
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(partnerArray) * 31 + seq;
    }

    @Override
    public String toString() {
        return "ControllerConfig[role=" + role + ", cpu=" + cpu + ", policy=" + policy + ", nap=" + nap
                + ", budgetNs=" + budgetNs + ", refIpcMilli=" + refIpcMilli + ", partners=" + partners()
                + ", hybridSpinNs=" + Integer.toUnsignedString(hybridSpinNs) + ", seq=" + seq + "]";
    }
}
