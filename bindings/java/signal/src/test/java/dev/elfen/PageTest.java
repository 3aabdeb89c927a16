package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Create/attach, the permission model (who may write the page file and the
 * batch segment), and every bad-input error of {@link Page}.
 */
class PageTest {
    @TempDir
    Path dir;

    private static ElfenException refused(ElfenException.Kind kind, org.junit.jupiter.api.function.Executable e,
            String... words) {
        ElfenException x = assertThrows(ElfenException.class, e);
        assertEquals(kind, x.kind(), x.getMessage());
        for (String w : words) {
            assertTrue(x.getMessage().contains(w), "'" + w + "' not in: " + x.getMessage());
        }
        return x;
    }

    private static boolean isRoot() {
        return Native.geteuid() == 0;
    }

    private static void patch(Path file, long off, long value, int size) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
            ByteBuffer b = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
            if (size == 8) {
                b.putLong(value);
            } else {
                b.putInt((int) value);
            }
            b.flip();
            ch.write(b, off);
        }
    }

    @Test
    void createAttachAndCleanup() throws Exception {
        Path p = dir.resolve("sig");
        int shmid;
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            assertEquals(384, Files.size(p));
            try (var s = Files.list(dir)) {
                assertEquals(List.of(p), s.toList(), "one file: the batch lines are no file");
            }
            assertEquals("rw-r--r--", PosixFilePermissions.toString(Files.getPosixFilePermissions(p)));
            shmid = page.batchShmid();
            assertEquals(shmid, Mem.get32(page.pageSegment(), Layout.Header.BATCH_SHMID), "the header names it");
            BatchSegment.Stat st = BatchSegment.stat(shmid);
            assertEquals(192, st.size());
            assertEquals(0644, st.mode(), "no batch region others can write by default");
            assertEquals(Native.geteuid(), st.cuid());
            assertTrue(st.markedForRemoval(), "freed with its last attachment");
            assertEquals(Access.CONTROLLER, page.access());
            assertEquals(Layout.Clock.MONOTONIC_NS, page.clockKind(), "pages Java creates are MONOTONIC_NS");
            assertEquals((int) ProcessHandle.current().pid(), page.creatorPid());
            assertEquals(1, page.instance() & 1);
            try (Page lc = Page.attach(p, Access.LC); Page b = Page.attach(p, Access.BATCH, 2)) {
                assertTrue(lc.pageWritable() && !lc.batchWritable());
                assertTrue(!b.pageWritable() && b.batchWritable());
                assertEquals(page.instance(), b.instance());
                // a store through one mapping is seen through another
                Mem.release64(lc.pageSegment(), Layout.lcLine(0), State.pack(true, 1, 0));
                assertTrue(State.busy(b.readLc(0).state()));
                Mem.add64(b.batchSegment(), Layout.batchLine(1) + Layout.BatchLine.NAPS, 1);
                assertEquals(1, lc.readBatch(1).naps());
                ControllerConfig c = b.readController(1);
                assertEquals(Layout.Role.BATCH, c.role());
                assertEquals(1, c.cpu());
                assertEquals(List.of(0), c.partners());
                // read-only handles refuse writes with an error, not a crash
                refused(ElfenException.Kind.READ_ONLY, () -> b.setKill(true), "read-only", "kill");
                refused(ElfenException.Kind.READ_ONLY, () -> b.writeController(0, TestSupport.twoLanes(1, 0)
                        .lanes().get(0)), "read-only", "controller line");
                refused(ElfenException.Kind.READ_ONLY, b::beat, "read-only", "heartbeat");
                // and the mapping itself is read-only: FFM refuses the store (the OS would fault)
                assertThrows(IllegalArgumentException.class,
                        () -> Mem.set64(b.pageSegment(), Layout.lcLine(0), 0));
                assertThrows(IllegalArgumentException.class,
                        () -> Mem.set32(lc.batchSegment(), Layout.batchLine(1), 0));
            }
        }
        assertFalse(Files.exists(p), "the creator removes its page file");
        assertFalse(BatchSegment.exists(shmid), "and its segment is freed with the last handle");
    }

    @Test
    void aPersistedPageNobodyHoldsIsRefusedWithTheReason() throws Exception {
        Path p = dir.resolve("sig");
        int shmid;
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            page.persist();
            shmid = page.batchShmid();
        }
        assertTrue(Files.exists(p), "persisted");
        assertFalse(BatchSegment.exists(shmid), "nobody holds it: the segment is gone");
        refused(ElfenException.Kind.BATCH_GONE, () -> Page.attach(p, Access.OBSERVER), p.toString(),
                "shm id " + shmid, "pid " + ProcessHandle.current().pid(), "is gone", "re-create");
    }

    @Test
    void aBatchGroupWritesTheBatchSegment() throws Exception {
        try (Page page = Page.create(dir.resolve("grp"), TestSupport.twoLanes(1, 0).withBatchGroup(65534))) {
            BatchSegment.Stat st = BatchSegment.stat(page.batchShmid());
            assertEquals(65534, st.gid());
            assertEquals(0664, st.mode());
        }
        refused(ElfenException.Kind.BAD_SPEC, () -> Page.create(dir.resolve("x"),
                TestSupport.twoLanes(1, 0).withModes(0666, 0644, null)), "page_mode 666", "owner only");
    }

    @Test
    void untrustedPageFilesAreRefusedNamingOwnerAndMode() throws Exception {
        Path p = dir.resolve("sig");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rw-rw-r--"));
            refused(ElfenException.Kind.UNTRUSTED, () -> Page.attach(p, Access.OBSERVER), p.toString(), "mode 664",
                    "group or other users can write it");
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rw-r--rw-"));
            refused(ElfenException.Kind.UNTRUSTED, () -> Page.attach(p, Access.LC));
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rw-r--r--"));
            Page.attach(p, Access.LC).close();
            Path fifo = dir.resolve("fifo");
            assertEquals(0, new ProcessBuilder("mkfifo", fifo.toString()).start().waitFor());
            refused(ElfenException.Kind.UNTRUSTED, () -> Page.attach(fifo, Access.OBSERVER), "not a regular file");
            Assumptions.assumeTrue(isRoot(), "needs root: gives a page file to another user (the modes were checked)");
            Files.setAttribute(p, "unix:uid", 65534);
            refused(ElfenException.Kind.UNTRUSTED, () -> Page.attach(p, Access.LC), "user nobody (uid 65534)",
                    "neither root nor this process's user");
            refused(ElfenException.Kind.EXISTS, () -> Page.create(p, TestSupport.twoLanes(1, 0)), "already exists",
                    "user nobody (uid 65534)", "pid " + ProcessHandle.current().pid(), "belongs to another user",
                    "rm " + p);
        }
    }

    @Test
    void garbledBatchLinesNeitherStopTheLcNorPassAttach() throws Exception {
        Path p = dir.resolve("sig");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0)); LcLane lc = LcLane.attach(page, 0)) {
            MemorySegment b = page.batchSegment();
            java.util.Random rnd = new java.util.Random(42);
            byte[] junk = new byte[(int) b.byteSize()];
            for (int round = 0; round < 2000; round++) {
                if (round % 2 == 0) {
                    rnd.nextBytes(junk);
                } else {
                    java.util.Arrays.fill(junk, (byte) 0xff);
                }
                MemorySegment.copy(junk, 0, b, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, junk.length);
                // sleepers read as garbage: at worst a needless futex wake
                lc.requestBegin(round);
                lc.requestEnd();
            }
            assertEquals(2000, page.readLc(0).requests(), "the LC served every request");
            page.readBatch(1); // the counters read as they are
            refused(ElfenException.Kind.BAD_MAGIC, () -> Page.attach(p, Access.OBSERVER), "batch segment",
                    "shm id " + page.batchShmid());
        }
    }

    @Test
    void createRefusesAnExistingPageUnlessReplacing() throws Exception {
        Path p = dir.resolve("sig");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            page.persist();
        }
        refused(ElfenException.Kind.EXISTS, () -> Page.create(p, TestSupport.twoLanes(1, 0)), "already exists",
                "still running", "pid " + ProcessHandle.current().pid(), PageFiles.describeUser(Native.geteuid()),
                "create with replace");
        try (Page page = Page.create(p, TestSupport.twoLanes(2, 5).withReplace(true))) {
            assertEquals(2, page.readController(0).policy());
        }
        assertFalse(Files.exists(p));
        try (var s = Files.list(dir)) {
            assertEquals(List.of(), s.toList(), "no temporary files left");
        }
    }

    @Test
    void controllerRewritesUnderTheSeqlockAndSetsTheKillSwitch() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0))) {
            LaneSpec l = page.readController(1).role() == Layout.Role.BATCH ? TestSupport.twoLanes(1, 0).lanes().get(1)
                    : null;
            page.writeController(1, l.withPolicy(3).withBudgetNs(777));
            ControllerConfig c = page.readController(1);
            assertEquals(3, c.policy());
            assertEquals(777, c.budgetNs());
            assertEquals(2, c.seq());
            page.setKill(true);
            assertTrue(page.killed());
            page.setKill(false);
            assertFalse(page.killed());
            page.beat();
            assertTrue(page.heartbeat() > 0);
            refused(ElfenException.Kind.BAD_SPEC, () -> page.writeController(1, l.withNap(9)), "unknown nap backend 9");
            refused(ElfenException.Kind.BAD_SPEC, () -> page.writeController(1,
                    new LaneSpec(1, Layout.Role.BATCH, List.of(1), 1, 0, 0, 0, 0)), "bad partners");
            refused(ElfenException.Kind.LANE_OUT_OF_RANGE, () -> page.readController(2), "lane 2 is out of range",
                    "has 2 lanes");
            // a line left odd (a controller that died mid-rewrite) is reported, not waited on forever
            Mem.set32(page.pageSegment(), Layout.controllerLine(1) + Layout.ControllerLine.CONFIG_SEQ, 3);
            refused(ElfenException.Kind.STUCK_CONTROLLER, () -> page.readController(1), "mid-rewrite");
        }
    }

    @Test
    void specValidation() {
        PageSpec two = TestSupport.twoLanes(1, 0);
        refused(ElfenException.Kind.BAD_SPEC, () -> two.withLanes(List.of()).validate(), "1..=4096 lanes, got 0");
        refused(ElfenException.Kind.BAD_SPEC, () -> two.withLane(1, new LaneSpec(0, Layout.Role.BATCH, List.of(0), 1,
                0, 0, 0, 0)).validate(), "cpu 0 appears twice");
        refused(ElfenException.Kind.BAD_SPEC, () -> two.withLane(1, new LaneSpec(1, Layout.Role.BATCH, List.of(5), 1,
                0, 0, 0, 0)).validate(), "partner 5 is not another lane");
        refused(ElfenException.Kind.BAD_SPEC, () -> two.withLane(1, new LaneSpec(1, Layout.Role.REQUEST, List.of(0),
                1, 0, 0, 0, 0)).validate(), "must be a batch lane");
        refused(ElfenException.Kind.BAD_SPEC, () -> two.withLane(1, two.lanes().get(1).withNap(6)).validate(),
                "unknown nap backend 6");
        refused(ElfenException.Kind.BAD_SPEC, () -> Page.create(dir.resolve("x"), two.withLanes(List.of())));
        assertFalse(Files.exists(dir.resolve("x")));
    }

    @Test
    void everyBadInputIsRefusedWithTheFileAndTheMismatch() throws Exception {
        refused(ElfenException.Kind.MISSING, () -> Page.attach(dir.resolve("nope"), Access.OBSERVER),
                "nope does not exist");
        Path shortFile = dir.resolve("short");
        Files.write(shortFile, new byte[100]);
        refused(ElfenException.Kind.SHORT, () -> Page.attach(shortFile, Access.OBSERVER), "is 100 bytes",
                "128-byte header");
        Path p = dir.resolve("sig");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            byte[] good = Files.readAllBytes(p);
            MemorySegment b = page.batchSegment();
            byte[] goodBatch = b.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
            String seg = "(batch segment, System V shm id " + page.batchShmid() + ")";
            record Case(boolean batch, long off, long value, int size, ElfenException.Kind kind, String words) {}
            List<Case> cases = List.of(
                    new Case(false, 0, 0x4e4f4e5f4e4f4eL, 8, ElfenException.Kind.BAD_MAGIC, "not an elfen signal page"),
                    new Case(false, Layout.Header.ABI_VERSION, 1, 4, ElfenException.Kind.BAD_VERSION,
                            "ABI version 1, this build speaks version 2"),
                    new Case(false, Layout.Header.LINE_SIZE, 128, 4, ElfenException.Kind.MISMATCH, "line_size is 128"),
                    new Case(false, Layout.Header.TOTAL_SIZE, 999, 8, ElfenException.Kind.MISMATCH,
                            "total_size (vs its actual size) is 999, expected 384"),
                    new Case(false, Layout.Header.LANE_COUNT, 0, 4, ElfenException.Kind.MISMATCH,
                            "lane_count (must be 1..=4096)"),
                    new Case(false, Layout.Header.LANE_COUNT, 3, 4, ElfenException.Kind.MISMATCH,
                            "total_size (vs lane_count)"),
                    new Case(false, Layout.Header.CLOCK, 7, 4, ElfenException.Kind.MISMATCH, "clock is 7"),
                    new Case(false, Layout.Header.TICKS_PER_SEC, 0, 8, ElfenException.Kind.MISMATCH, "clock is 2"),
                    new Case(false, Layout.Header.BATCH_SHMID, 0x7ffffff0, 4, ElfenException.Kind.BATCH_GONE,
                            "shm id 2147483632"),
                    new Case(true, 0, 0, 8, ElfenException.Kind.BAD_MAGIC, "not an elfen batch segment"),
                    new Case(true, Layout.BatchHeader.LANE_COUNT, 1, 4, ElfenException.Kind.MISMATCH, seg),
                    new Case(true, Layout.BatchHeader.INSTANCE, 42, 8, ElfenException.Kind.MISMATCH,
                            "instance (the batch segment belongs to another page) is 42"));
            for (Case c : cases) {
                Files.write(p, good);
                MemorySegment.copy(goodBatch, 0, b, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, goodBatch.length);
                if (c.batch()) {
                    if (c.size() == 8) {
                        Mem.set64(b, c.off(), c.value());
                    } else {
                        Mem.set32(b, c.off(), (int) c.value());
                    }
                } else {
                    patch(p, c.off(), c.value(), c.size());
                }
                ElfenException e = refused(c.kind(), () -> Page.attach(p, Access.OBSERVER), c.words(), p.toString());
                assertTrue(e.path().toString().startsWith(p.toString()), e.path().toString());
            }
            Files.write(p, good);
            MemorySegment.copy(goodBatch, 0, b, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, goodBatch.length);
            refused(ElfenException.Kind.MISMATCH, () -> Page.attach(p, Access.OBSERVER, 4),
                    "lane_count is 2, expected 4");
            Page.attach(p, Access.BATCH).close();
        }
    }

    @Test
    void permissionDeniedNamesTheRoleAndMode() throws Exception {
        Path p = dir.resolve("sig");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("r--r--r--"));
            Assumptions.assumeFalse(isRoot(), "needs unprivileged: root may open a 0444 file read-write");
            refused(ElfenException.Kind.PERMISSION_DENIED, () -> Page.attach(p, Access.LC), "read-write",
                    "LC access");
        }
    }

    @Test
    void aJavaWriterRefusesATscPageAndWritesNothing() throws Exception {
        TestSupport.GoldenCopy g = TestSupport.copyGolden(dir, "tsc");
        Path p = g.path();
        patch(p, Layout.Header.CLOCK, Layout.Clock.TSC, 4);
        patch(p, Layout.Header.TICKS_PER_SEC, 2_100_000_000L, 8);
        byte[] page = Files.readAllBytes(p);
        byte[] batch = g.batch().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
        for (Access a : List.of(Access.LC, Access.BATCH, Access.CONTROLLER)) {
            refused(ElfenException.Kind.CLOCK_UNSUPPORTED, () -> Page.attach(p, a), "TSC ticks", "Java",
                    "nothing was written", "CLOCK_MONOTONIC", "OBSERVER", p.toString());
        }
        refused(ElfenException.Kind.CLOCK_UNSUPPORTED, () -> LcLane.open(p, 0));
        refused(ElfenException.Kind.CLOCK_UNSUPPORTED, () -> BatchThread.open(p, 1, BatchOptions.defaults()));
        assertArrayEquals(page, Files.readAllBytes(p), "page untouched");
        assertArrayEquals(batch, g.batch().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE), "batch segment untouched");
        // observers may read it where the machine has an invariant TSC (as the Rust side)
        if (Page.InvariantTsc.PRESENT) {
            try (Page o = Page.attach(p, Access.OBSERVER)) {
                assertEquals(Layout.Clock.TSC, o.clockKind());
                assertEquals(2_100_000_000L, o.ticksPerSec());
                assertEquals(2_000_000_000L, o.ticksToNs(4_200_000_000L));
                assertEquals(5, State.seq(o.readLc(0).state()));
            }
        } else {
            refused(ElfenException.Kind.MISMATCH, () -> Page.attach(p, Access.OBSERVER), "no invariant TSC");
            System.out.println("note: no invariant TSC here; the observer of a TSC page is refused, as in Rust");
        }
        g.close();
    }

    @Test
    void pathsOfNames() {
        assertEquals(Path.of("/dev/shm/elfen"), Page.pagePath("elfen"));
        assertEquals(Path.of("/tmp/x/sig"), Page.pagePath("/tmp/x/sig"));
    }
}
