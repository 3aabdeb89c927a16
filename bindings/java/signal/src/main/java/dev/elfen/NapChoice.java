package dev.elfen;

import java.util.Locale;

/** What a batch thread asks for: the controller line's {@code nap} field, or {@link BatchOptions#nap()}. */
public enum NapChoice {
    /** The best available: from Java, hybrid. */
    AUTO(Layout.Nap.AUTO, "auto"),
    /** {@link NapBackend#SPIN}. */
    SPIN(Layout.Nap.SPIN, "spin"),
    /** {@link NapBackend#FUTEX}. */
    FUTEX(Layout.Nap.FUTEX, "futex"),
    /** {@link NapBackend#HYBRID}. */
    HYBRID(Layout.Nap.HYBRID, "hybrid"),
    /** umwait: a CPU instruction Java cannot execute; refused at attach. */
    UMWAIT(Layout.Nap.UMWAIT, "umwait"),
    /** mwaitx: as umwait. */
    MWAITX(Layout.Nap.MWAITX, "mwaitx");

    private final int id;
    private final String label;

    NapChoice(int id, String label) {
        this.id = id;
        this.label = label;
    }

    /** The id stored in the controller line. */
    public int id() {
        return id;
    }

    /** The name used on the command line and in JSON. */
    public String label() {
        return label;
    }

    /** The choice with controller-line id {@code id}, or {@code null}. */
    public static NapChoice fromId(int id) {
        for (NapChoice c : values()) {
            if (c.id == id) {
                return c;
            }
        }
        return null;
    }

    /** Parses a name. */
    public static NapChoice parse(String s) {
        String norm = s.trim().toLowerCase(Locale.ROOT);
        for (NapChoice c : values()) {
            if (c.label.equals(norm)) {
                return c;
            }
        }
        throw new IllegalArgumentException("unknown nap backend \"" + s
                + "\": expected one of auto, spin, futex, hybrid, umwait, mwaitx");
    }

    static final String EXPLICIT = "asked for explicitly";
    static final String AUTO_WHY = "auto: hybrid, because Java cannot execute umwait or mwaitx";

    /** The backend this choice means from Java, or {@code null} for umwait/mwaitx. */
    NapBackend backend() {
        return switch (this) {
            case AUTO, HYBRID -> NapBackend.HYBRID;
            case SPIN -> NapBackend.SPIN;
            case FUTEX -> NapBackend.FUTEX;
            case UMWAIT, MWAITX -> null;
        };
    }

    /** Why {@link #backend()} (a fixed sentence). */
    String why() {
        return this == AUTO ? AUTO_WHY : EXPLICIT;
    }

    /** The backend, or the attach error for umwait/mwaitx. */
    NapBackend resolve() throws ElfenException {
        NapBackend b = backend();
        if (b == null) {
            throw ElfenException.napUnavailable(label, label + " is a CPU instruction (monitor/wait on the state line)"
                    + " that Java cannot execute; use auto, hybrid, spin or futex");
        }
        return b;
    }

    @Override
    public String toString() {
        return label;
    }
}
