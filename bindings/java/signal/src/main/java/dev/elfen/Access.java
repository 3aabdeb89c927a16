package dev.elfen;

/** Who attaches, which decides each region's access (docs/protocol.md, the permission model). */
public enum Access {
    /** The LC service: page read-write, batch segment read-only. */
    LC("LC", true, false),
    /** A batch process: page read-only, batch segment read-write. */
    BATCH("batch", false, true),
    /** The controller (the creator of a page): both read-write. */
    CONTROLLER("controller", true, true),
    /** A monitor: both read-only. */
    OBSERVER("observer", false, false);

    private final String label;
    private final boolean pageRw;
    private final boolean batchRw;

    Access(String label, boolean pageRw, boolean batchRw) {
        this.label = label;
        this.pageRw = pageRw;
        this.batchRw = batchRw;
    }

    /** The role's name in messages ("LC", "batch", ...). */
    public String label() {
        return label;
    }

    /** Whether this role maps the page file read-write. */
    public boolean pageWritable() {
        return pageRw;
    }

    /** Whether this role attaches the batch segment read-write. */
    public boolean batchWritable() {
        return batchRw;
    }

    /** Whether this role writes anything (and so needs the page clock). */
    public boolean writes() {
        return pageRw || batchRw;
    }
}
