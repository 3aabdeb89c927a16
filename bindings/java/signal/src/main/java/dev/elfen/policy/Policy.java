package dev.elfen.policy;

/**
 * A policy with its state: what one batch thread carries. The state machine
 * is Figure 9 of the Elfen paper exactly as {@code crates/policy} implements
 * it (fast and slow path folded together; a budget that expires naps at the
 * same check). {@link #step} allocates nothing; {@link #transition} is the
 * pure form, {@code (config, state, observation) -> (decision, next state)}.
 */
public final class Policy {
    private PolicyConfig cfg;
    private LaneStatus status = LaneStatus.NORMAL;
    private long startNs;
    private long lastRequest;

    /** A policy in its initial state (NORMAL), after validating {@code cfg}. */
    public Policy(PolicyConfig cfg) {
        cfg.validate();
        this.cfg = cfg;
    }

    /** A decision and the state after it. */
    public record Step(Decision decision, PolicyState state) {}

    /** One step of a policy from {@code state} on {@code obs} (no validation, as Rust's {@code transition}). */
    public static Step transition(PolicyConfig cfg, PolicyState state, Observation obs) {
        Policy p = new Policy(cfg, state);
        Decision d = p.step(obs);
        return new Step(d, p.state());
    }

    private Policy(PolicyConfig cfg, PolicyState s) {
        this.cfg = cfg;
        this.status = s.status();
        this.startNs = s.startNs();
        this.lastRequest = s.lastRequest();
    }

    /** Runs one check: returns the decision and advances the state. */
    public Decision step(Observation o) {
        return step(o.lcBusy(), o.queueLen(), o.runningRequest(), o.nowNs(), o.hasLcIpc(), o.lcIpc());
    }

    /** {@link #step(Observation)} without building an observation. */
    public Decision step(boolean lcBusy, int queueLen, long runningRequest, long nowNs, boolean hasLcIpc,
            double lcIpc) {
        switch (cfg.kind()) {
            case UNMANAGED:
                return Decision.RUN;
            case BORROW_IDLE:
                // 9a: if (!request_lane_idle) nanonap();
                return lcBusy ? Decision.NAP : Decision.RUN;
            default:
                return budgetStep(lcBusy, queueLen, runningRequest, nowNs, hasLcIpc, lcIpc);
        }
    }

    /** Figures 9b-9d. */
    private Decision budgetStep(boolean lcBusy, int queueLen, long runningRequest, long nowNs, boolean hasLcIpc,
            double lcIpc) {
        boolean refresh = cfg.kind() == PolicyKind.REFRESH_BUDGET || cfg.kind() == PolicyKind.DYNAMIC_REFRESH;
        if (!lcBusy) {
            // 9b line 8: idle with an empty queue opens a new period.
            if (queueLen == 0) {
                status = LaneStatus.NEW_PERIOD;
            }
            // Idle with requests queued: neither branch fires; keep running.
            return Decision.RUN;
        }
        switch (status) {
            case NORMAL:
                // 9b line 15.
                return Decision.NAP;
            case NEW_PERIOD:
                // 9b line 18 (9c line 10: remember the request the budget is for).
                status = LaneStatus.CO_RUNNING;
                startNs = nowNs;
                if (refresh) {
                    lastRequest = runningRequest;
                }
                return Decision.RUN;
            default: {
                // 9c lines 13-17: a new request started with nobody queued behind it.
                if (refresh && runningRequest != lastRequest && queueLen == 0) {
                    lastRequest = runningRequest;
                    startNs = nowNs;
                }
                // 9b line 24 / 9d line 9.
                long budget = cfg.effectiveBudgetNs(hasLcIpc, lcIpc);
                long ran = Long.compareUnsigned(nowNs, startNs) > 0 ? nowNs - startNs : 0;
                if (Long.compareUnsigned(ran, budget) >= 0) {
                    status = LaneStatus.NORMAL;
                    return Decision.NAP;
                }
                return Decision.RUN;
            }
        }
    }

    /** The configuration. */
    public PolicyConfig config() {
        return cfg;
    }

    /** The current state. */
    public PolicyState state() {
        return new PolicyState(status, startNs, lastRequest);
    }

    /**
     * Whether the decision can change with time alone: true while co-running
     * on a budget. The batch thread then sends every check to the slow path.
     */
    public boolean timeSensitive() {
        return status == LaneStatus.CO_RUNNING;
    }

    /** Replaces the configuration and resets the state to NORMAL. */
    public void reconfigure(PolicyConfig c) {
        c.validate();
        cfg = c;
        status = LaneStatus.NORMAL;
        startNs = 0;
        lastRequest = 0;
    }
}
