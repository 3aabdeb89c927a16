package dev.elfen.policy;

import static dev.elfen.policy.Decision.NAP;
import static dev.elfen.policy.Decision.RUN;
import static dev.elfen.policy.LaneStatus.CO_RUNNING;
import static dev.elfen.policy.LaneStatus.NEW_PERIOD;
import static dev.elfen.policy.LaneStatus.NORMAL;
import static dev.elfen.policy.PolicyKind.BORROW_IDLE;
import static dev.elfen.policy.PolicyKind.DYNAMIC_REFRESH;
import static dev.elfen.policy.PolicyKind.FIXED_BUDGET;
import static dev.elfen.policy.PolicyKind.REFRESH_BUDGET;
import static dev.elfen.policy.PolicyKind.UNMANAGED;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Walks every transition of the Elfen paper's Figure 9 (a-d), row for row the
 * table of crates/policy/tests/figure9.rs, then the budget invariants over
 * long random traces (the same generator and seeds).
 */
class Figure9Test {
    static final long B = 1_000; // budget (ns) used throughout

    static PolicyState st(LaneStatus s, long start, long last) {
        return new PolicyState(s, start, last);
    }

    static Observation idle(int q, long now) {
        return Observation.idle(q, now);
    }

    static Observation busy(long req, int q, long now) {
        return Observation.busy(req, q, now);
    }

    record Row(String name, PolicyKind kind, PolicyState before, Observation obs, Decision d, PolicyState after) {}

