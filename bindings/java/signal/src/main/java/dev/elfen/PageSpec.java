package dev.elfen;

import java.util.ArrayList;
import java.util.List;

/**
 * What {@link Page#create} creates (the Java mirror of Rust's {@code PageSpec}).
 *
 * @param lanes the lanes, in page order (lane index = position)
 * @param identity a fixed identity, or {@code null}: this process, now, a random instance
 * @param pageMode mode of the page file (0644: LC and controller write, all read; group or other
 *     write bits are refused, as attach refuses a page file others can write)
 * @param batchMode permission bits of the batch segment (0644: the creator's user writes, all
 *     read; {@link #withBatchGroup} makes it 0664 for a batch group)
 * @param batchGid group of the batch segment, whose members may attach batch threads, or
 *     {@code null}
 * @param replace replace an existing page at the path instead of failing
 */
public record PageSpec(List<LaneSpec> lanes, Identity identity, int pageMode, int batchMode, Integer batchGid,
        boolean replace) {
    /** Default spin bound of the hybrid nap, ns (as the Rust side's). */
    public static final int DEFAULT_HYBRID_SPIN_NS = 50_000;

    /** Copies {@code lanes}. */
    public PageSpec {
        lanes = List.copyOf(lanes);
    }

    /** A pair: a request lane's CPU and its batch lanes' CPUs. */
    public record Pair(int requestCpu, List<Integer> batchCpus) {
        /** Copies {@code batchCpus}. */
        public Pair {
            batchCpus = List.copyOf(batchCpus);
        }
    }

    /**
     * A page for request/batch pairs: lanes laid out pair by pair, request lane
     * first, every lane with {@code policy}, {@code budgetNs}, nap auto and the
     * default hybrid bound; page 0644, batch segment 0644 (no batch group), no
     * fixed identity, no replace.
     */
    public static PageSpec forPairs(List<Pair> pairs, int policy, long budgetNs) {
        List<LaneSpec> lanes = new ArrayList<>();
        for (Pair p : pairs) {
            int r = lanes.size();
            List<Integer> batch = new ArrayList<>();
            for (int i = 1; i <= p.batchCpus().size(); i++) {
                batch.add(r + i);
            }
            lanes.add(new LaneSpec(p.requestCpu(), Layout.Role.REQUEST, batch, policy, budgetNs, Layout.Nap.AUTO,
                    DEFAULT_HYBRID_SPIN_NS, 0));
            for (int b : p.batchCpus()) {
                lanes.add(new LaneSpec(b, Layout.Role.BATCH, List.of(r), policy, budgetNs, Layout.Nap.AUTO,
                        DEFAULT_HYBRID_SPIN_NS, 0));
            }
        }
        return new PageSpec(lanes, null, 0644, 0644, null, false);
    }

    /** {@link #forPairs} for one request CPU and its batch CPUs. */
    public static PageSpec forPair(int requestCpu, List<Integer> batchCpus, int policy, long budgetNs) {
        return forPairs(List.of(new Pair(requestCpu, batchCpus)), policy, budgetNs);
    }

    /** This spec with other lanes. */
    public PageSpec withLanes(List<LaneSpec> l) {
        return new PageSpec(l, identity, pageMode, batchMode, batchGid, replace);
    }

    /** This spec with lane {@code i} replaced. */
    public PageSpec withLane(int i, LaneSpec l) {
        List<LaneSpec> copy = new ArrayList<>(lanes);
        copy.set(i, l);
        return withLanes(copy);
    }

    /** This spec with a fixed identity. */
    public PageSpec withIdentity(Identity id) {
        return new PageSpec(lanes, id, pageMode, batchMode, batchGid, replace);
    }

    /** This spec with its batch segment given to group {@code gid}, which may write it (mode 0664). */
    public PageSpec withBatchGroup(int gid) {
        return new PageSpec(lanes, identity, pageMode, 0664, gid, replace);
    }

    /** This spec with other modes (page file, batch segment, and batch group or {@code null}). */
    public PageSpec withModes(int page, int batch, Integer gid) {
        return new PageSpec(lanes, identity, page, batch, gid, replace);
    }

    /** This spec replacing (or not) an existing page. */
    public PageSpec withReplace(boolean r) {
        return new PageSpec(lanes, identity, pageMode, batchMode, batchGid, r);
    }

    /** Checks that the lanes form a consistent page (the Rust side's rules and messages). */
    public void validate() throws ElfenException {
        int n = lanes.size();
        if (n == 0 || n > Layout.MAX_LANES) {
            throw ElfenException.badSpec("a page has 1..=" + Layout.MAX_LANES + " lanes, got " + n);
        }
        if ((pageMode & ~0777) != 0 || (pageMode & 022) != 0) {
            throw ElfenException.badSpec("page_mode " + Integer.toOctalString(pageMode) + ": the page file may be"
                    + " written by its owner only (attach refuses a page file others can write); use 644 or 600");
        }
        if ((batchMode & ~0777) != 0) {
            throw ElfenException.badSpec("batch_mode " + Integer.toOctalString(batchMode)
                    + ": permission bits only (e.g. 644, 664)");
        }
        for (int i = 0; i < n; i++) {
            LaneSpec l = lanes.get(i);
            for (int j = 0; j < i; j++) {
                if (lanes.get(j).cpu() == l.cpu()) {
                    throw ElfenException.badSpec("lane " + i + ": cpu " + Integer.toUnsignedString(l.cpu())
                            + " appears twice");
                }
            }
            for (int p : l.partners()) {
                if (Integer.compareUnsigned(p, n) >= 0 || p == i) {
                    throw ElfenException.badSpec("lane " + i + ": partner " + Integer.toUnsignedString(p)
                            + " is not another lane of this page");
                }
            }
            switch (l.role()) {
                case Layout.Role.UNUSED -> {
                    if (!l.partners().isEmpty()) {
                        throw ElfenException.badSpec("lane " + i + ": an unused lane has no partners");
                    }
                }
                case Layout.Role.REQUEST -> {
                    if (l.partners().size() > Layout.MAX_PARTNERS) {
                        throw ElfenException.badSpec("lane " + i + ": " + l.partners().size()
                                + " batch partners, at most " + Layout.MAX_PARTNERS);
                    }
                    for (int p : l.partners()) {
                        if (lanes.get(p).role() != Layout.Role.BATCH) {
                            throw ElfenException.badSpec("lane " + i + ": partner " + p
                                    + " of a request lane must be a batch lane");
                        }
                    }
                }
                case Layout.Role.BATCH -> {
                    if (l.partners().size() != 1 || lanes.get(l.partners().get(0)).role() != Layout.Role.REQUEST) {
                        throw ElfenException.badSpec("lane " + i + ": a batch lane watches exactly one request lane");
                    }
                }
                default -> throw ElfenException.badSpec("lane " + i + ": unknown role "
                        + Integer.toUnsignedString(l.role()));
            }
            if (Integer.compareUnsigned(l.nap(), Layout.Nap.MWAITX) > 0) {
                throw ElfenException.badSpec("lane " + i + ": unknown nap backend " + Integer.toUnsignedString(l.nap()));
            }
        }
    }
}
