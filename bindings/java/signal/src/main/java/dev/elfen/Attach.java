package dev.elfen;

import java.util.List;

/** The checks both sides make first (the Rust side's {@code attach_check} and {@code read_config}). */
final class Attach {
    private Attach() {}

    /** Which side attaches. */
    enum Side {
        /** An LC thread: writes the page file, attaches to a request lane. */
        LC,
        /** A batch thread: writes the batch segment, attaches to a batch lane. */
        BATCH
    }

    /** How long attach waits for a controller line being rewritten before calling it abandoned. */
    static final long REWRITE_WAIT_NS = 100_000_000L;

    /**
     * Refuses virtual threads: their kernel thread id is their carrier's, and a
     * futex nap would block the carrier.
     */
    static void requirePlatformThread(String what) throws ElfenException {
        Native.requireSupported();
        if (Thread.currentThread().isVirtual()) {
            throw new ElfenException(ElfenException.Kind.WRONG_THREAD, null, "cannot attach " + what
                    + " from a virtual thread (" + Thread.currentThread() + "): its kernel thread id is its carrier's"
                    + " and a futex nap would block the carrier; attach from a platform thread");
        }
    }

    /**
     * The file this side writes is writable, the lane exists, and it has this
     * side's role. Returns its controller line.
     */
    static ControllerConfig check(Page page, int lane, Side side) throws ElfenException {
        boolean writable = side == Side.LC ? page.pageWritable() : page.batchWritable();
        if (!writable) {
            throw side == Side.LC
                    ? ElfenException.readOnlyFor(page.path(), "page file", "LC lane", "LC or controller")
                    : ElfenException.readOnlyFor(page.path(), "batch segment", "batch thread", "batch or controller");
        }
        ControllerConfig cfg = readConfig(page, lane);
        int want = side == Side.LC ? Layout.Role.REQUEST : Layout.Role.BATCH;
        if (cfg.role() == want) {
            return cfg;
        }
        List<Integer> partners = cfg.partners();
        if (side == Side.LC && cfg.role() == Layout.Role.BATCH) {
            long req = partners.isEmpty() ? 0xFFFF_FFFFL : Integer.toUnsignedLong(partners.get(0));
            throw ElfenException.lcOnBatchLane(page.path(), lane, req);
        }
        if (side == Side.BATCH && cfg.role() == Layout.Role.REQUEST) {
            throw ElfenException.batchOnRequestLane(page.path(), lane, partners);
        }
        throw ElfenException.badLane(page.path(), lane, "role " + Integer.toUnsignedString(cfg.role())
                + " (unused): the lane takes no part; " + (side == Side.LC ? "an LC thread" : "a batch thread")
                + " attaches to a " + (side == Side.LC ? "request" : "batch") + " lane");
    }

    /**
     * Reads lane {@code lane}'s controller line, but refuses a line whose
     * seqlock stays odd: a controller that died in the middle of a rewrite.
     */
    static ControllerConfig readConfig(Page page, int lane) throws ElfenException {
        page.checkLane(lane);
        long off = Layout.controllerLine(lane) + Layout.ControllerLine.CONFIG_SEQ;
        long t0 = System.nanoTime();
        while ((Mem.acquire32(page.pageSegment(), off) & 1) == 1) {
            if (System.nanoTime() - t0 > REWRITE_WAIT_NS) {
                throw ElfenException.badLane(page.path(), lane, "its controller line has been mid-rewrite (odd"
                        + " config_seq) for over 100ms: did the controller die while writing it?");
            }
            Thread.yield();
        }
        return page.readController(lane);
    }
}
