package dev.elfen;

import java.nio.charset.StandardCharsets;

/**
 * The byte layout of the signal page, ABI version {@link #ABI_VERSION}: the
 * Java mirror of {@code crates/shm/src/layout.rs} (and {@code elfen.h}).
 *
 * <pre>
 * page file   (LC and controller write, everyone reads)
 *   0    header line 0: identity, written once by the creator
 *   64   header line 1: heartbeat, control word, heartbeat_stale_ns (controller)
 *   128  lane 0: LC line          (the LC thread of lane 0)
 *   192  lane 0: controller line  (the controller)
 *   256  lane 1: LC line ...
 *   size = 128 + lanes * 128
 *
 * batch segment  (a System V shared-memory segment, fixed size; header.batch_shmid
 *                names it; batch threads write)
 *   0    batch header
 *   64   lane 0: batch line
 *   128  lane 1: batch line ...
 *   size = 64 + lanes * 64
 * </pre>
 *
 * All integers are little-endian and unsigned (Java reads them into
 * {@code int}/{@code long}; compare with {@link Integer#compareUnsigned} where
 * the high bit can be set). Offsets inside a line are relative to the line's
 * start; {@link #lcLine}, {@link #controllerLine} and {@link #batchLine} give
 * a lane's line offset in its file. {@code LayoutTest} checks every offset
 * against {@code testdata/signal/v2-2lanes.json}.
 */
public final class Layout {
    private Layout() {}

    /** {@code "ELFENSIG"} as a little-endian u64: the first 8 bytes of a signal page. */
    public static final long MAGIC = leMagic("ELFENSIG");
    /** {@code "ELFENBAT"} as a little-endian u64: the first 8 bytes of a batch segment. */
    public static final long BATCH_MAGIC = leMagic("ELFENBAT");
    /** The layout version this binding reads and writes. */
    public static final int ABI_VERSION = 2;
    /** Size of one line. */
    public static final int LINE_SIZE = 64;
    /** Size of the page header (two lines). */
    public static final int HEADER_SIZE = 128;
    /** Bytes per lane in the page file (LC line + controller line). */
    public static final int LANE_STRIDE = 128;
    /** Size of the batch segment header. */
    public static final int BATCH_HEADER_SIZE = 64;
    /** Bytes per lane in the batch segment (one batch line). */
    public static final int BATCH_STRIDE = 64;
    /** Most lanes one page may describe. */
    public static final int MAX_LANES = 4096;
    /** Most batch partners one request lane may list. */
    public static final int MAX_PARTNERS = 6;

    /** Size of the page file for {@code lanes} lanes. */
    public static long pageSize(int lanes) {
        return HEADER_SIZE + (long) lanes * LANE_STRIDE;
    }

    /** Size of the batch segment for {@code lanes} lanes. */
    public static long batchSize(int lanes) {
        return BATCH_HEADER_SIZE + (long) lanes * BATCH_STRIDE;
    }

    /** Offset of lane {@code lane}'s LC line in the page file. */
    public static long lcLine(int lane) {
        return HEADER_SIZE + (long) lane * LANE_STRIDE;
    }

    /** Offset of lane {@code lane}'s controller line in the page file. */
    public static long controllerLine(int lane) {
        return lcLine(lane) + LINE_SIZE;
    }

    /** Offset of lane {@code lane}'s batch line in the batch segment. */
    public static long batchLine(int lane) {
        return BATCH_HEADER_SIZE + (long) lane * BATCH_STRIDE;
    }

    private static long leMagic(String s) {
        byte[] b = s.getBytes(StandardCharsets.US_ASCII);
        long v = 0;
        for (int i = 7; i >= 0; i--) {
            v = (v << 8) | (b[i] & 0xFF);
        }
        return v;
    }

    /** Page header, offsets from the start of the page file. */
    public static final class Header {
        private Header() {}

        /** u64 {@link #MAGIC}. */
        public static final int MAGIC = 0;
        /** u32 ABI version. */
        public static final int ABI_VERSION = 8;
        /** u32 line size (64). */
        public static final int LINE_SIZE = 12;
        /** u64 size of the file. */
        public static final int TOTAL_SIZE = 16;
        /** u32 lanes described. */
        public static final int LANE_COUNT = 24;
        /** u32 {@link Clock} kind. */
        public static final int CLOCK = 28;
        /** u64 clock rate. */
        public static final int TICKS_PER_SEC = 32;
        /** u64 random instance id, repeated in the batch segment. */
        public static final int INSTANCE = 40;
        /** u32 creating process. */
        public static final int CREATOR_PID = 48;
        /** u32 System V shm id of the batch segment. */
        public static final int BATCH_SHMID = 52;
        /** u64 creation time, Unix seconds. */
        public static final int CREATED_UNIX_S = 56;
        /** u64 page clock at the controller's last sign of life (line 1). */
        public static final int HEARTBEAT = 64;
        /** u64 {@link Control} bits (line 1). */
        public static final int CONTROL = 72;
        /**
         * u64 heartbeat fail-safe (line 1): a heartbeat older than this many
         * ns pauses batch threads as {@code KILL} does; 0 = no check.
         */
        public static final int HEARTBEAT_STALE_NS = 80;
    }

