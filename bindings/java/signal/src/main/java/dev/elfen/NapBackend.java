package dev.elfen;

/** The backend a Java batch thread actually naps with (umwait/mwaitx have no Java form). */
public enum NapBackend {
    /** Spin with {@link Thread#onSpinWait()} reading only {@code state}; keeps the lane. */
    SPIN("spin"),
    /** Register in {@code sleepers} and block in FUTEX_WAIT (shared) on the low half of {@code state}. */
    FUTEX("futex"),
    /** Spin up to the controller line's {@code hybrid_spin_ns}, then futex. */
    HYBRID("hybrid");

    private final String label;

    NapBackend(String label) {
        this.label = label;
    }

    /** The name used on the command line and in JSON. */
    public String label() {
        return label;
    }

    /** Whether napping keeps the lane. */
    public boolean keepsLane() {
        return this != FUTEX;
    }

    @Override
    public String toString() {
        return label;
    }
}
