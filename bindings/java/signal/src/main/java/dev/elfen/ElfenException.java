package dev.elfen;

import java.nio.file.Path;
import java.util.List;
import java.util.stream.Collectors;

/**
 * Why a page could not be created or attached, or an LC lane or batch thread
 * could not attach. Everything is found at attach time, so the LC calls and
 * the batch check never throw it. Every message names the file and the
 * mismatch, in the words of the Rust side ({@code ShmError},
 * {@code RuntimeError}); {@link #kind()} tells them apart in code.
 */
public final class ElfenException extends Exception {
    private static final long serialVersionUID = 1L;

    /** What went wrong. */
    public enum Kind {
        /** No file at the path. */
        MISSING,
        /** The OS refused the access this role needs. */
        PERMISSION_DENIED,
        /** Any other OS error. */
        OS,
        /** The file is shorter than its header. */
        SHORT,
        /** Wrong magic number. */
        BAD_MAGIC,
        /** Another ABI version. */
        BAD_VERSION,
        /** A header field disagrees with the file or the layout. */
        MISMATCH,
        /** The page's clock is TSC ticks, which a Java writer cannot read. */
        CLOCK_UNSUPPORTED,
        /** A lane index beyond the page. */
        LANE_OUT_OF_RANGE,
        /** A page spec that cannot be laid out. */
        BAD_SPEC,
        /** A controller line stuck mid-rewrite. */
        STUCK_CONTROLLER,
        /** A write through a handle attached read-only. */
        READ_ONLY,
        /** Creating over an existing page without replace (or over another user's file). */
        EXISTS,
        /** A page file others can write (or owned by another user), refused. */
        UNTRUSTED,
        /** The batch segment the page names does not exist (in this IPC namespace). */
        BATCH_GONE,
        /** The OS refused to attach the batch segment with the access this role needs. */
        BATCH_DENIED,
        /** The segment id the page names belongs to another user's segment. */
        BATCH_FOREIGN,
        /** A batch thread asked for a request lane. */
        BATCH_ON_REQUEST_LANE,
        /** An LC thread asked for a batch lane. */
        LC_ON_BATCH_LANE,
        /** The lane takes no part, or its controller line is inconsistent. */
        BAD_LANE,
        /** Another live thread serves this request lane. */
        LANE_TAKEN,
        /** Unknown policy id in the controller line. */
        UNKNOWN_POLICY,
        /** Invalid policy parameters. */
        BAD_POLICY,
        /** Unknown nap backend id in the controller line. */
        UNKNOWN_NAP,
        /** The nap backend cannot run here. */
        NAP_UNAVAILABLE,
        /** Pinning the batch thread failed. */
        PIN,
        /** The calling thread cannot attach (a virtual thread). */
        WRONG_THREAD,
        /** This OS or CPU architecture is not supported by the binding. */
        UNSUPPORTED_PLATFORM,
    }

    private final Kind kind;
    private final transient Path path;

    ElfenException(Kind kind, Path path, String message) {
        this(kind, path, message, null);
    }

    ElfenException(Kind kind, Path path, String message, Throwable cause) {
        super(message, cause);
        this.kind = kind;
        this.path = path;
    }

    /** What went wrong. */
    public Kind kind() {
        return kind;
    }

    /** The file concerned ({@code null} for a bad spec). */
    public Path path() {
        return path;
    }

    // ---- page errors (ShmError)

    static ElfenException missing(Path p) {
        return new ElfenException(Kind.MISSING, p, "signal page " + p
                + " does not exist (is the LC service or elfen controller that creates it running?)");
    }

    static ElfenException permissionDenied(Path p, boolean rw, String role) {
        return new ElfenException(Kind.PERMISSION_DENIED, p, "signal page " + p
                + ": permission denied opening it " + (rw ? "read-write" : "read-only") + " (" + role
                + " access; see the permission model in docs/protocol.md)");
    }