    /** A lane's LC line, offsets from the line's start. */
    public static final class LcLine {
        private LcLine() {}

        /** u64 {@link State}-packed busy bit, begin sequence, queue length. */
        public static final int STATE = 0;
        /** u64 id passed to request_begin. */
        public static final int REQUEST_ID = 8;
        /** u64 page clock at the running request's begin. */
        public static final int BUSY_SINCE = 16;
        /** u64 page-clock ticks spent in completed requests. */
        public static final int BUSY_TICKS = 24;
        /** u64 completed requests. */
        public static final int REQUESTS = 32;
        /** u32 thread id of the attached LC thread (0 = none). */
        public static final int LC_TID = 40;
    }

    /** A lane's controller line, offsets from the line's start. */
    public static final class ControllerLine {
        private ControllerLine() {}

        /** u32 {@link Role}. */
        public static final int ROLE = 0;
        /** u32 logical CPU. */
        public static final int CPU = 4;
        /** u32 policy id ({@link dev.elfen.policy.PolicyKind#id()}). */
        public static final int POLICY = 8;
        /** u32 {@link Nap} backend id. */
        public static final int NAP = 12;
        /** u64 co-running budget per period, ns. */
        public static final int BUDGET_NS = 16;
        /** u32 dynamic refresh reference IPC x 1000 (0 = none). */
        public static final int REF_IPC_MILLI = 24;
        /** u32 valid entries of partners. */
        public static final int PARTNER_COUNT = 28;
        /** u32[6] partner lane indices. */
        public static final int PARTNERS = 32;
        /** u32 hybrid nap spin bound, ns. */
        public static final int HYBRID_SPIN_NS = 56;
        /** u32 seqlock: odd while the controller rewrites the line. */
        public static final int CONFIG_SEQ = 60;
    }

    /** Batch segment header, offsets from the start of the batch segment. */
    public static final class BatchHeader {
        private BatchHeader() {}

        /** u64 {@link #BATCH_MAGIC}. */
        public static final int MAGIC = 0;
        /** u32 ABI version. */
        public static final int ABI_VERSION = 8;
        /** u32 line size. */
        public static final int LINE_SIZE = 12;
        /** u64 size of the file. */
        public static final int TOTAL_SIZE = 16;
        /** u32 lanes (the page's). */
        public static final int LANE_COUNT = 24;
        /** u64 the page's instance. */
        public static final int INSTANCE = 32;
    }

    /** A lane's batch line, offsets from the line's start. */
    public static final class BatchLine {
        private BatchLine() {}

        /** u32 batch threads attached. */
        public static final int ATTACHED = 0;
        /** u32 batch threads blocked in futex on the request lane's state. */
        public static final int SLEEPERS = 4;
        /** u32 batch threads napping (any backend). */
        public static final int NAPPING = 8;
        /** u64 naps taken. */
        public static final int NAPS = 16;
        /** u64 naps ended. */
        public static final int WAKES = 24;
        /** u64 page-clock ticks running batch code. */
        public static final int RUN_TICKS = 32;
        /** u64 of those, ticks while the request lane was busy. */
        public static final int CORUN_TICKS = 40;
        /** u64 page clock at the last nap or wake. */
        public static final int LAST_CHANGE = 48;
        /** u64 checks that took the slow path. */
        public static final int SLOW_CHECKS = 56;
    }

    /** {@code header.clock}: what the page's timestamps count. */
    public static final class Clock {
        private Clock() {}

        /** TSC ticks at ticks_per_sec (Java cannot read it: see {@link PageClock}). */
        public static final int TSC = 1;
        /** CLOCK_MONOTONIC nanoseconds (ticks_per_sec = 10^9). */
        public static final int MONOTONIC_NS = 2;
    }

    /** {@code header.control} bits. */
    public static final class Control {
        private Control() {}

        /** Kill switch, mode "batch paused": batch threads must not run batch code. */
        public static final long KILL = 1;
        /**
         * Kill switch, mode "batch runs unmanaged": without {@link #KILL},
         * batch threads never nap (a compatible extension of ABI 1).
         */
        public static final long UNMANAGED = 2;
        /** Every bit this version defines. */
        public static final long KNOWN = KILL | UNMANAGED;
    }

    /** {@code controller.role}. */
    public static final class Role {
        private Role() {}

        /** The lane takes no part. */
        public static final int UNUSED = 0;
        /** LC requests run here. */
        public static final int REQUEST = 1;
        /** Batch threads run here and watch their partner request lane. */
        public static final int BATCH = 2;
    }

    /** {@code controller.nap}: the nap backend the controller asks for. */
    public static final class Nap {
        private Nap() {}

        /** Let each batch thread choose. */
        public static final int AUTO = 0;
        /** Spin, keeping the lane. */
        public static final int SPIN = 1;
        /** Block in futex. */
        public static final int FUTEX = 2;
        /** Spin up to hybrid_spin_ns, then futex. */
        public static final int HYBRID = 3;
        /** umwait (not available from Java). */
        public static final int UMWAIT = 4;
        /** mwaitx (not available from Java). */
        public static final int MWAITX = 5;
    }
}