    static List<Row> rows() {
        PolicyState n = st(NORMAL, 0, 0);
        return List.of(
            // ---- 9a borrow idle: run iff the request lane is idle; no state.
            new Row("9a idle", BORROW_IDLE, n, idle(0, 5), RUN, n),
            new Row("9a idle, queue", BORROW_IDLE, n, idle(3, 5), RUN, n),
            new Row("9a busy", BORROW_IDLE, n, busy(1, 0, 5), NAP, n),
            new Row("9a busy, queue", BORROW_IDLE, n, busy(1, 2, 5), NAP, n),
            // ---- unmanaged (baseline): always run.
            new Row("naive busy", UNMANAGED, n, busy(1, 9, 5), RUN, n),
            new Row("naive idle", UNMANAGED, n, idle(0, 5), RUN, n),
            // ---- 9b fixed budget.
            new Row("9b NORMAL idle q=0", FIXED_BUDGET, n, idle(0, 7), RUN, st(NEW_PERIOD, 0, 0)),
            new Row("9b NEW_PERIOD idle q=0", FIXED_BUDGET, st(NEW_PERIOD, 0, 0), idle(0, 7), RUN, st(NEW_PERIOD, 0, 0)),
            new Row("9b CO_RUNNING idle q=0", FIXED_BUDGET, st(CO_RUNNING, 3, 0), idle(0, 7), RUN, st(NEW_PERIOD, 3, 0)),
            new Row("9b NORMAL idle q>0", FIXED_BUDGET, n, idle(2, 7), RUN, n),
            new Row("9b NEW_PERIOD idle q>0", FIXED_BUDGET, st(NEW_PERIOD, 0, 0), idle(2, 7), RUN, st(NEW_PERIOD, 0, 0)),
            new Row("9b CO_RUNNING idle q>0", FIXED_BUDGET, st(CO_RUNNING, 3, 0), idle(2, 7), RUN, st(CO_RUNNING, 3, 0)),
            new Row("9b NORMAL busy", FIXED_BUDGET, n, busy(1, 0, 7), NAP, n),
            new Row("9b NEW_PERIOD busy", FIXED_BUDGET, st(NEW_PERIOD, 0, 0), busy(1, 0, 70), RUN, st(CO_RUNNING, 70, 0)),
            new Row("9b CO_RUNNING in budget", FIXED_BUDGET, st(CO_RUNNING, 70, 0), busy(1, 0, 70 + B - 1), RUN,
                    st(CO_RUNNING, 70, 0)),
            new Row("9b CO_RUNNING expired", FIXED_BUDGET, st(CO_RUNNING, 70, 0), busy(1, 0, 70 + B), NAP,
                    st(NORMAL, 70, 0)),
            new Row("9b CO_RUNNING new request", FIXED_BUDGET, st(CO_RUNNING, 70, 0), busy(2, 0, 70 + B), NAP,
                    st(NORMAL, 70, 0)),
            // ---- 9c refresh budget.
            new Row("9c NEW_PERIOD busy remembers request", REFRESH_BUDGET, st(NEW_PERIOD, 0, 0), busy(5, 0, 70), RUN,
                    st(CO_RUNNING, 70, 5)),
            new Row("9c same request, in budget", REFRESH_BUDGET, st(CO_RUNNING, 70, 5), busy(5, 0, 100), RUN,
                    st(CO_RUNNING, 70, 5)),
            new Row("9c same request, expired", REFRESH_BUDGET, st(CO_RUNNING, 70, 5), busy(5, 0, 70 + B), NAP,
                    st(NORMAL, 70, 5)),
            new Row("9c new request q=0 refreshes", REFRESH_BUDGET, st(CO_RUNNING, 70, 5), busy(6, 0, 70 + B), RUN,
                    st(CO_RUNNING, 70 + B, 6)),
            new Row("9c new request q>0 no refresh", REFRESH_BUDGET, st(CO_RUNNING, 70, 5), busy(6, 1, 70 + B), NAP,
                    st(NORMAL, 70, 5)),
            new Row("9c new request q>0 in budget", REFRESH_BUDGET, st(CO_RUNNING, 70, 5), busy(6, 1, 80), RUN,
                    st(CO_RUNNING, 70, 5)),
            new Row("9c NORMAL busy", REFRESH_BUDGET, st(NORMAL, 70, 5), busy(6, 0, 9_000), NAP, st(NORMAL, 70, 5)),
            new Row("9c idle q=0", REFRESH_BUDGET, st(NORMAL, 70, 5), idle(0, 9_000), RUN, st(NEW_PERIOD, 70, 5)),
            // ---- 9d dynamic refresh: no reference IPC -> behaves as refresh budget
            new Row("9d no counters, expired", DYNAMIC_REFRESH, st(CO_RUNNING, 70, 5), busy(5, 0, 70 + B), NAP,
                    st(NORMAL, 70, 5)),
            new Row("9d new request q=0 refreshes", DYNAMIC_REFRESH, st(CO_RUNNING, 70, 5), busy(6, 0, 70 + B), RUN,
                    st(CO_RUNNING, 70 + B, 6)),
            new Row("9d NEW_PERIOD busy", DYNAMIC_REFRESH, st(NEW_PERIOD, 0, 0), busy(5, 0, 70), RUN,
                    st(CO_RUNNING, 70, 5)));
    }

    @Test
    void everyTransitionOfFigure9() {
        for (Row r : rows()) {
            PolicyConfig cfg = PolicyConfig.budget(r.kind(), B);
            Policy.Step s = Policy.transition(cfg, r.before(), r.obs());
            assertEquals(new Policy.Step(r.d(), r.after()), s, r.name() + ": " + r.kind() + " from " + r.before()
                    + " on " + r.obs());
        }
    }

    @Test
    void dynamicRefreshScalesTheBudgetWithLcIpc() {
        PolicyConfig cfg = PolicyConfig.budget(DYNAMIC_REFRESH, B).withRefIpc(2.0);
        PolicyState co = st(CO_RUNNING, 0, 5);
        // LC IPC 1.0 of a reference 2.0: ratio 2, budget 2B.
        assertEquals(RUN, Policy.transition(cfg, co, busy(5, 0, 2 * B - 1).withLcIpc(1.0)).decision());
        assertEquals(NAP, Policy.transition(cfg, co, busy(5, 0, 2 * B).withLcIpc(1.0)).decision());
        // LC barely running (IPC 0): ratio 1, budget B.
        assertEquals(NAP, Policy.transition(cfg, co, busy(5, 0, B).withLcIpc(0.0)).decision());
        // No sample this check: unscaled.
        assertEquals(NAP, Policy.transition(cfg, co, busy(5, 0, B)).decision());
    }