    static ElfenException os(Path p, String op, Throwable cause) {
        String m = cause.getMessage() == null ? cause.getClass().getSimpleName() : cause.getMessage();
        return new ElfenException(Kind.OS, p, "signal page " + p + ": " + op + ": " + m, cause);
    }

    static ElfenException shortFile(Path p, long size, int need) {
        return new ElfenException(Kind.SHORT, p, "signal page " + p + " is " + size
                + " bytes, shorter than its " + need + "-byte header: not a signal page (or truncated)");
    }

    static ElfenException badMagic(Path p, String found, String expected, String what) {
        return new ElfenException(Kind.BAD_MAGIC, p, "signal page " + p + ": magic is \"" + found
                + "\", expected \"" + expected + "\": not an elfen " + what);
    }

    static ElfenException badVersion(Path p, int found) {
        return new ElfenException(Kind.BAD_VERSION, p, "signal page " + p + ": ABI version "
                + Integer.toUnsignedString(found) + ", this build speaks version " + Layout.ABI_VERSION
                + "; rebuild or restart the side that created it");
    }

    static ElfenException mismatch(Path p, String field, long found, long expected) {
        return new ElfenException(Kind.MISMATCH, p, "signal page " + p + ": " + field + " is "
                + Long.toUnsignedString(found) + ", expected " + Long.toUnsignedString(expected));
    }

    static ElfenException laneOutOfRange(Path p, int lane, int lanes) {
        return new ElfenException(Kind.LANE_OUT_OF_RANGE, p, "lane " + Integer.toUnsignedString(lane)
                + " is out of range: the signal page " + p + " has " + lanes + " lanes (0.." + lanes + ")");
    }

    static ElfenException badSpec(String what) {
        return new ElfenException(Kind.BAD_SPEC, null, "invalid signal page spec: " + what);
    }

    static ElfenException stuckController(Path p, int lane) {
        return new ElfenException(Kind.STUCK_CONTROLLER, p, "signal page " + p + ": lane " + lane
                + "'s controller line has been mid-rewrite for 100 ms (did the controller die while writing it?)");
    }

    static ElfenException readOnly(Path p, String what) {
        return new ElfenException(Kind.READ_ONLY, p,
                "cannot " + what + ": signal page " + p + " is attached read-only by this process");
    }

    static ElfenException exists(Path p, String owner, int pid, boolean alive, String advice) {
        return new ElfenException(Kind.EXISTS, p, "signal page " + p + " already exists (owned by " + owner
                + ", created by pid " + Integer.toUnsignedString(pid) + ", "
                + (alive ? "still running" : "no longer running") + "); " + advice);
    }

    static ElfenException untrusted(Path p, String owner, int mode, String why) {
        return new ElfenException(Kind.UNTRUSTED, p, "signal page " + p + " (owned by " + owner + ", mode "
                + Integer.toOctalString(mode) + ") is refused: " + why + ". Whoever can write a page file can crash"
                + " or steer every process that maps it; remove it (as its owner or root) and let the page's"
                + " creator make it again");
    }

    static ElfenException batchGone(Path p, int shmid, int pid, boolean creatorAlive) {
        return new ElfenException(Kind.BATCH_GONE, p, "signal page " + p + ": its batch segment (System V shm id "
                + Integer.toUnsignedString(shmid) + ", created by pid " + Integer.toUnsignedString(pid) + ") is gone: "
                + (creatorAlive
                        ? "its creator still runs but no longer holds the page (a page lives only while some process"
                                + " has it attached: re-create it), or this process is in another IPC namespace than"
                                + " the creator (a container needs the host's: --ipc=host, hostIPC)"
                        : "its creator is no longer running and no process holds the page any more: re-create the"
                                + " page (restart its creator)"));
    }

    static ElfenException batchDenied(Path p, int shmid, boolean rw, String role, String holder) {
        return new ElfenException(Kind.BATCH_DENIED, p, "signal page " + p + ": permission denied attaching its"
                + " batch segment (System V shm id " + Integer.toUnsignedString(shmid) + ", " + holder + ") "
                + (rw ? "read-write" : "read-only") + " (" + role + " access). Batch processes need write access:"
                + " the page's creator names a batch group they belong to (the daemon's [page] batch_group); see"
                + " the permission model in docs/protocol.md");
    }

