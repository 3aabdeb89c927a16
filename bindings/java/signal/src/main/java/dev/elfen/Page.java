package dev.elfen;

import static dev.elfen.Layout.BATCH_HEADER_SIZE;
import static dev.elfen.Layout.HEADER_SIZE;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.function.IntToLongFunction;

/**
 * An attached (or created) signal page: its file mapped and its batch
 * segment (a System V shared-memory segment) attached, as
 * {@link MemorySegment}s (the Java mirror of Rust's {@code elfen_shm::Page}).
 *
 * <p>{@link #attach} validates, in the Rust side's order, and refuses anything
 * else with an {@link ElfenException} naming the file and the mismatch: the
 * file exists; only its owner may write it and the owner is root or this
 * process's user; it is at least as long as its header; magic; ABI version;
 * line size 64; total size equals the file's; lane count 1..=4096 and
 * consistent with the size; the expected lane count (if given); a known clock
 * (and, Java only, MONOTONIC_NS for a handle that writes: see
 * {@link PageClock}); then the batch segment the header names: it exists, its
 * creator is the page file's owner, and the same header checks against the
 * segment's size, plus instance equality.
 *
 * <p>Access modes follow the permission model: {@link Access#LC} maps the page
 * read-write and the batch segment read-only, {@link Access#BATCH} the
 * reverse, {@link Access#OBSERVER} both read-only; {@link #create} returns a
 * {@link Access#CONTROLLER} handle (both read-write). Closing the page unmaps
 * both (and removes the page file if this handle created it and did not
 * {@link #persist}); close it after the {@link LcLane}s and
 * {@link BatchThread}s attached through it. The batch segment is freed by the
 * kernel when the last process that has it attached lets go of it.
 */
public final class Page implements AutoCloseable {
    /** Directory of pages named without a {@code /}. */
    public static final String SHM_DIR = "/dev/shm";
    /** The default page name. */
    public static final String DEFAULT_NAME = "elfen";
    /** How long {@link #readController} waits for a line being rewritten before calling it stuck. */
    public static final long STUCK_SEQLOCK_NS = 100_000_000L;

    private final Path path;
    private final int batchShmid;
    private final Arena arena;
    private final MemorySegment page;
    private final MemorySegment batch;
    private final int lanes;
    private final int clockKind;
    private final long ticksPerSec;
    private final Access access;
    private volatile boolean owner;
    /** Attached LcLanes and BatchThreads: the mappings stay until the last is closed. */
    private int refs;
    private boolean closed;

    private Page(Path path, int batchShmid, Arena arena, MemorySegment page, MemorySegment batch, int lanes,
            int clockKind, long ticksPerSec, Access access, boolean owner) {
        this.path = path;
        this.batchShmid = batchShmid;
        this.arena = arena;
        this.page = page;
        this.batch = batch;
        this.lanes = lanes;
        this.clockKind = clockKind;
        this.ticksPerSec = ticksPerSec;
        this.access = access;
        this.owner = owner;
    }

    /** The page file for {@code name}: a name without {@code /} lives in /dev/shm, anything else is a path. */
    public static Path pagePath(String name) {
        return name.contains("/") ? Path.of(name) : Path.of(SHM_DIR, name);
    }

    /** Attaches the page at {@code path} as {@code access}, validating both files. */
    public static Page attach(Path path, Access access) throws ElfenException {
        return attachInner(path, access, -1);
    }

    /** As {@link #attach(Path, Access)}, and also requires {@code lanes} lanes. */
    public static Page attach(Path path, Access access, int lanes) throws ElfenException {
        return attachInner(path, access, lanes);
    }