    @Test
    void effectiveBudgetScalesOnlyForDynamicRefresh() {
        PolicyConfig c = PolicyConfig.budget(DYNAMIC_REFRESH, 1000);
        assertEquals(1000, c.effectiveBudgetNs(true, 1.0), "no reference IPC: unscaled");
        c = c.withRefIpc(2.0);
        assertEquals(1000, c.effectiveBudgetNs(false, 0), "no counters: unscaled");
        assertEquals(2000, c.effectiveBudgetNs(true, 1.0), "2 / (2 - 1)");
        assertEquals(1000, c.effectiveBudgetNs(true, 0.0), "2 / 2");
        assertEquals(4000, c.effectiveBudgetNs(true, 1.9), "20x clamped to the 4x cap");
        assertEquals(4000, c.effectiveBudgetNs(true, 2.5), "lc above ref: cap");
        assertEquals(1000, c.effectiveBudgetNs(true, Double.NaN));
        PolicyConfig refresh = new PolicyConfig(REFRESH_BUDGET, 1000, 2.0, 4.0);
        assertEquals(1000, refresh.effectiveBudgetNs(true, 1.0));
        // Rust's u64 <-> f64 conversions at the extremes
        assertEquals(-1L, new PolicyConfig(DYNAMIC_REFRESH, -1L, 2.0, 4.0).effectiveBudgetNs(true, 1.9),
                "saturates at u64::MAX");
        assertEquals(Long.MIN_VALUE, PolicyConfig.doubleToU64(9223372036854775808.0));
        assertEquals(9223372036854775808.0, PolicyConfig.u64ToDouble(Long.MIN_VALUE));
        assertEquals(0, PolicyConfig.doubleToU64(Double.NaN));
    }

    @Test
    void validateRejectsBadParameters() {
        PolicyConfig c = PolicyConfig.budget(DYNAMIC_REFRESH, 10);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.withRefIpc(0.0).validate());
        assertTrue(e.getMessage().contains("ref_ipc must be a positive finite number"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> c.withRefIpc(Double.NaN).validate());
        e = assertThrows(IllegalArgumentException.class, () -> c.withRefIpc(2.0).withMaxBudgetRatio(0.5).validate());
        assertTrue(e.getMessage().contains("max_budget_ratio"), e.getMessage());
        c.withRefIpc(2.0).withMaxBudgetRatio(3.0).validate();
        assertThrows(IllegalArgumentException.class,
                () -> new Policy(c.withRefIpc(2.0).withMaxBudgetRatio(Double.POSITIVE_INFINITY)));
    }