    static ElfenException batchForeign(Path p, int shmid, String creator, String owner) {
        return new ElfenException(Kind.BATCH_FOREIGN, p, "signal page " + p + ": System V shm id "
                + Integer.toUnsignedString(shmid) + " was created by " + creator + ", not by the page's owner ("
                + owner + "): the page's own segment is gone and its id was reused; re-create the page");
    }

    // ---- attach errors (RuntimeError)

    static ElfenException batchOnRequestLane(Path p, int lane, List<Integer> batchLanes) {
        String list = batchLanes.stream().map(String::valueOf).collect(Collectors.joining(", "));
        String words = switch (batchLanes.size()) {
            case 0 -> "it has none";
            case 1 -> "its batch lane is " + list;
            default -> "its batch lanes are " + list;
        };
        return new ElfenException(Kind.BATCH_ON_REQUEST_LANE, p, "lane " + lane + " of signal page " + p
                + " is a request lane (LC requests run there); a batch thread attaches to a batch lane: " + words);
    }

    static ElfenException lcOnBatchLane(Path p, int lane, long requestLane) {
        return new ElfenException(Kind.LC_ON_BATCH_LANE, p, "lane " + lane + " of signal page " + p
                + " is a batch lane (partner of request lane " + requestLane
                + "); an LC thread attaches to a request lane (here lane " + requestLane + ")");
    }

    static ElfenException badLane(Path p, int lane, String what) {
        return new ElfenException(Kind.BAD_LANE, p, "lane " + lane + " of signal page " + p + ": " + what);
    }

    static ElfenException readOnlyFor(Path p, String file, String role, String need) {
        return new ElfenException(Kind.READ_ONLY, p, "signal page " + p + " is attached read-only for the "
                + file + " this " + role + " writes; attach it with " + need
                + " access (see the permission model in docs/protocol.md)");
    }

    static ElfenException laneTaken(Path p, int lane, int tid) {
        return new ElfenException(Kind.LANE_TAKEN, p, "lane " + lane + " of signal page " + p
                + " already has an LC thread (tid " + Integer.toUnsignedString(tid)
                + ", still running); one LC thread per request lane");
    }

    static ElfenException unknownPolicy(Path p, int lane, int id) {
        return new ElfenException(Kind.UNKNOWN_POLICY, p, "lane " + lane + " of signal page " + p
                + ": unknown policy id " + Integer.toUnsignedString(id) + " in the controller line (this build knows"
                + " 0 unmanaged, 1 borrow_idle, 2 fixed_budget, 3 refresh_budget, 4 dynamic_refresh)");
    }

    static ElfenException badPolicy(Path p, int lane, IllegalArgumentException e) {
        return new ElfenException(Kind.BAD_POLICY, p, "lane " + lane + " of signal page " + p + ": "
                + e.getMessage(), e);
    }

    static ElfenException unknownNap(Path p, int lane, int id) {
        return new ElfenException(Kind.UNKNOWN_NAP, p, "lane " + lane + " of signal page " + p
                + ": unknown nap backend id " + Integer.toUnsignedString(id)
                + " in the controller line (0 auto, 1 spin, 2 futex, 3 hybrid, 4 umwait, 5 mwaitx)");
    }

    static ElfenException napUnavailable(String backend, String reason) {
        return new ElfenException(Kind.NAP_UNAVAILABLE, null,
                "nap backend " + backend + " is unavailable: " + reason);
    }

    static ElfenException pin(Path p, int lane, int cpu, String why) {
        return new ElfenException(Kind.PIN, p, "cannot pin the batch thread to lane " + lane + " (cpu "
                + Integer.toUnsignedString(cpu) + ") of signal page " + p + ": " + why);
    }
}
