package dev.elfen.policy;

/**
 * A policy and its parameters (the Java mirror of Rust's {@code PolicyConfig}).
 *
 * @param kind which policy
 * @param budgetNs co-running budget per period, ns (unsigned; budget policies only)
 * @param refIpc dynamic refresh: the request lane's IPC when it runs alone, or {@code null} (no scaling)
 * @param maxBudgetRatio dynamic refresh: the budget scale is clamped to {@code [1, maxBudgetRatio]}
 */
public record PolicyConfig(PolicyKind kind, long budgetNs, Double refIpc, double maxBudgetRatio) {
    /** Default cap on dynamic refresh's budget scaling. */
    public static final double DEFAULT_MAX_BUDGET_RATIO = 4.0;

    /** A policy without a budget. */
    public static PolicyConfig simple(PolicyKind kind) {
        return new PolicyConfig(kind, 0, null, DEFAULT_MAX_BUDGET_RATIO);
    }

    /** A policy with a co-running budget of {@code budgetNs}. */
    public static PolicyConfig budget(PolicyKind kind, long budgetNs) {
        return new PolicyConfig(kind, budgetNs, null, DEFAULT_MAX_BUDGET_RATIO);
    }

    /** This config with a reference IPC. */
    public PolicyConfig withRefIpc(Double ipc) {
        return new PolicyConfig(kind, budgetNs, ipc, maxBudgetRatio);
    }

    /** This config with another cap on the budget scale. */
    public PolicyConfig withMaxBudgetRatio(double r) {
        return new PolicyConfig(kind, budgetNs, refIpc, r);
    }

    /** Checks the parameters; throws {@link IllegalArgumentException} with the Rust side's message. */
    public void validate() {
        if (refIpc != null && !(Double.isFinite(refIpc) && refIpc > 0.0)) {
            throw new IllegalArgumentException("policy.ref_ipc must be a positive finite number, got " + refIpc);
        }
        if (!(Double.isFinite(maxBudgetRatio) && maxBudgetRatio >= 1.0)) {
            throw new IllegalArgumentException("policy.max_budget_ratio must be finite and >= 1, got " + maxBudgetRatio);
        }
    }

    /**
     * The budget that applies now: {@code budgetNs}, scaled for dynamic refresh
     * by {@code ref_ipc / (ref_ipc - lc_ipc)} clamped to {@code [1, maxBudgetRatio]}
     * when both IPCs are known (Figure 9d lines 7-8).
     */
    public long effectiveBudgetNs(boolean hasLcIpc, double lcIpc) {
        if (kind != PolicyKind.DYNAMIC_REFRESH || refIpc == null || !hasLcIpc) {
            return budgetNs;
        }
        double ref = refIpc;
        double ratio;
        if (!Double.isFinite(lcIpc) || lcIpc < 0.0) {
            ratio = 1.0;
        } else if (lcIpc >= ref) {
            ratio = maxBudgetRatio;
        } else {
            ratio = Math.clamp(ref / (ref - lcIpc), 1.0, maxBudgetRatio);
        }
        return doubleToU64(u64ToDouble(budgetNs) * ratio);
    }

    /** Rust's {@code u64 as f64} (round to nearest). */
    static double u64ToDouble(long v) {
        if (v >= 0) {
            return (double) v;
        }
        return (double) ((v >>> 1) | (v & 1)) * 2.0;
    }

    /** Rust's {@code f64 as u64} (truncating, saturating, NaN to 0). */
    static long doubleToU64(double d) {
        if (!(d > 0)) {
            return 0;
        }
        if (d >= 18446744073709551616.0) {
            return -1L;
        }
        if (d < 9223372036854775808.0) {
            return (long) d;
        }
        return (long) (d - 9223372036854775808.0) ^ Long.MIN_VALUE;
    }
}