    @Test
    void idsAndNamesRoundTripAndAreStable() {
        int i = 0;
        for (PolicyKind k : PolicyKind.values()) {
            assertEquals(i++, k.id());
            assertEquals(k, PolicyKind.fromId(k.id()));
            assertEquals(k, PolicyKind.parse(k.label()));
        }
        assertNull(PolicyKind.fromId(5));
        assertEquals(BORROW_IDLE, PolicyKind.parse("Borrow-Idle"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PolicyKind.parse("greedy"));
        assertTrue(e.getMessage().contains("\"greedy\""), e.getMessage());
    }

    @Test
    void policyObjectWalksARequestSequence() {
        // idle -> request 1 (co-run on the budget) -> expiry -> idle with an
        // empty queue -> request 2 co-runs again.
        Policy p = new Policy(PolicyConfig.budget(FIXED_BUDGET, B));
        assertEquals(NAP, p.step(busy(1, 0, 0)), "starts NORMAL: no budget before an idle period");
        assertFalse(p.timeSensitive());
        assertEquals(RUN, p.step(idle(0, 10)));
        assertEquals(NEW_PERIOD, p.state().status());
        assertEquals(RUN, p.step(busy(2, 0, 20)));
        assertTrue(p.timeSensitive(), "co-running: expiry depends on time alone");
        assertEquals(RUN, p.step(busy(2, 0, 20 + B / 2)));
        assertEquals(NAP, p.step(busy(2, 0, 20 + B)));
        assertFalse(p.timeSensitive());
        assertEquals(NAP, p.step(busy(2, 0, 30 + B)));
        assertEquals(RUN, p.step(idle(0, 40 + B)));
        assertEquals(RUN, p.step(busy(3, 0, 50 + B)));
        p.reconfigure(PolicyConfig.simple(BORROW_IDLE));
        assertEquals(PolicyState.INITIAL, p.state());
        assertEquals(NAP, p.step(busy(3, 0, 60 + B)));
    }

    /** The Rust test's generator: the same traces on every run and in both languages. */
    static final class Lcg {
        long s;

        Lcg(long seed) {
            s = seed;
        }

        long next() {
            s = s * 6364136223846793005L + 1442695040888963407L;
            return s >>> 33;
        }
    }

    /**
     * Over random traces of checks, a budget policy only ever runs while the
     * request lane is busy within budget of the start of its current period,
     * and fixed budget spends at most one budget per idle period.
     */
    @Test
    void budgetPoliciesNeverCoRunPastTheBudget() {
        for (PolicyKind kind : List.of(FIXED_BUDGET, REFRESH_BUDGET, DYNAMIC_REFRESH)) {
            Lcg rng = new Lcg(0xE1F3 + kind.id());
            Policy p = new Policy(PolicyConfig.budget(kind, B));
            long now = 0;
            long req = 0;
            boolean busyNow = false;
            int q = 0;
            long corunThisPeriod = 0;
            long lastRunBusyAt = -1;
            int runsWhileBusy = 0;
            for (int i = 0; i < 200_000; i++) {
                now += 1 + rng.next() % 200;
                long r = rng.next() % 50;
                if (r == 0) {
                    busyNow = !busyNow;
                    if (busyNow) {
                        req++;
                    }
                } else if (r == 1) {
                    q = (int) (rng.next() % 3);
                } else if (r == 2 && busyNow) {
                    req++;
                }
                Observation obs = new Observation(busyNow, q, req, now, false, 0);
                PolicyState before = p.state();
                Decision d = p.step(obs);
                if (!busyNow && q == 0) {
                    corunThisPeriod = 0;
                    lastRunBusyAt = -1;
                }
                if (d == RUN && busyNow) {
                    runsWhileBusy++;
                    PolicyState s = p.state();
                    assertEquals(CO_RUNNING, s.status(), kind + ": ran while busy outside CO_RUNNING");
                    assertTrue(now - s.startNs() < B, kind + ": co-ran " + (now - s.startNs()) + " ns");
                    if (kind == FIXED_BUDGET) {
                        if (lastRunBusyAt >= 0) {
                            corunThisPeriod += now - lastRunBusyAt;
                        }
                        assertTrue(corunThisPeriod < B, kind + ": " + corunThisPeriod + " ns of co-run in one period");
                    }
                    lastRunBusyAt = now;
                } else if (busyNow) {
                    lastRunBusyAt = -1;
                    assertEquals(NAP, d);
                    assertNotEquals(NEW_PERIOD, before.status(), kind + ": a new period must start co-running");
                }
            }
            assertTrue(runsWhileBusy > 1_000, kind + ": the trace never co-ran (" + runsWhileBusy + ")");
        }
    }
}