    private static Page attachInner(Path path, Access access, int expect) throws ElfenException {
        Native.requireSupported();
        Arena arena = Arena.ofShared();
        try {
            MemorySegment p = PageFiles.mapChecked(path,
                    PageFiles.openTrusted(path, access.pageWritable(), access.label()), HEADER_SIZE,
                    access.pageWritable(), arena);
            checkCommon(path, p, Layout.MAGIC, Layout.Header.TOTAL_SIZE, Layout.Header.LANE_COUNT, "signal page",
                    Layout::pageSize, expect);
            int lanes = Mem.get32(p, Layout.Header.LANE_COUNT);
            int kind = Mem.get32(p, Layout.Header.CLOCK);
            long rate = Mem.get64(p, Layout.Header.TICKS_PER_SEC);
            checkClock(path, access, kind, rate);
            int shmid = Mem.get32(p, Layout.Header.BATCH_SHMID);
            MemorySegment b = attachSegment(path, shmid, PageFiles.owner(path), Mem.get32(p, Layout.Header.CREATOR_PID),
                    access, arena);
            Path label = segmentLabel(path, shmid);
            if (b.byteSize() < BATCH_HEADER_SIZE) {
                throw ElfenException.shortFile(label, b.byteSize(), BATCH_HEADER_SIZE);
            }
            checkCommon(label, b, Layout.BATCH_MAGIC, Layout.BatchHeader.TOTAL_SIZE, Layout.BatchHeader.LANE_COUNT,
                    "batch segment", Layout::batchSize, lanes);
            long pi = Mem.get64(p, Layout.Header.INSTANCE);
            long bi = Mem.get64(b, Layout.BatchHeader.INSTANCE);
            if (pi != bi) {
                throw ElfenException.mismatch(label, "instance (the batch segment belongs to another page)", bi, pi);
            }
            return new Page(path, shmid, arena, p, b, lanes, kind, rate, access, false);
        } catch (ElfenException | RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** The name batch-segment errors give: the page and the segment id. */
    private static Path segmentLabel(Path path, int shmid) {
        return Path.of(path + " (batch segment, System V shm id " + Integer.toUnsignedString(shmid) + ")");
    }

    /**
     * Attaches the batch segment {@code shmid} that the page at {@code path}
     * (owned by uid {@code pageUid}, created by {@code creatorPid}) names.
     */
    private static MemorySegment attachSegment(Path path, int shmid, int pageUid, int creatorPid, Access access,
            Arena arena) throws ElfenException {
        if (shmid < 0) {
            throw ElfenException.batchGone(path, shmid, creatorPid, Native.alive(creatorPid));
        }
        MemorySegment b;
        try {
            b = BatchSegment.attach(shmid, access.batchWritable(), arena);
        } catch (BatchSegment.ErrnoException e) {
            if (e.errno == Native.EINVAL || e.errno == Native.EIDRM) {
                throw ElfenException.batchGone(path, shmid, creatorPid, Native.alive(creatorPid));
            }
            if (e.errno == Native.EACCES || e.errno == Native.EPERM) {
                String holder;
                try {
                    BatchSegment.Stat st = BatchSegment.stat(shmid);
                    holder = "owned by " + PageFiles.describeUser(st.uid()) + ", " + PageFiles.describeGroup(st.gid())
                            + ", mode " + Integer.toOctalString(st.mode());
                } catch (BatchSegment.ErrnoException e2) {
                    holder = "not even readable by this process";
                }
                throw ElfenException.batchDenied(path, shmid, access.batchWritable(), access.label(), holder);
            }
            throw ElfenException.os(segmentLabel(path, shmid), "shmat", e);
        }
        // the segment must come from the page's owner: an id freed and reused by
        // another user's segment is not this page's
        int cuid;
        try {
            cuid = BatchSegment.stat(shmid).cuid();
        } catch (BatchSegment.ErrnoException e) {
            throw ElfenException.os(path, "shmctl(IPC_STAT)", e);
        }
        if (cuid != pageUid) {
            throw ElfenException.batchForeign(path, shmid, PageFiles.describeUser(cuid), PageFiles.describeUser(pageUid));
        }
        return b;
    }

    private static void checkClock(Path path, Access access, int kind, long rate) throws ElfenException {
        if ((kind != Layout.Clock.TSC && kind != Layout.Clock.MONOTONIC_NS) || rate == 0) {
            throw ElfenException.mismatch(path, "clock", Integer.toUnsignedLong(kind), Layout.Clock.TSC);
        }
        if (kind == Layout.Clock.TSC && access.writes()) {
            throw new ElfenException(ElfenException.Kind.CLOCK_UNSUPPORTED, path, "signal page " + path
                    + ": its clock is TSC ticks (clock 1, " + Long.toUnsignedString(rate) + " ticks/s), which Java"
                    + " cannot read, so a Java " + access.label() + " handle would write timestamps on another"
                    + " clock; nothing was written. A Java writer needs a page whose clock is CLOCK_MONOTONIC ns"
                    + " (clock 2): create the page from Java (Page.create), or from Rust with a MONOTONIC clock."
                    + " Attach as OBSERVER to only read it.");
        }
        if (kind == Layout.Clock.TSC && !InvariantTsc.PRESENT) {
            throw ElfenException.mismatch(path, "clock (TSC, but this machine has no invariant TSC)", kind,
                    Layout.Clock.MONOTONIC_NS);
        }
    }

    /** Whether this machine has an invariant TSC (x86: constant_tsc and nonstop_tsc in /proc/cpuinfo). */
    static final class InvariantTsc {
        static final boolean PRESENT = detect();

        private static boolean detect() {
            try {
                for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                    if (line.startsWith("flags")) {
                        String f = " " + line.substring(line.indexOf(':') + 1) + " ";
                        return f.contains(" constant_tsc ") && f.contains(" nonstop_tsc ");
                    }
                }
            } catch (IOException | RuntimeException e) {
                return false;
            }
            return false;
        }
    }

    private static String printable(long magic) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 8; i++) {
            int c = (int) (magic >>> (8 * i)) & 0xFF;
            sb.append(c > 0x20 && c < 0x7F ? (char) c : '.');
        }
        return sb.toString();
    }

    private static void checkCommon(Path path, MemorySegment s, long wantMagic, int totalOff, int lanesOff,
            String what, IntToLongFunction sizeOf, int expect) throws ElfenException {
        long magic = Mem.acquire64(s, 0);
        if (magic != wantMagic) {
            throw ElfenException.badMagic(path, printable(magic), wantMagic == Layout.MAGIC ? "ELFENSIG" : "ELFENBAT",
                    what);
        }
        int version = Mem.get32(s, 8);
        if (version != Layout.ABI_VERSION) {
            throw ElfenException.badVersion(path, version);
        }
        int line = Mem.get32(s, 12);
        if (line != Layout.LINE_SIZE) {
            throw ElfenException.mismatch(path, "line_size", Integer.toUnsignedLong(line), Layout.LINE_SIZE);
        }
        long total = Mem.get64(s, totalOff);
        long actual = s.byteSize();
        if (total != actual) {
            throw ElfenException.mismatch(path, "total_size (vs its actual size)", total, actual);
        }
        int lanes = Mem.get32(s, lanesOff);
        if (lanes == 0 || Integer.compareUnsigned(lanes, Layout.MAX_LANES) > 0) {
            throw ElfenException.mismatch(path, "lane_count (must be 1..=4096)", Integer.toUnsignedLong(lanes), 1);
        }
        if (sizeOf.applyAsLong(lanes) != actual) {
            throw ElfenException.mismatch(path, "total_size (vs lane_count)", total, sizeOf.applyAsLong(lanes));
        }
        if (expect >= 0 && expect != lanes) {
            throw ElfenException.mismatch(path, "lane_count", lanes, expect);
        }
    }

    /**
     * Creates a page at {@code path} from {@code spec}, with the clock
     * MONOTONIC_NS — its batch segment first, then the page file naming it —
     * and returns it attached as {@link Access#CONTROLLER}. The page file is
     * complete before it appears under its name, so a concurrent attach never
     * sees a half-written page. Closing the returned page removes the page
     * file unless {@link #persist} was called; the batch segment is freed
     * when the last process that has the page attached lets go of it.
     */
    public static Page create(Path path, PageSpec spec) throws ElfenException {
        Native.requireSupported();
        spec.validate();
        int lanes = spec.lanes().size();
        Identity id = spec.identity() != null ? spec.identity()
                : new Identity(PageFiles.randomInstance(), (int) ProcessHandle.current().pid(),
                        Instant.now().getEpochSecond());
        if (!spec.replace() && Files.exists(path, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            throw PageFiles.existsError(path);
        }
        Arena arena = Arena.ofShared();
        try {
            BatchSegment.Created seg;
            try {
                seg = BatchSegment.create(Layout.batchSize(lanes), spec.batchMode(), spec.batchGid(), arena);
            } catch (BatchSegment.ErrnoException e) {
                throw ElfenException.os(path, "creating the batch segment (shmget)", e);
            }
            MemorySegment b = seg.memory();
            Mem.set32(b, Layout.BatchHeader.ABI_VERSION, Layout.ABI_VERSION);
            Mem.set32(b, Layout.BatchHeader.LINE_SIZE, Layout.LINE_SIZE);
            Mem.set64(b, Layout.BatchHeader.TOTAL_SIZE, Layout.batchSize(lanes));
            Mem.set32(b, Layout.BatchHeader.LANE_COUNT, lanes);
            Mem.set64(b, Layout.BatchHeader.INSTANCE, id.instance());
            Mem.release64(b, Layout.BatchHeader.MAGIC, Layout.BATCH_MAGIC);
            PageFiles.publish(path, Layout.pageSize(lanes), spec.pageMode(), spec.replace(), m -> {
                Mem.set32(m, Layout.Header.ABI_VERSION, Layout.ABI_VERSION);
                Mem.set32(m, Layout.Header.LINE_SIZE, Layout.LINE_SIZE);
                Mem.set64(m, Layout.Header.TOTAL_SIZE, Layout.pageSize(lanes));
                Mem.set32(m, Layout.Header.LANE_COUNT, lanes);
                Mem.set32(m, Layout.Header.CLOCK, Layout.Clock.MONOTONIC_NS);
                Mem.set64(m, Layout.Header.TICKS_PER_SEC, PageClock.TICKS_PER_SEC);
                Mem.set64(m, Layout.Header.INSTANCE, id.instance());
                Mem.set32(m, Layout.Header.CREATOR_PID, id.creatorPid());
                Mem.set32(m, Layout.Header.BATCH_SHMID, seg.id());
                Mem.set64(m, Layout.Header.CREATED_UNIX_S, id.createdUnixS());
                for (int i = 0; i < lanes; i++) {
                    storeController(m, Layout.controllerLine(i), spec.lanes().get(i));
                }
                Mem.release64(m, Layout.Header.MAGIC, Layout.MAGIC);
            });
            MemorySegment p = PageFiles.mapChecked(path, PageFiles.open(path, true, "controller"), HEADER_SIZE, true,
                    arena);
            return new Page(path, seg.id(), arena, p, b, lanes, Layout.Clock.MONOTONIC_NS, PageClock.TICKS_PER_SEC,
                    Access.CONTROLLER, true);
        } catch (ElfenException | RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    private static void deleteQuietly(Path p) {
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            // best effort
        }
    }

    /**
     * Removes the page file at {@code path} (a missing file is fine). Its batch
     * segment needs no removal: it is freed with its last attachment.
     */
    public static void remove(Path path) throws ElfenException {
        try {
            Files.deleteIfExists(path);
        } catch (IOException e) {
            throw ElfenException.os(path, "remove", e);
        }
    }

    /**
     * Keeps the page file after this (creating) handle is closed. The batch
     * segment still lives only while some process has the page attached: a
     * persisted page that nobody holds any more is refused at attach ("batch
     * segment ... is gone"), and its creator makes it again.
     */
    public void persist() {
        owner = false;
    }

    /**
     * Closes the handle: removes the page file if this handle created it and
     * did not {@link #persist}, and unmaps the file and the batch segment, at once or, while
     * {@link LcLane}s or {@link BatchThread}s attached through it are still
     * open, when the last of them is closed (so their loads and stores never
     * reach unmapped memory).
     */
    @Override
    public void close() {
        if (owner) {
            owner = false;
            deleteQuietly(path);
        }
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            if (refs == 0) {
                arena.close();
            }
        }
    }

    /** Keeps the mappings for an attaching LcLane or BatchThread. */
    synchronized void retain() {
        if (closed) {
            throw new IllegalStateException("signal page " + path + " is closed");
        }
        refs++;
    }

    /** Releases a {@link #retain}; the last release after {@link #close} unmaps. */
    synchronized void release() {
        refs--;
        if (refs == 0 && closed) {
            arena.close();
        }
    }

    /** Whether {@link #close} was called. */
    public synchronized boolean isClosed() {
        return closed;
    }

    // ---- identity

    /** The page file. */
    public Path path() {
        return path;
    }

    /** The System V id of the batch segment (the page header's {@code batch_shmid}). */
    public int batchShmid() {
        return batchShmid;
    }

    /** Number of lanes. */
    public int laneCount() {
        return lanes;
    }

    /** {@link Layout.Clock} kind of the page's timestamps. */
    public int clockKind() {
        return clockKind;
    }

    /** Page-clock ticks per second. */
    public long ticksPerSec() {
        return ticksPerSec;
    }

    /** Converts page-clock ticks to nanoseconds. */
    public long ticksToNs(long ticks) {
        return ticksToNs(ticks, ticksPerSec);
    }

    /** Converts ticks of a clock at {@code ticksPerSec} to nanoseconds. */
    static long ticksToNs(long ticks, long ticksPerSec) {
        if (ticksPerSec == PageClock.TICKS_PER_SEC) {
            return ticks;
        }
        return mulDiv(ticks, 1_000_000_000L, ticksPerSec == 0 ? 1 : ticksPerSec);
    }

    /** {@code a * b / c} on unsigned 64-bit values, truncated to 64 bits (Rust's u128 arithmetic). */
    private static long mulDiv(long a, long b, long c) {
        return new java.math.BigInteger(Long.toUnsignedString(a)).multiply(java.math.BigInteger.valueOf(b))
                .divide(new java.math.BigInteger(Long.toUnsignedString(c))).longValue();
    }

    /** How this handle attached. */
    public Access access() {
        return access;
    }

    /** Whether this handle may write the page file (LC, controller). */
    public boolean pageWritable() {
        return access.pageWritable();
    }

    /** Whether this handle may write the batch segment (batch, controller). */
    public boolean batchWritable() {
        return access.batchWritable();
    }

    /** The random instance id shared by both files. */
    public long instance() {
        return Mem.get64(page, Layout.Header.INSTANCE);
    }

    /** The process that created the page. */
    public int creatorPid() {
        return Mem.get32(page, Layout.Header.CREATOR_PID);
    }

    /** Creation time, Unix seconds. */
    public long createdUnixS() {
        return Mem.get64(page, Layout.Header.CREATED_UNIX_S);
    }

    /** Page clock at the controller's last sign of life (0 = never). */
    public long heartbeat() {
        return Mem.acquire64(page, Layout.Header.HEARTBEAT);
    }

    /** The control word. */
    public long control() {
        return Mem.acquire64(page, Layout.Header.CONTROL);
    }

    /** Whether the kill switch's {@code KILL} bit is set (batch paused). */
    public boolean killed() {
        return (control() & Layout.Control.KILL) != 0;
    }

    /** Whether the {@code UNMANAGED} bit is set (it takes effect only without {@code KILL}). */
    public boolean unmanaged() {
        return (control() & Layout.Control.UNMANAGED) != 0;
    }

    /** The kill switch's mode. */
    public KillMode killMode() {
        return KillMode.fromControl(control());
    }

    /** The heartbeat fail-safe's bound, ns (0 = off). */
    public long heartbeatStaleNs() {
        return Mem.acquire64(page, Layout.Header.HEARTBEAT_STALE_NS);
    }

    /** Now on this page's clock; Java reads only CLOCK_MONOTONIC (see {@link PageClock}). */
    private long pageNow(String what) {
        if (clockKind != Layout.Clock.MONOTONIC_NS) {
            throw new IllegalStateException("page " + path + " counts TSC ticks, which Java cannot read: "
                    + what + " needs a page created with the monotonic clock");
        }
        return PageClock.now();
    }

    /**
     * How long ago the controller last beat, ns; empty if it never beat.
     *
     * @throws IllegalStateException on a TSC page (Java cannot read its clock)
     */
    public java.util.OptionalLong heartbeatAgeNs() {
        long beat = heartbeat();
        if (beat == 0) {
            return java.util.OptionalLong.empty();
        }
        return java.util.OptionalLong.of(ticksToNs(PageClock.since(pageNow("the heartbeat's age"), beat)));
    }

    /**
     * Whether the fail-safe is on and the heartbeat stale (batch threads then pause).
     *
     * @throws IllegalStateException on a TSC page with the fail-safe on
     */
    public boolean heartbeatStale() {
        long staleNs = heartbeatStaleNs();
        return staleNs != 0 && BatchMode.heartbeatStale(heartbeat(), staleNs, pageNow("staleness"), ticksPerSec);
    }

    /**
     * What batch threads' slow paths do now ({@link BatchMode#of} of this page's header line 1).
     *
     * @throws IllegalStateException on a TSC page with the fail-safe on
     */
    public BatchMode batchMode() {
        long c = control();
        long staleNs = heartbeatStaleNs();
        long beat = heartbeat();
        long now = staleNs == 0 ? 0 : pageNow("staleness");
        return BatchMode.of(c, beat, staleNs, now, ticksPerSec);
    }

    // ---- lanes

    void checkLane(int lane) throws ElfenException {
        if (lane < 0 || lane >= lanes) {
            throw ElfenException.laneOutOfRange(path, lane, lanes);
        }
    }

    private void checkIndex(int lane) {
        if (lane < 0 || lane >= lanes) {
            throw new IndexOutOfBoundsException(ElfenException.laneOutOfRange(path, lane, lanes).getMessage());
        }
    }

    /**
     * Lane {@code lane}'s LC line, each field read once.
     *
     * @throws IndexOutOfBoundsException for a lane beyond the page
     */
    public LcLineSnapshot readLc(int lane) {
        checkIndex(lane);
        long o = Layout.lcLine(lane);
        return new LcLineSnapshot(Mem.acquire64(page, o + Layout.LcLine.STATE),
                Mem.get64(page, o + Layout.LcLine.REQUEST_ID), Mem.get64(page, o + Layout.LcLine.BUSY_SINCE),
                Mem.get64(page, o + Layout.LcLine.BUSY_TICKS), Mem.get64(page, o + Layout.LcLine.REQUESTS),
                Mem.get32(page, o + Layout.LcLine.LC_TID));
    }

    /**
     * Lane {@code lane}'s batch line, each field read once.
     *
     * @throws IndexOutOfBoundsException for a lane beyond the page
     */
    public BatchLineSnapshot readBatch(int lane) {
        checkIndex(lane);
        long o = Layout.batchLine(lane);
        return new BatchLineSnapshot(Mem.get32(batch, o + Layout.BatchLine.ATTACHED),
                Mem.get32(batch, o + Layout.BatchLine.SLEEPERS), Mem.get32(batch, o + Layout.BatchLine.NAPPING),
                Mem.get64(batch, o + Layout.BatchLine.NAPS), Mem.get64(batch, o + Layout.BatchLine.WAKES),
                Mem.get64(batch, o + Layout.BatchLine.RUN_TICKS), Mem.get64(batch, o + Layout.BatchLine.CORUN_TICKS),
                Mem.get64(batch, o + Layout.BatchLine.LAST_CHANGE), Mem.get64(batch, o + Layout.BatchLine.SLOW_CHECKS));
    }

    /** The lane whose controller line names logical CPU {@code cpu}, or -1. */
    public int laneOfCpu(int cpu) {
        for (int l = 0; l < lanes; l++) {
            if (Mem.get32(page, Layout.controllerLine(l) + Layout.ControllerLine.CPU) == cpu) {
                return l;
            }
        }
        return -1;
    }

    /**
     * Reads lane {@code lane}'s controller line consistently, retrying while
     * the controller rewrites it; a line odd for {@link #STUCK_SEQLOCK_NS} is
     * reported stuck rather than hanging the reader.
     */
    public ControllerConfig readController(int lane) throws ElfenException {
        checkLane(lane);
        long o = Layout.controllerLine(lane);
        long deadline = System.nanoTime() + STUCK_SEQLOCK_NS;
        int spins = 0;
        while (true) {
            int s0 = Mem.acquire32(page, o + Layout.ControllerLine.CONFIG_SEQ);
            if ((s0 & 1) == 1) {
                Thread.onSpinWait();
                spins++;
                if (spins % 1024 == 0 && System.nanoTime() - deadline > 0) {
                    throw ElfenException.stuckController(path, lane);
                }
                continue;
            }
            int[] partners = new int[Layout.MAX_PARTNERS];
            for (int i = 0; i < partners.length; i++) {
                partners[i] = Mem.get32(page, o + Layout.ControllerLine.PARTNERS + 4L * i);
            }
            ControllerConfig cfg = new ControllerConfig(Mem.get32(page, o + Layout.ControllerLine.ROLE),
                    Mem.get32(page, o + Layout.ControllerLine.CPU), Mem.get32(page, o + Layout.ControllerLine.POLICY),
                    Mem.get32(page, o + Layout.ControllerLine.NAP), Mem.get64(page, o + Layout.ControllerLine.BUDGET_NS),
                    Mem.get32(page, o + Layout.ControllerLine.REF_IPC_MILLI),
                    Mem.get32(page, o + Layout.ControllerLine.PARTNER_COUNT), partners,
                    Mem.get32(page, o + Layout.ControllerLine.HYBRID_SPIN_NS), s0);
            VarHandle.acquireFence();
            if (Mem.get32(page, o + Layout.ControllerLine.CONFIG_SEQ) == s0) {
                return cfg;
            }
        }
    }

    private void requirePageWritable(String what) throws ElfenException {
        if (!access.pageWritable()) {
            throw ElfenException.readOnly(path, what);
        }
    }

    /** Rewrites lane {@code lane}'s controller line (controller only) under its seqlock. */
    public void writeController(int lane, LaneSpec spec) throws ElfenException {
        requirePageWritable("write a controller line");
        checkLane(lane);
        boolean badPartner = spec.partners().size() > Layout.MAX_PARTNERS;
        for (int p : spec.partners()) {
            badPartner |= Integer.compareUnsigned(p, lanes) >= 0 || p == lane;
        }
        if (badPartner) {
            throw ElfenException.badSpec("lane " + lane + ": bad partners " + spec.partners());
        }
        if (Integer.compareUnsigned(spec.nap(), Layout.Nap.MWAITX) > 0
                || Integer.compareUnsigned(spec.role(), Layout.Role.BATCH) > 0) {
            throw ElfenException.badSpec("lane " + lane + ": unknown nap backend " + Integer.toUnsignedString(spec.nap())
                    + " or role " + Integer.toUnsignedString(spec.role()));
        }
        long seqOff = Layout.controllerLine(lane) + Layout.ControllerLine.CONFIG_SEQ;
        int s = Mem.get32(page, seqOff);
        Mem.set32(page, seqOff, (s + 1) | 1);
        VarHandle.releaseFence();
        storeController(page, Layout.controllerLine(lane), spec);
        Mem.release32(page, seqOff, (s | 1) + 1);
    }

    private static void storeController(MemorySegment m, long o, LaneSpec l) {
        Mem.set32(m, o + Layout.ControllerLine.ROLE, l.role());
        Mem.set32(m, o + Layout.ControllerLine.CPU, l.cpu());
        Mem.set32(m, o + Layout.ControllerLine.POLICY, l.policy());
        Mem.set32(m, o + Layout.ControllerLine.NAP, l.nap());
        Mem.set64(m, o + Layout.ControllerLine.BUDGET_NS, l.budgetNs());
        Mem.set32(m, o + Layout.ControllerLine.REF_IPC_MILLI, l.refIpcMilli());
        Mem.set32(m, o + Layout.ControllerLine.PARTNER_COUNT, l.partners().size());
        for (int i = 0; i < Layout.MAX_PARTNERS; i++) {
            Mem.set32(m, o + Layout.ControllerLine.PARTNERS + 4L * i, i < l.partners().size() ? l.partners().get(i) : 0);
        }
        Mem.set32(m, o + Layout.ControllerLine.HYBRID_SPIN_NS, l.hybridSpinNs());
    }

    /** Sets or clears the kill switch's {@code KILL} bit (controller only), leaving {@code UNMANAGED} as it is. */
    public void setKill(boolean kill) throws ElfenException {
        setBit(Layout.Control.KILL, kill);
    }

    /**
     * Sets or clears the {@code UNMANAGED} bit (controller only), leaving
     * {@code KILL} as it is (while {@code KILL} is set, batch stays paused).
     */
    public void setUnmanaged(boolean unmanaged) throws ElfenException {
        setBit(Layout.Control.UNMANAGED, unmanaged);
    }

    private void setBit(long bit, boolean on) throws ElfenException {
        requirePageWritable("set the kill switch");
        if (on) {
            long unused = (long) Mem.U64.getAndBitwiseOrRelease(page, (long) Layout.Header.CONTROL, bit);
        } else {
            long unused = (long) Mem.U64.getAndBitwiseAndRelease(page, (long) Layout.Header.CONTROL, ~bit);
        }
    }

    /** Sets the kill switch's mode (controller only): both bits in one atomic update, other bits untouched. */
    public void setControl(KillMode mode) throws ElfenException {
        requirePageWritable("set the kill switch");
        long mask = Layout.Control.KILL | Layout.Control.UNMANAGED;
        long w = Mem.get64(page, Layout.Header.CONTROL);
        while (true) {
            long seen = (long) Mem.U64.compareAndExchangeRelease(page, (long) Layout.Header.CONTROL, w,
                    (w & ~mask) | mode.bits());
            if (seen == w) {
                return;
            }
            w = seen;
        }
    }

    /** Records a sign of life of the controller (heartbeat = now). */
    public void beat() throws ElfenException {
        requirePageWritable("write the heartbeat");
        Mem.release64(page, Layout.Header.HEARTBEAT, PageClock.now());
    }

    /**
     * Turns the heartbeat fail-safe on ({@code staleNs} > 0, e.g. 10 x the
     * beat interval) or off (0); controller only. Turning it on beats first,
     * so the page is never stale for want of a first beat.
     */
    public void setHeartbeatStale(long staleNs) throws ElfenException {
        requirePageWritable("set heartbeat_stale_ns");
        if (staleNs != 0) {
            beat();
        }
        Mem.release64(page, Layout.Header.HEARTBEAT_STALE_NS, staleNs);
    }

    /** The page file's mapping (package-private: LcLane, BatchThread, tests). */
    MemorySegment pageSegment() {
        return page;
    }

    /** The batch segment's attachment. */
    MemorySegment batchSegment() {
        return batch;
    }

    /** The magic as ASCII (for messages and tests). */
    static String magicText(long magic) {
        byte[] b = new byte[8];
        for (int i = 0; i < 8; i++) {
            b[i] = (byte) (magic >>> (8 * i));
        }
        return new String(b, StandardCharsets.US_ASCII);
    }

    @Override
    public String toString() {
        return "Page[" + path + ", " + lanes + " lanes, " + access.label() + ", clock " + clockKind + "]";
    }
}
