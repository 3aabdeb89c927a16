package dev.elfen;

import java.util.List;

/**
 * One lane of a page to create, or a controller line to write.
 *
 * @param cpu logical CPU id of the lane
 * @param role {@link Layout.Role}
 * @param partners partner lane indices: a request lane's batch lanes, a batch lane's one request lane
 * @param policy policy id ({@link dev.elfen.policy.PolicyKind#id()})
 * @param budgetNs co-running budget per period, ns
 * @param nap {@link Layout.Nap} backend id
 * @param hybridSpinNs hybrid nap spin bound, ns (unsigned)
 * @param refIpcMilli dynamic refresh reference IPC x 1000 (0 = none)
 */
public record LaneSpec(int cpu, int role, List<Integer> partners, int policy, long budgetNs, int nap,
        int hybridSpinNs, int refIpcMilli) {
    /** Copies {@code partners}. */
    public LaneSpec {
        partners = List.copyOf(partners);
    }

    /** This lane with another policy id. */
    public LaneSpec withPolicy(int p) {
        return new LaneSpec(cpu, role, partners, p, budgetNs, nap, hybridSpinNs, refIpcMilli);
    }

    /** This lane with another budget. */
    public LaneSpec withBudgetNs(long b) {
        return new LaneSpec(cpu, role, partners, policy, b, nap, hybridSpinNs, refIpcMilli);
    }

    /** This lane with another nap backend id. */
    public LaneSpec withNap(int n) {
        return new LaneSpec(cpu, role, partners, policy, budgetNs, n, hybridSpinNs, refIpcMilli);
    }

    /** This lane with another hybrid spin bound. */
    public LaneSpec withHybridSpinNs(int ns) {
        return new LaneSpec(cpu, role, partners, policy, budgetNs, nap, ns, refIpcMilli);
    }

    /** This lane with another reference IPC x 1000. */
    public LaneSpec withRefIpcMilli(int m) {
        return new LaneSpec(cpu, role, partners, policy, budgetNs, nap, hybridSpinNs, m);
    }
}
