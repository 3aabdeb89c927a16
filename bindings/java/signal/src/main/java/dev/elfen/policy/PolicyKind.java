package dev.elfen.policy;

import java.util.Locale;

/**
 * The policies. The numeric ids are the values stored in the signal page's
 * controller line; never renumber them (they equal Rust's {@code PolicyKind::id}).
 */
public enum PolicyKind {
    /** Always run (the naive co-run baseline). */
    UNMANAGED(0, "unmanaged"),
    /** Figure 9a: run only while the request lane is idle. */
    BORROW_IDLE(1, "borrow_idle"),
    /** Figure 9b: also co-run with the first request after an idle period for at most the budget. */
    FIXED_BUDGET(2, "fixed_budget"),
    /** Figure 9c: fixed budget whose budget restarts when a new request starts with an empty queue. */
    REFRESH_BUDGET(3, "refresh_budget"),
    /** Figure 9d: refresh budget scaled by {@code ref_ipc / (ref_ipc - lc_ipc)}. */
    DYNAMIC_REFRESH(4, "dynamic_refresh");

    private final int id;
    private final String label;

    PolicyKind(int id, String label) {
        this.id = id;
        this.label = label;
    }

    /** The id stored in the signal page's controller line. */
    public int id() {
        return id;
    }

    /** The snake_case name used in configs, on the command line and in JSON. */
    public String label() {
        return label;
    }

    /** The policy with signal-page id {@code id}, or {@code null}. */
    public static PolicyKind fromId(int id) {
        for (PolicyKind k : values()) {
            if (k.id == id) {
                return k;
            }
        }
        return null;
    }

    /** Parses a name ("borrow_idle", "Borrow-Idle", ...). */
    public static PolicyKind parse(String s) {
        String norm = s.trim().toLowerCase(Locale.ROOT).replace('-', '_');
        for (PolicyKind k : values()) {
            if (k.label.equals(norm)) {
                return k;
            }
        }
        throw new IllegalArgumentException("unknown policy \"" + s
                + "\": expected one of unmanaged, borrow_idle, fixed_budget, refresh_budget, dynamic_refresh");
    }

    /** Whether the policy spends a co-running budget. */
    public boolean usesBudget() {
        return this == FIXED_BUDGET || this == REFRESH_BUDGET || this == DYNAMIC_REFRESH;
    }

    @Override
    public String toString() {
        return label;
    }
}
