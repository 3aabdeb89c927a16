package dev.elfen;

import java.util.Locale;

/**
 * The operator's kill switch: what the control word's {@code KILL} and
 * {@code UNMANAGED} bits ask of batch threads (the Java mirror of Rust's
 * {@code elfen_shm::KillMode}). {@code KILL} wins when both are set.
 */
public enum KillMode {
    /** Neither bit: batch threads follow their lane's policy. */
    OFF,
    /** {@code KILL}: batch threads must not run batch code; they nap until it clears. */
    PAUSED,
    /** {@code UNMANAGED} without {@code KILL}: borrowing off, batch threads never nap. */
    UNMANAGED;

    /** The mode a control word means ({@code KILL} wins over {@code UNMANAGED}). */
    public static KillMode fromControl(long word) {
        if ((word & Layout.Control.KILL) != 0) {
            return PAUSED;
        }
        return (word & Layout.Control.UNMANAGED) != 0 ? UNMANAGED : OFF;
    }

    /** The control bits of this mode (within {@code KILL | UNMANAGED}). */
    public long bits() {
        return switch (this) {
            case OFF -> 0;
            case PAUSED -> Layout.Control.KILL;
            case UNMANAGED -> Layout.Control.UNMANAGED;
        };
    }

    /** The name on the command line and in JSON: {@code off}, {@code paused}, {@code unmanaged}. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The mode named {@code s} (as {@link #label()} spells it, any case). */
    public static KillMode parse(String s) {
        String n = s.trim().toLowerCase(Locale.ROOT);
        for (KillMode m : values()) {
            if (m.label().equals(n)) {
                return m;
            }
        }
        throw new IllegalArgumentException("unknown kill-switch mode \"" + s + "\": expected off, paused or unmanaged");
    }
}
